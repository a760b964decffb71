#!/usr/bin/env bash
# One call on the GPU machine (from the repository root, with .whl/ carried):
#   bash bench/device_run.sh [smoke] [jit] [gputests] [tests] [sanitize] [demo] [accuracy] [bench] [quick]
#                            [cakebench] [variants] [variants2] [engines] [forms] [fwdlaunch] [partition] [ncu]
#                            [context] [split] [placement] [cycles] [phases] [host] [pytest]
# forms: bench/engines.py --forms (the backward's fused form against the pair form; FORM_ARGS).
# pytest: the tests PYTEST_ARGS names (a file, -k ...).
# smoke: one call of each pass and form first (60 s limit); a failure there stops the run.
# cakebench: the quick table for cake_rmsnorm_det alone, beside the last recorded run's numbers.
# fwdlaunch: bench/fwd_launch.py (the forward's CTA size rule against full CTAs; FWDLAUNCH_ARGS, and
# FWDLAUNCH_VARIANTS: plain fp32w residual, a process each).
# partition: bench/partition.py (the backward's dw partition against chunks of 1, 2, 4, 8 rows).
# variants: bench/variants.py (tuning arguments side by side; an earlier tree in .variants/old if
# carried). context: bench/context.py (each contender after the flush and after another kernel;
# CONTEXT_ARGS). split: bench/split.py (each contender's kernels apart; SPLIT_ARGS). placement:
# bench/placement.py (the one-row backward at random placements of its tensors; PLACEMENT_ARGS). host:
# bench/host.py (each contender's host time a call; HOST_ARGS). cycles:
# bench/level2_cycles.cu. phases: bench/phases.py (the forward's few-row calls by phase; PHASES_ARGS). ncu: Nsight Compute's speed-of-light, scheduler and warp-state sections over
# bench/probe.py.
# Logs go to $LOG (default /tmp/logs) and come back as $OUT/logs.tgz; the tail of each step is printed.
set -o pipefail
OUT=${OUT:-/tmp/out}; LOG=${LOG:-/tmp/logs}; mkdir -p "$OUT" "$LOG"
trap 'tar czf "$OUT/logs.tgz" -C "$LOG" . 2>/dev/null' EXIT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD TVM_FFI_CUDA_ARCH_LIST=9.0a CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONUNBUFFERED=1
export CAKE_RMSNORM_DET_CACHE=/tmp/cake_cache
ARGS=" $* "
T0=$SECONDS
# With DEADLINE=N (seconds from the start), the benchmark is stopped in time for the logs to come back.
left() { if [[ -n $DEADLINE ]]; then echo $(( DEADLINE - (SECONDS - T0) > 20 ? DEADLINE - (SECONDS - T0) : 20 )); else echo 0; fi; }
has() { [[ $ARGS == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv | tee "$LOG/gpu.txt"
if has jit; then  # JIT from an empty cache, then a second process that loads from the cache
  for i in 1 2; do
    /usr/bin/time -f "jit process $i: %e s wall" python3 -c "
import time, torch, cake_rmsnorm_det as crd
t0 = time.perf_counter()
x = torch.randn(4096, 4096, device='cuda').bfloat16(); w = torch.ones(4096, device='cuda')
y, r = crd.forward(x, w); dx, dw = crd.backward(x, x, w, r); torch.cuda.synchronize()
print(f'first forward+backward call (build or load of 2 programs): {time.perf_counter()-t0:.2f} s')
" 2>&1 | tee -a "$LOG/jit.txt"
  done
fi
/usr/bin/time -f "aot: %e s wall" python3 -m cake_rmsnorm_det.aot --arch sm_90a --out /tmp/aot -j 16 2>&1 | tail -2 | tee "$LOG/aot.txt"
export CAKE_RMSNORM_DET_AOT_DIR=/tmp/aot
if has smoke; then
  timeout 60 python3 bench/sanitize_case.py 2>&1 | tail -5 | tee "$LOG/smoke.txt"
  [[ ${PIPESTATUS[0]} == 0 ]] || { echo "smoke failed: stopping"; exit 1; }
fi
if has forms; then
  timeout "$(left)" python3 bench/engines.py --forms $FORM_ARGS --out "$LOG/forms" 2>&1 | tee "$LOG/forms.log"
fi
if has demo; then python3 -m cake_rmsnorm_det.demo 2>&1 | tee "$LOG/demo.txt" | tail -14; fi
if has gputests; then  # every test file that needs the GPU (test_programs.py is build machinery: CPU CI runs it)
  python3 -m pytest tests -q -rfE -p no:cacheprovider --ignore=tests/test_programs.py --durations=5 --timeout=300 2>&1 | tee "$LOG/pytest_gpu.log" | tail -14
fi
if has pytest; then  # PYTEST_ARGS: a chosen subset (e.g. tests/test_gpu_kernels.py -k fused)
  timeout "${PYTEST_WALL:-900}" python3 -m pytest -q -rfE -p no:cacheprovider --timeout=${PYTEST_TIMEOUT:-300} $PYTEST_ARGS 2>&1 | tee "$LOG/pytest_subset.log" | tail -8
fi
if has tests; then
  python3 -m pytest tests -q -rfE -p no:cacheprovider --durations=12 --timeout=900 2>&1 | tee "$LOG/pytest_gpu.log" | tail -30
fi
if has accuracy; then python3 bench/accuracy.py > "$LOG/accuracy.md" 2>"$LOG/accuracy.err"; tail -3 "$LOG/accuracy.md"; fi
if has bench; then
  Q=""; has quick && Q="--quick"; has plain && Q="$Q --plain-only"
  C=""; [[ -n $COMPARE ]] && C="--compare $COMPARE"  # an earlier results.json to print beside
  timeout "$(left)" python3 -m cake_rmsnorm_det.bench $Q $C $BENCH_ARGS --out "$LOG/bench" > "$LOG/bench.log" 2>&1
  tail -3 "$LOG/bench.log"
  python3 - "$LOG/bench/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("pass shape                     w    res  cake_us  TB/s  best_baseline  x")
for r in rows:
    if r["weight"] == "bf16" and not r["residual"]:
        print(f"{r['pass']} {r['shape'][:26]:26s} {r['weight']} {int(r['residual'])} {r['us'].get('cake')} {r['TBps']} {r['best_baseline']} {r['speedup_vs_best']}")
PY
fi
if has cakebench; then
  timeout "$(left)" python3 -m cake_rmsnorm_det.bench --quick --no-baselines --out "$LOG/cakebench" \
    --compare docs/bench/2026-12-03-h200-r16-quick-cake.json > "$LOG/cakebench.log" 2>&1
  grep -E "^pass shape|bf16 0 " "$LOG/cakebench.log" | head -70
fi
# variants_run NAME TREES ARGS: bench/variants.py over the carried trees matching TREES (a glob).
variants_run() {
  local OLD="" d
  for d in $2; do [[ -f $d/build.json ]] && OLD="$OLD --old ${d%/}"; done
  timeout "$(left)" python3 bench/variants.py $OLD $3 --out /tmp/$1 2>&1 | tee "$LOG/$1.log" | grep -v "^building"
  cp /tmp/$1/variants.json "$LOG/$1.json" 2>/dev/null
}
# variants: every carried tree (or VARIANT_TREES); variants2: a second set (VARIANT_TREES2, VARIANT_ARGS2).
if has variants; then variants_run variants "${VARIANT_TREES:-.variants/*/}" "$VARIANT_ARGS"; fi
if has variants2; then variants_run variants2 "${VARIANT_TREES2:-.variants/*/}" "$VARIANT_ARGS2"; fi
if has fwdlaunch; then  # FWDLAUNCH_VARIANTS: the rows timed, one process each (default plain)
  i=0
  for v in ${FWDLAUNCH_VARIANTS:-plain}; do  # a variant named twice: two processes, logs and JSON apart
    i=$((i + 1))
    timeout "$(left)" python3 bench/fwd_launch.py $FWDLAUNCH_ARGS --variant "$v" --out "$LOG/fwdlaunch$i" 2>&1 | tee "$LOG/fwdlaunch$i-$v.log"
  done
fi
if has partition; then
  timeout "$(left)" python3 bench/partition.py $PARTITION_ARGS --out "$LOG/partition" 2>&1 | tee "$LOG/partition.log"
fi
if has engines; then
  timeout "$(left)" python3 bench/engines.py $ENGINE_ARGS --out "$LOG/engines" 2>&1 | tee "$LOG/engines.log"
fi
if has context; then
  timeout "$(left)" python3 bench/context.py $CONTEXT_ARGS --out "$LOG/context.json" 2>&1 | tee "$LOG/context.log"
fi
if has split; then  # SPLIT_ARGS: bench/split.py's (each contender's kernels apart, and the shapes' floors)
  timeout "$(left)" python3 bench/split.py $SPLIT_ARGS --out "$LOG/split.json" 2>&1 | tee "$LOG/split.log"
fi
if has host; then  # HOST_ARGS: bench/host.py's
  timeout "$(left)" python3 bench/host.py $HOST_ARGS --out "$LOG/host.json" 2>&1 | tee "$LOG/host.log"
fi
if has placement; then  # PLACEMENT_ARGS: bench/placement.py's
  timeout "$(left)" python3 bench/placement.py $PLACEMENT_ARGS --out "$LOG/placement.json" 2>&1 | tee "$LOG/placement.log"
fi
if has cycles; then  # bench/level2_cycles.cu: the dw combine's level 2 in one warp, in clock cycles
  NVFLAGS=$(python3 -c "from cake_rmsnorm_det import programs; print(' '.join(programs.NVCC_FLAGS))")  # the package's
  nvcc -std=c++17 -O3 -arch=sm_90a $NVFLAGS -Icsrc/include -o /tmp/level2_cycles bench/level2_cycles.cu && /tmp/level2_cycles | tee "$LOG/cycles.txt"
fi
if has phases; then
  timeout "$(left)" python3 bench/phases.py $PHASES_ARGS --out "$LOG/phases/phases.json" 2>&1 | tee "$LOG/phases.log"
fi
if has ncu; then  # PROBE_ARGS: bench/probe.py's; NCU_KERNELS: the kernel-name filter (peers: add 'triton|_rms_norm')
  SECS=${NCU_SECTIONS:-SpeedOfLight SchedulerStats WarpStateStats InstructionStats LaunchStats}
  timeout "$(left)" ncu --clock-control none $(for s in $SECS; do printf -- '--section %s ' "$s"; done) \
    -k regex:"${NCU_KERNELS:-forward_kernel|backward_(direct|ring)_kernel}" python3 bench/probe.py $PROBE_ARGS > "$LOG/ncu.txt" 2>&1
  grep -E "^  [a-zA-Z_]+(kernel|triton)|^  triton|Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Instructions  |Registers Per|Achieved Occupancy|Block Size|Grid Size|stalled|Memory Throughput|L2 Hit|Mem Busy|Max Bandwidth|Theoretical Occupancy" "$LOG/ncu.txt" \
    | sed -E 's/ +/ /g' | cut -c1-160 | head -150
fi
if has sanitize; then timeout "$(left)" bash bench/sanitize.sh 2>&1 | tee "$LOG/sanitizer.log" | tail -12; fi
