#!/usr/bin/env bash
# Build interop-core on a CUDA machine, run the gpu-marked tests (and the rest), run the benchmark
# suite (python -m interop_core bench), and write everything under $OUT (default: ./gpu_out):
# environment.txt build.txt gpu_tests.txt examples.txt all_tests.txt bench.txt gpu.md gpu.json
# gpu.png (and the memcheck files below).
#
#   OUT=/some/dir bash scripts/gpu_check.sh [all|tests|suite|bench|memcheck]
#
# After the build, `tests` runs the gpu-marked tests and every example, `suite` the whole test
# suite (host tests included: about 10 minutes on the H100 host), `bench` the benchmarks; `all`
# runs the three.  Each of `tests` and `bench` fits one 10-minute device call.
# `memcheck` runs the gpu-marked copy, launch, Triton, stream, protocol and jax-reader tests under
# compute-sanitizer's memcheck (memcheck.PID.txt, memcheck_tests.txt) and sorts its reports into
# this project's and the frameworks' own (memcheck_attribution.txt; scripts/sanitizers/
# attribute.py): it fails on a report involving our frames.  GPU_CHECK_MEMCHECK=1 adds it to
# `all` and `tests`; GPU_CHECK_MEMCHECK_TESTS overrides its test files, COMPUTE_SANITIZER the
# binary (default: on PATH, else under /usr/local/cuda*).  Bounded by GPU_CHECK_MEMCHECK_TIMEOUT
# seconds (default 480), so that its logs come back within one device call.
#
# Expects the frameworks to be installed already (the GPU machine has torch, cupy, jax, numba-cuda,
# cuda-core); it installs only this package, without touching dependencies.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=0
step=${1:-all}

{
  echo "== machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  python3 - <<'PY'
import importlib
for name in ("torch", "cupy", "jax", "numba", "cuda.core", "numpy", "ml_dtypes", "tvm_ffi"):
    try:
        print(f"{name} {importlib.import_module(name).__version__}")
    except Exception as exc:
        print(f"{name}: {type(exc).__name__}: {exc}")
PY
} 2>&1 | tee "$OUT/environment.txt"

echo "== build"
# `python3 -m pip`, not `pip`: on the GPU image the two can belong to different interpreters.
if ! python3 -m pip install --no-build-isolation --no-deps -q -e . > "$OUT/build.txt" 2>&1; then
  tail -40 "$OUT/build.txt"; echo "build failed"; exit 1
fi
# The example third-party plugin (its C reader is the bench's public-ABI line and has tests).
python3 -m pip install --no-build-isolation --no-deps -q -e examples/third_party_plugin \
  >> "$OUT/build.txt" 2>&1 || echo "example plugin did not build (its tests will skip)"

if [ "$step" = all ] || [ "$step" = tests ]; then
echo "== gpu tests"
python3 -m pytest -m gpu -q -rs -p no:cacheprovider 2>&1 \
  | tee "$OUT/gpu_tests.txt" | tail -40
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "== examples"
# Every examples/*.py, run for real on the GPU (logged to examples.txt).
: > "$OUT/examples.txt"
for example in examples/*.py; do
  echo "-- python3 $example" >> "$OUT/examples.txt"
  if python3 "$example" >> "$OUT/examples.txt" 2>&1; then
    echo "ok      $example"
  else
    echo "FAILED  $example" | tee -a "$OUT/examples.txt"; status=1
  fi
done
fi

if [ "$step" = all ] || [ "$step" = suite ]; then
echo "== full test suite on the GPU machine"
# Tests needing a package the GPU image lacks (e.g. hypothesis) are reported, not fatal to the rest.
python3 -m pytest -q -rs -p no:cacheprovider -m "not slow" --continue-on-collection-errors 2>&1 \
  | tee "$OUT/all_tests.txt" | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

memcheck_wanted=0
if [ "$step" = memcheck ]; then memcheck_wanted=1; fi
if [ "${GPU_CHECK_MEMCHECK:-0}" = 1 ] && { [ "$step" = all ] || [ "$step" = tests ]; }; then
  memcheck_wanted=1
fi
if [ "$memcheck_wanted" = 1 ]; then
echo "== memcheck (compute-sanitizer) over the GPU copy, launch, stream and reader tests"
sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer \
  || ls -d /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
       2>/dev/null | head -1)}
if [ -z "$sanitizer" ] || [ ! -x "$sanitizer" ]; then
  echo "compute-sanitizer not found (set COMPUTE_SANITIZER=/path/to/compute-sanitizer)"
  status=1
else
  # shellcheck disable=SC2206
  memcheck_tests=(${GPU_CHECK_MEMCHECK_TESTS:-tests/test_copies.py tests/test_launch_gpu.py
    tests/test_streams.py tests/test_gpu_protocols.py tests/test_cuda_module.py
    tests/test_plugin_jax.py tests/test_triton_gpu.py})
  rm -f "$OUT"/memcheck.*.txt
  # Every framework allocation its own driver allocation, so that memcheck knows its bounds
  # (a pool hides an overrun inside the pool): jax's platform allocator without preallocation,
  # torch without its caching allocator.  cupy's pool has no switch and stays.
  # --report-api-errors explicit (the default) reports failed driver calls as well; the host
  # backtrace tells whose call failed.
  # The time limit is on pytest, inside: compute-sanitizer then finishes its logs.  Tests that
  # need GPU work still pending when the host looks (host_timing) are left out: the sanitizer
  # makes every launch synchronous.
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform \
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    "$sanitizer" --tool memcheck --show-backtrace host --target-processes all \
    --print-limit 1000 --log-file "$OUT/memcheck.%p.txt" \
    timeout -k 20 "${GPU_CHECK_MEMCHECK_TIMEOUT:-480}" \
    python3 -m pytest -m "gpu and not host_timing" -q -rs -p no:cacheprovider \
    "${memcheck_tests[@]}" \
    > "$OUT/memcheck_tests.txt" 2>&1
  memcheck_rc=$?
  tail -5 "$OUT/memcheck_tests.txt"
  if [ "$memcheck_rc" -eq 124 ] || [ "$memcheck_rc" -eq 137 ]; then
    echo "memcheck stopped after ${GPU_CHECK_MEMCHECK_TIMEOUT:-480} s (the reports so far follow)"
  fi
  [ "$memcheck_rc" -eq 0 ] || status=1
  python3 scripts/sanitizers/attribute.py "$OUT"/memcheck.*.txt > "$OUT/memcheck_attribution.txt"
  attribution_rc=$?
  head -60 "$OUT/memcheck_attribution.txt"
  [ "$attribution_rc" -eq 0 ] || status=1
fi
fi

if [ "$step" = all ] || [ "$step" = bench ]; then
echo "== benchmarks"
# One run over host and CUDA objects (--device all): the page, the raw results and the chart.
# Publish: copy gpu.json into benchmarks/results/ and run benchmarks/publish.py (page, charts).
python3 -m interop_core bench --device all --markdown "$OUT/gpu.md" --json "$OUT/gpu.json" \
  $(python3 -c "import matplotlib" 2>/dev/null && echo --plot "$OUT/gpu.png") \
  > "$OUT/bench.txt" 2>&1 || { tail -20 "$OUT/bench.txt"; status=1; }
tail -3 "$OUT/bench.txt"
fi

exit $status
