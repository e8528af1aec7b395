#!/usr/bin/env bash
# Regenerate the CPU benchmark results (benchmarks/results/cpu.{md,json,png}) on this machine and
# refresh the budget table in docs/performance.md.  Run it on a quiet machine (nothing else
# busy): the numbers are medians, but a loaded 2-core VM still moves them by tens of percent.
#
#   bash scripts/bench_cpu.sh
#
# Uses the in-place build when there is one (python3 setup.py -q build_ext --inplace), else the
# installed package; needs matplotlib for the PNG (the interop-core[bench] extra).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD:$PWD/plugins${PYTHONPATH:+:$PYTHONPATH}"
python3 -m interop_core bench --device cpu \
  --markdown benchmarks/results/cpu.md --json benchmarks/results/cpu.json \
  --plot benchmarks/results/cpu.png > /dev/null
python3 benchmarks/publish.py
