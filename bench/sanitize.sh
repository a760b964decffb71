#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over one program of each form (run on the GPU machine).
set -u
for tool in memcheck racecheck; do
  echo "== compute-sanitizer --tool $tool"
  compute-sanitizer --tool $tool --print-limit 20 python3 bench/sanitize_case.py 2>&1 | tail -6
done
