#!/usr/bin/env bash
# Checks of the routed programs and windows, and the experiments of bench/experiments/, as one call
# on the GPU machine from the repository root with .whl/ carried (at most ~560 s; .variants/ too when
# bench/experiments/ holds a patch):
#   python3 bench/experiment_tree.py .variants/<patch name> bench/experiments/<patch name>.patch
#       (first, on a machine with GNU patch, for each experiment; missing trees are built here if it can)
#   python3 bench/experiment_tree.py .variants/<rev> --rev <rev>
#       (a commit's programs, for the steps that time a change against them: loadorder, groups; from
#       a git checkout, so always built beforehand and carried)
#   bash bench/pending.sh check ctas phases variants
# (round 33 ran all four on the H200: docs/performance.md, "Latest round").
# check: the smoke test and GPU suite on the routed programs and windows; the fused edges of
#   H 512 / 1536 / 4096 / 5120 / 6144 at 320-768 rows (where the H200 tied in rounds 29 and 33); the
#   forward's engines with FP32 weight at H 2048 from 4096 rows (its edge since round 29).
# ctas: bench/fwd_launch.py over the forward's CTA-size steps (rounds 31 and 33), the plain,
#   FP32-weight and residual rows: the shipped size against the rule's ("spread") and 1 / 2 rows.
# phases: bench/phases.py (the forward's few-row calls taken apart by phase: docs/performance.md
#   "Next", the forward at T 256-1024).
# variants: every experiment of bench/experiments/ beside the routed programs (VARIANT_ARGS: which
#   rows; each patch's header names them).
# ringedge: H 1536's backward engine edge with each engine on its own partition (docs/performance.md
#   "Next", item 2): at 8192-16384 rows the shipped direct engine (264 chunks) beside the ring forced
#   on 132 chunks, the ring windows' count since round 33 (bench/partition.py --chunks 132 --engine
#   ring); the BF16, FP32-weight and residual rows, a process each.
# ringwide: the same at H 2048 / 4096 (direct throughout since round 23, when the ring ran 264 chunks
#   and lost 1.2-6% to it) from 8192 to 65536 rows, on 132 and 264 chunks.
# ringdepth: the ring's row depths 1 / 2 / 4 at H 2048 / 4096 on 132 chunks (bench/variants.py --engine
#   ring --chunks 132; the routed programs hold depth 4 there).
# depths: the ring's row depths on its own windows: H 1536 at 4 / 6 / 8 (BF16 and FP32 weight; 8
#   holds no residual stage pair, so a residual call there would run direct), H 5120 at 2 / 3.
# suite: the smoke test and the GPU suite alone (the check step's first half, without its timings).
# h5120: H 5120 with its plain rows' ring at three rows an item (round 34): the residual rows' ring at
#   two / three (bench/variants.py --residual; three lost 3-4% on an H100) and the engine edge (3072,
#   timed in round 27 with the ring at two) by bench/engines.py at 2048-4096 rows, BF16 and FP32 weight.
# pack256: the forward's packed H 256 rows at 2 / 4 / 8 / 16 rows a CTA beside the rule's 32 from 4096
#   rows (round 35's Nsight Compute run had them 10% over PyTorch's neg of the same bytes on an H100;
#   round 22 timed 8-32 only), and the narrow canonical rows at 4 / 8 (bench/fwd_launch.py).
# flush: bench/split.py with the benchmark's in-place flush, then with a read-only one (L2 clean
#   at each call's start), the package and PyTorch's floors, at 1024 / 65536 rows of H 256 and 65536
#   of H 512 / 4096 (round 37: Nsight Compute, whose launches start clean, had the narrow backward
#   7% over the add on an H100, where the benchmark's flush had it 20% on the H200).
# edge4096: H 4096's fused edge with its two-row row CTAs (round 40: 896 on an H100, which put the fused
#   form 4.5-9% ahead at 896 rows and tied at 1024) at 640-1280 rows, BF16 and FP32 weight and the
#   residual (bench/partition.py --fused --pair-class, a process each).
# groups: the fused form's row groups of round 41 (layout.cuh fused_group_rows: four rows at H 1536,
#   two at H 5120 without the residual, from 320 rows): the GPU suite on them, the routed programs
#   against .variants/head (carried: the programs before them, commit ebce6df) at 256-512 rows, BF16
#   and FP32 weight and the residual, then the fused edges of H 1536 (384-640 rows) and H 5120
#   (512-768), BF16 and FP32 weight (bench/partition.py --fused --pair-class, a process each). Round
#   42 ran it on an H100 (H 5120's edge moved to 640); the H200's run checks that edge there.
# tables: every contender, BF16 weight, no residual, both passes in one process (`device_run.sh
#   bench plain`; ~70 s a pass on an H100).
# t1: the one-row calls kernel by kernel (bench/split.py) with BF16 and with FP32 weight, a process
#   each, alternated twice, then with the read-only flush (~100 s): round 21's quick table had the
#   FP32-weight backward at [1,256] / [1,512] 6-12% faster than the BF16 one on the H200 (round 45,
#   an H100: the kernel's own time; its cause a BF16 weight's unpacking issued before rstd's load).
# place: bench/placement.py, the one-row backward at [1,256] / [1,512] with BF16 and FP32 weight at
#   16 random placements of its six tensors, each beside PyTorch's add there, with the benchmark's
#   flush and with the read-only one (~100 s): t1 (round 45, an H100) had the FP32-weight kernel
#   0.1-0.2 us faster in each of two alternated processes; this step (round 45, an H100) had it
#   faster at every placement, so the gap is the weight's, not the addresses'.
# loadorder: the fused form's loads in the order rstd, the rows, the weights (round 45: backward_fused.cuh
#   fused_dx_rows; timed on an H100 at H 256 / 512 / 1536, BF16 weight, 1-256 rows only) against the
#   programs before it (.variants/a32f68f, carried: commit a32f68f's) at 1-512 rows of every tuned
#   width, BF16 weight, the residual and FP32 weight (bench/variants.py --old-only, a process each,
#   ~100 s; bits must be "same"). Run it after suite: `bash bench/pending.sh suite loadorder`.
# fwdloadorder: bench/experiments/fwdloadorder.patch (the forward's weights loaded after the row's
#   slices, by live rows only, so that the wide rows no longer issue them after x's squares, and
#   the residual's h stored beside y, so that H 2048 / 4096's residual rows issue every slice's
#   load before slice 0's add; rounds 45-46) beside the routed programs at 1-65536 rows of every tuned width, BF16 and FP32 weight and the
#   residual (bench/variants.py --old-only, a process each, ~130 s; bits must be "same").
# wideorder: bench/experiments/wideorder.patch (the fused form's weights loaded first again from H
#   4096; round 46's run of loadorder on an H100 had [1,6144] 4.4% slower with them last) beside the
#   routed programs at 1-256 rows of H 2048-6144, BF16 and FP32 weight and the residual
#   (bench/variants.py --old-only, a process each, ~120 s; bits must be "same").
# butterfly: bench/experiments/butterfly.patch (the fused backward form's dot and the wide forward
#   rows' sum of squares several butterfly levels a round, the same bits; round 47) beside the
#   routed programs at 1-256 rows of every tuned width, both passes, BF16 and FP32 weight and the
#   residual (bench/variants.py --old-only, a process each, ~300 s; bits must be "same").
# host: bench/host.py, each contender's host time a call at [1 / 1024, 256 / 4096] (forward, backward
#   and an autograd step; ~60 s): the kernels' timings leave out what a call costs the CPU, which
#   sets an eager step's pace at few rows (round 48 took the route's lookup from 68-89 us to 4-6 us
#   of a 2-core CPU's time).
# generic: every contender at widths the table lacks (H 3072, 7168, 8192: the generic programs, never
#   timed against the baselines), both passes, BF16 weight, no residual (the benchmark with --widths;
#   21 shapes a pass where the table has 63: ~60 s).
# Each step stops in time for the logs: $OUT/logs.tgz, a folder a step.
set -o pipefail
shopt -s nullglob
OUT=${OUT:-/tmp/out}; LOGS=/tmp/logs; mkdir -p "$OUT" "$LOGS"
trap 'tar czf "$OUT/logs.tgz" -C "$LOGS" .' EXIT
STEPS=" $* "
STEP_NAMES="check suite host generic place loadorder wideorder fwdloadorder butterfly groups edge4096 h5120 ctas phases variants ringwide ringdepth depths ringedge pack256 flush t1 tables"  # the order they run in
[[ $STEPS == "  " ]] && { echo "usage: bash bench/pending.sh $(printf '[%s] ' $STEP_NAMES)"; exit 2; }
T0=$SECONDS
BUDGET=${BUDGET:-560}
left() { echo $(( BUDGET - (SECONDS - T0) )); }
TREES=""
for f in bench/experiments/*.patch; do  # each experiment's tree is .variants/<its patch's name>
  t=$(basename "$f" .patch)
  if [[ ! -f .variants/$t/build.json ]]; then
    if command -v patch >/dev/null; then
      python3 bench/experiment_tree.py ".variants/$t" "$f" || exit 1
    else
      echo "pending: .variants/$t not carried and no GNU patch here: its experiment is skipped"; continue
    fi
  fi
  TREES="$TREES .variants/$t/"
done
ring_step() {  # ring_step NAME WIDTHS TOKENS COUNTS: each weight / residual variant a process
  local i=0 v
  for v in "" "--weight fp32" "--residual"; do
    i=$((i + 1))
    DEADLINE=$(left) PARTITION_ARGS="--widths $2 --tokens $3 --chunk-rows= --chunks $4 --engine ring --no-single $v" \
    LOG=$LOGS/$1$i OUT=/tmp/step_out bash bench/device_run.sh partition
  done
}
tree_step() {  # tree_step NAME TREE ARGS: .variants/TREE's programs beside the routed ones (bench/variants.py
  # --old-only ARGS), the BF16-weight, FP32-weight and residual rows a process each
  [[ -f .variants/$2/build.json ]] || { echo "pending: $1 needs .variants/$2"; return; }
  local v
  for v in "" "--weight fp32" "--residual"; do
    DEADLINE=$(left) VARIANT_TREES=".variants/$2/" LOG=$LOGS/$1${v// /} OUT=/tmp/step_out \
    VARIANT_ARGS="--old-only $3 $v" bash bench/device_run.sh variants
  done
}
tuning_step() {  # tuning_step NAME ARGS: backward tuning arguments beside the routed programs (bench/variants.py)
  DEADLINE=$(left) VARIANT_TREES=none LOG=$LOGS/$1 OUT=/tmp/step_out VARIANT_ARGS="--passes bwd $2" \
  bash bench/device_run.sh variants
}
if [[ $STEPS == *" check "* || $STEPS == *" suite "* ]]; then  # check: the suite, then its timings
  DEADLINE=$(left) LOG=$LOGS/suite OUT=/tmp/step_out bash bench/device_run.sh smoke gputests ||
    { echo "pending: the GPU suite failed (smoke test?): nothing else runs"; exit 1; }
fi
if [[ $STEPS == *" check "* ]]; then
  DEADLINE=$(left) \
  PARTITION_ARGS="--widths 512,1536,4096,5120,6144 --tokens 320,352,384,448,512,576,640,768 --chunk-rows 1 --max-chunks 1024 --fused --pair-class --no-single" \
  ENGINE_ARGS="--passes fwd --weight fp32 --widths 2048 --tokens 4096,8192,16384,32768,65536" \
  LOG=$LOGS/check OUT=/tmp/step_out bash bench/device_run.sh partition engines
fi
if [[ $STEPS == *" host "* ]]; then
  DEADLINE=$(left) LOG=$LOGS/host OUT=/tmp/step_out bash bench/device_run.sh host
fi
if [[ $STEPS == *" generic "* ]]; then
  DEADLINE=$(left) BENCH_ARGS="--widths 3072,7168,8192" LOG=$LOGS/generic OUT=/tmp/step_out \
  bash bench/device_run.sh bench plain
fi
if [[ $STEPS == *" place "* ]]; then
  for f in rewrite read; do
    DEADLINE=$(left) PLACEMENT_ARGS="--widths 256,512 --placements 16 --flush $f" LOG=$LOGS/place-$f \
    OUT=/tmp/step_out bash bench/device_run.sh placement
  done
fi
[[ $STEPS == *" loadorder "* ]] && tree_step loadorder a32f68f "--passes bwd --tokens 1,16,256,512"
[[ $STEPS == *" wideorder "* ]] && tree_step wideorder wideorder "--passes bwd --widths 2048,4096,5120,6144 --tokens 1,16,256"
[[ $STEPS == *" fwdloadorder "* ]] && tree_step fwdloadorder fwdloadorder "--passes fwd --tokens 1,16,256,1024,4096,65536"
[[ $STEPS == *" butterfly "* ]] && tree_step butterfly butterfly "--tokens 1,16,256"
if [[ $STEPS == *" groups "* ]]; then
  if [[ ! -f .variants/head/build.json ]]; then echo "pending: groups needs .variants/head carried"; else
    [[ $STEPS == *" check "* || $STEPS == *" suite "* ]] || { DEADLINE=$(left) LOG=$LOGS/groups-suite \
      OUT=/tmp/step_out bash bench/device_run.sh gputests || { echo "pending: the GPU suite failed"; exit 1; }; }
    tree_step groups head "--passes bwd --widths 1536,5120 --tokens 256,320,384,448,512"
    for v in "" "--weight fp32"; do
      for wt in "1536 384,448,512,576,640" "5120 512,576,640,704,768"; do
        set -- $wt
        DEADLINE=$(left) LOG=$LOGS/groupsedge$1${v// /} OUT=/tmp/step_out \
        PARTITION_ARGS="--widths $1 --tokens $2 --chunk-rows 1 --max-chunks 4096 --fused --pair-class --no-single $v" \
        bash bench/device_run.sh partition
      done
    done
  fi
fi
if [[ $STEPS == *" edge4096 "* ]]; then
  for v in "" "--weight fp32" "--residual"; do
    DEADLINE=$(left) \
    PARTITION_ARGS="--widths 4096 --tokens 640,768,832,896,960,1024,1280 --chunk-rows 1 --max-chunks 4096 --fused --pair-class --no-single $v" \
    LOG=$LOGS/edge4096${v// /} OUT=/tmp/step_out bash bench/device_run.sh partition
  done
fi
if [[ $STEPS == *" h5120 "* ]]; then
  tuning_step h5120res "--widths 5120 --tokens 4096,16384,65536 --bwd-args 2;3 --residual"
  for w in bf16 fp32; do
    DEADLINE=$(left) ENGINE_ARGS="--passes bwd --weight $w --widths 5120 --tokens 2048,2560,3072,4096" \
    LOG=$LOGS/h5120edge-$w OUT=/tmp/step_out bash bench/device_run.sh engines
  done
fi
if [[ $STEPS == *" ctas "* ]]; then
  DEADLINE=$(left) FWDLAUNCH_VARIANTS="plain fp32w residual" \
  FWDLAUNCH_ARGS="--widths 1536,2048,4096,5120 --tokens 1024,1536,2048,3072,4096,8192,16384 --cta-rows 1,2" \
  LOG=$LOGS/ctas OUT=/tmp/step_out bash bench/device_run.sh fwdlaunch
fi
if [[ $STEPS == *" phases "* ]]; then
  DEADLINE=$(left) LOG=$LOGS/phases OUT=/tmp/step_out bash bench/device_run.sh phases
fi
if [[ $STEPS == *" variants "* ]]; then
  if [[ -z $TREES ]]; then echo "pending: no experiment in bench/experiments/"; else
    DEADLINE=$(left) VARIANT_TREES="$TREES" LOG=$LOGS/variants OUT=/tmp/step_out bash bench/device_run.sh variants
  fi
fi
if [[ $STEPS == *" ringwide "* ]]; then ring_step ringwide 2048,4096 8192,16384,32768,65536 132,264; fi
if [[ $STEPS == *" ringdepth "* ]]; then
  tuning_step ringdepth "--widths 2048,4096 --tokens 16384,65536 --bwd-args 1;2;4 --engine ring --chunks 132"
fi
if [[ $STEPS == *" depths "* ]]; then
  i=0
  for args in "--widths 1536 --tokens 16385,32768,65536 --bwd-args 4;6;8" \
              "--widths 1536 --tokens 16385,32768,65536 --bwd-args 4;6;8 --weight fp32" \
              "--widths 5120 --tokens 4096,8192,32768,65536 --bwd-args 2;3"; do
    i=$((i + 1))
    tuning_step depths$i "$args"
  done
fi
if [[ $STEPS == *" ringedge "* ]]; then ring_step ringedge 1536 8192,12288,16384 132; fi
if [[ $STEPS == *" pack256 "* ]]; then
  DEADLINE=$(left) FWDLAUNCH_ARGS="--widths 256,512 --tokens 4096,16384,32768,65536,131072,262144 --packed --pack-cta-rows 2,4,8,16 --cta-rows 4,8" \
  LOG=$LOGS/pack256 OUT=/tmp/step_out bash bench/device_run.sh fwdlaunch
fi
if [[ $STEPS == *" flush "* ]]; then
  for f in rewrite read; do
    DEADLINE=$(left) SPLIT_ARGS="--no-baselines --flush $f --shapes bwd:1024x256,bwd:65536x256,bwd:65536x512,bwd:65536x4096,fwd:65536x256,fwd:65536x4096" \
    LOG=$LOGS/flush-$f OUT=/tmp/step_out bash bench/device_run.sh split
  done
fi
if [[ $STEPS == *" t1 "* ]]; then
  for run in 1 2 read; do  # the benchmark's flush twice, then the read-only one
    args="--shapes bwd:1x256,bwd:1x512,bwd:1x1536,fwd:1x256,fwd:1x1536"
    [[ $run == read ]] && args="--flush read --shapes bwd:1x256,bwd:1x512"
    for w in bf16 fp32; do
      DEADLINE=$(left) SPLIT_ARGS="--weight $w $args" LOG=$LOGS/t1-$w-$run OUT=/tmp/step_out bash bench/device_run.sh split
    done
  done
fi
if [[ $STEPS == *" tables "* ]]; then
  DEADLINE=$(left) LOG=$LOGS/tables OUT=/tmp/step_out bash bench/device_run.sh bench plain
fi
