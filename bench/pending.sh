#!/usr/bin/env bash
# The measurements docs/performance.md ("Next") holds pending for the H200, as calls on the GPU
# machine from the repository root with .whl/ and .variants/ carried (each call at most ~560 s):
#   python3 bench/experiment_tree.py .variants/<patch name> bench/experiments/<patch name>.patch
#       (first, on a machine with GNU patch, for each experiment; missing trees are built here if it can)
#   bash bench/pending.sh windows contenders     (first call)
#   bash bench/pending.sh slices edges           (second call; slices runs first)
# windows: the smoke test and GPU suite on the routed programs; the one-row backward experiments
#   (bench/experiments/one_row_dw_*.patch) beside the routed programs at T = 1 (each change at H 256
#   and 1536, all three at H 512 and, with the one-row kernel's reach moved, at H 2048); the dw
#   chunk counts (cake_windows.DW_CHUNKS, measured on an H100) at 1024-4096 rows; the forward's
#   engines with FP32 weight at H 2048 (its edge, the H200's of round 11, lost on the H100).
# contenders: every contender, backward, 1024-4096 tokens (the rows the H100's windows moved).
# edges: the fused edges (MEASURED_FUSED_EDGES, DW_ONE_ROW_ROWS; an H100's) re-timed.
# slices: the backward at H 2048 / 4096 with two 16-byte slices a thread
#   (bench/experiments/bwd_two_slices_h2048_h4096.patch; new bits, so timing and distance only).
# Each step stops in time for the logs: $OUT/logs.tgz, a folder a step.
set -o pipefail
OUT=${OUT:-/tmp/out}; LOGS=/tmp/logs; mkdir -p "$OUT" "$LOGS"
trap 'tar czf "$OUT/logs.tgz" -C "$LOGS" .' EXIT
STEPS=" $* "
[[ $STEPS == "  " ]] && { echo "usage: bash bench/pending.sh [windows] [contenders] [edges] [slices]"; exit 2; }
T0=$SECONDS
BUDGET=${BUDGET:-560}
left() { echo $(( BUDGET - (SECONDS - T0) )); }
for f in bench/experiments/*.patch; do  # each experiment's tree is .variants/<its patch's name>
  t=$(basename "$f" .patch)
  [[ -f .variants/$t/build.json ]] && continue
  if command -v patch >/dev/null; then
    python3 bench/experiment_tree.py ".variants/$t" "$f" || exit 1
  else
    echo "pending: .variants/$t not carried and no GNU patch here: its experiment is skipped"
  fi
done
if [[ $STEPS == *" windows "* ]]; then
  # Leave the contenders step ~260 s when it follows in this call.
  RESERVE=0; [[ $STEPS == *" contenders "* ]] && RESERVE=260
  DEADLINE=$(( $(left) - RESERVE )) \
  PARTITION_ARGS="--widths 256,512,1536,2048,4096 --tokens 1024,2048,4096 --chunk-rows 4,8,16,32 --no-single" \
  ENGINE_ARGS="--passes fwd --weight fp32 --widths 2048 --tokens 1024,2048,4096,16384" \
  VARIANT_TREES=".variants/one_row_dw_first/ .variants/one_row_dw_direct_stores/ .variants/one_row_dw_batched_check/ .variants/one_row_dw_lean/" \
  VARIANT_ARGS="--old-only --passes bwd --widths 256,1536 --tokens 1" \
  VARIANT_TREES2=".variants/one_row_dw_lean/ .variants/one_row_dw_lean_to_2048/" VARIANT_ARGS2="--old-only --passes bwd --widths 512,2048 --tokens 1" \
  LOG=$LOGS/windows OUT=/tmp/step_out bash bench/device_run.sh smoke gputests variants variants2 partition engines ||
    { echo "pending: the windows step failed (smoke test?): nothing else runs"; exit 1; }
fi
if [[ $STEPS == *" contenders "* ]]; then
  DEADLINE=$(left) BENCH_ARGS="--passes bwd --min-tokens 1024 --max-tokens 4096 --widths 256,512,1536,2048,4096,5120,6144" \
  LOG=$LOGS/contenders OUT=/tmp/step_out bash bench/device_run.sh bench plain
fi
if [[ $STEPS == *" slices "* ]]; then
  T=$(left); (( T > 200 )) && T=200  # the rest for the edges step when it follows
  DEADLINE=$T VARIANT_TREES=".variants/bwd_two_slices_h2048_h4096/" \
  VARIANT_ARGS="--old-only --passes bwd --widths 2048,4096 --tokens 1024,4096,16384,65536" \
  LOG=$LOGS/slices OUT=/tmp/step_out bash bench/device_run.sh variants
fi
if [[ $STEPS == *" edges "* ]]; then
  E="--widths 256,512,1536,2048,4096,5120,6144 --tokens 384,448,512,576,640,768,896,1024"
  DEADLINE=$(left) PARTITION_ARGS="$E --chunk-rows 1 --max-chunks 1024 --fused --pair-class --no-single" \
  LOG=$LOGS/edges OUT=/tmp/step_out bash bench/device_run.sh partition
fi
