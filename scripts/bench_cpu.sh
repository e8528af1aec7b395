#!/usr/bin/env bash
# Regenerate the CPU benchmark results on this machine: benchmarks/results/cpu.json from a full
# run, then its page, charts and the summary in docs/performance.md (benchmarks/publish.py).
# Run it on a quiet machine (nothing else busy): the numbers are medians, but a loaded 2-core VM
# still moves them by tens of percent.
#
#   bash scripts/bench_cpu.sh
#
# Uses the in-place build when there is one (python3 setup.py -q build_ext --inplace), else the
# installed package; needs matplotlib for the charts (the interop-core[bench] extra).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD:$PWD/plugins${PYTHONPATH:+:$PYTHONPATH}"
python3 -m interop_core bench --device cpu --json benchmarks/results/cpu.json > /dev/null
python3 benchmarks/publish.py
