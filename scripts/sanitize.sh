#!/usr/bin/env bash
# Build the extension modules with AddressSanitizer and UndefinedBehaviorSanitizer (gcc) in a
# copy of this tree, run the CPU tests that exercise the compiled core under them, and sort the
# reports into this project's and the frameworks' own (scripts/sanitizers/attribute.py).
#
#   bash scripts/sanitize.sh                          # the default test files (below)
#   bash scripts/sanitize.sh --durations=20           # the same, with pytest options
#   bash scripts/sanitize.sh tests/test_view.py -k slice   # other tests (any pytest arguments)
#
# The tree's own modules are left alone: the copy lives in $SANITIZE_DIR (default
# build/sanitize/, git-ignored) and is rebuilt incrementally on the next run.  Results there:
# build.txt, pytest.txt (UBSan's reports too), logs/asan.PID (one per process that reported),
# attribution.txt.
#
# Environment: PYTHON (an interpreter with the test dependencies; default .venv/bin/python when
# there is one, else python3), SANITIZERS (default address,undefined), SANITIZE_LEAKS=1 (leak
# checking too, about 8 times slower: see below), SANITIZE_DIR,
# SANITIZE_JOBS (build jobs; default: the CPU count), CC (a gcc; clang's runtimes are not looked
# up).  Exit status: 0 when the tests pass and no report involves this project's frames.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
SANITIZERS=${SANITIZERS:-address,undefined}
DIR=${SANITIZE_DIR:-$ROOT/build/sanitize}
CC=${CC:-gcc}
JOBS=${SANITIZE_JOBS:-$(nproc 2>/dev/null || echo 2)}
TREE=$DIR/tree
LOGS=$DIR/logs

# CPython is not built with the sanitizers, so their runtimes are preloaded into it (AddressSanitizer's
# first: it must come before every other library).
preload=()
for name in $(echo "$SANITIZERS" | tr ',' ' '); do
  case $name in
    address) lib=libasan.so ;;
    undefined) lib=libubsan.so ;;
    *) echo "sanitize.sh: SANITIZERS may name address and undefined, not '$name'" >&2; exit 2 ;;
  esac
  path=$("$CC" -print-file-name=$lib)
  if [ ! -f "$path" ]; then
    echo "sanitize.sh: $CC has no $lib (install gcc's sanitizer runtimes, e.g. libasan8 libubsan1)" >&2
    exit 2
  fi
  preload+=("$path")
done

# The default selection: the whole CPU suite (tests/, so that new test files are checked too)
# but for these files, left out because they run whole programs, or builds, for minutes under
# the sanitizers while the code of ours they reach is driven by the files that stay:
#   test_docs_build.py        builds the Sphinx site
#   test_benchmarks_smoke.py  timing loops in subprocesses
#   test_torch_compile.py     torch inductor compiles and loads C++ (the compiler itself would
#                             run under the preloaded runtimes); test_launch.py covers the path
#   test_shards_distributed.py  gloo process groups (threads and sockets per rank)
#   test_examples.py, test_main_job.py, test_cli.py  the examples, the demo and the command
#                             line, each a fresh interpreter importing the frameworks
# Tests marked slow (leak and stress loops: slower still here) or gpu are deselected; the GPU
# tests run under compute-sanitizer in scripts/gpu_check.sh.
DEFAULT_TESTS=(
  tests
  --ignore=tests/test_docs_build.py --ignore=tests/test_benchmarks_smoke.py
  --ignore=tests/test_torch_compile.py --ignore=tests/test_shards_distributed.py
  --ignore=tests/test_examples.py --ignore=tests/test_main_job.py --ignore=tests/test_cli.py
)
# Arguments that name no test (options only, e.g. --durations=20) go with the default files.
names_tests=0; value_next=0
for arg in "$@"; do
  if [ "$value_next" = 1 ]; then value_next=0; continue; fi
  case $arg in
    -k|-m|-p|-o|-W|--deselect|--ignore|--maxfail|--durations) value_next=1 ;;
    -*) ;;
    *) names_tests=1 ;;
  esac
done
if [ "$names_tests" = 0 ]; then
  # It measures resident memory, which AddressSanitizer's quarantine of freed blocks inflates.
  set -- "${DEFAULT_TESTS[@]}" -m "not slow and not gpu" --deselect \
    tests/test_lifetime.py::test_views_with_more_dimensions_than_inline_storage_free_their_extents \
    "$@"
fi

# CPU seconds (user + system) of this shell's finished children, less $1, from `times` written
# to $DIR/times.txt by the caller (`times` must run in this shell, not in a subshell).
children_cpu() {
  awk -v before="${1:-0}" 'NR == 2 { split($1, u, "m"); split($2, s, "m")
    printf "%.0f", u[1] * 60 + u[2] + s[1] * 60 + s[2] - before }' "$DIR/times.txt"
}

echo "== copy the tree into $TREE"
mkdir -p "$DIR"
stamp="$SANITIZERS $(cksum < setup.py) $("$CC" -dumpfullversion 2>/dev/null) $("$PYTHON" -c 'import sys; print(sys.version.split()[0])')"
if [ "$(cat "$DIR/stamp" 2>/dev/null)" != "$stamp" ]; then rm -rf "$TREE"; fi
mkdir -p "$TREE"
echo "$stamp" > "$DIR/stamp"
# Everything but the last build's products (modules, Cython's C) goes, so that files deleted
# here go there too; sources are copied with their times, so modules whose sources did not
# change are not rebuilt.
find "$TREE" -mindepth 1 \( -path "$TREE/build" -prune \) -o \
  \( -type f ! -name '*.so' ! -name '*.c' -print0 \) | xargs -0 rm -f
{
  if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard
  else
    find . \( -path ./build -o -path ./.git -o -path ./.venv -o -name __pycache__ \) -prune \
      -o -type f ! -name '*.so' -print0
  fi
  # Cython's generated C (git-ignored), where it is newer than its .pyx: not generated again.
  find interop_core plugins -name '*.c' | while read -r c; do
    if [ "$c" -nt "${c%.c}.pyx" ]; then printf '%s\0' "$c"; fi
  done
} | tar --null --ignore-failed-read -cf - -T - 2>/dev/null | tar -xf - -C "$TREE"

echo "== build with -fsanitize=$SANITIZERS ($JOBS jobs)"
start=$SECONDS; times > "$DIR/times.txt"; cpu_before=$(children_cpu)
(cd "$TREE" && INTEROP_CORE_SANITIZE=$SANITIZERS CC=$CC \
   "$PYTHON" setup.py build_ext --inplace -j "$JOBS") > "$DIR/build.txt" 2>&1
build_rc=$?
times > "$DIR/times.txt"
echo "built in $((SECONDS - start)) s (CPU $(children_cpu "$cpu_before") s)"
if [ "$build_rc" -ne 0 ]; then
  tail -30 "$DIR/build.txt"; echo "sanitize.sh: the sanitizer build failed (see $DIR/build.txt)"
  exit 2
fi

echo "== tests under the sanitizers"
rm -rf "$LOGS"; mkdir -p "$LOGS"
# Leaks: LeakSanitizer needs each leaked block's allocation stack, and CPython (built without
# frame pointers) stops the fast unwinder at its allocator; the full unwinder on every malloc
# makes the run about 8 times slower.  So leak checking is opt-in (SANITIZE_LEAKS=1), reports
# leaks whose first frame past CPython's allocators is ours as ours (numpy, torch and CPython
# leave some objects of their own at exit), and never changes a process's exit status.
if [ "${SANITIZE_LEAKS:-0}" = 1 ]; then
  leak_options="detect_leaks=1:fast_unwind_on_malloc=0"
else
  leak_options="detect_leaks=0"
fi
# allocator_may_return_null=1: tests ask for impossible sizes and expect MemoryError.
# abort_on_error=1: a report aborts, so that faulthandler prints the Python stack (which test).
# PYTHONMALLOC=malloc: Python objects come from malloc, so that a use after free of one (a
# missing reference) is caught, not hidden in pymalloc's pools.
# UBSan writes to stderr whatever its log_path says (gcc 12, next to ASan's runtime), and
# pytest's per-test capture of file descriptors loses what an aborting test wrote: hence
# --capture=sys (Python-level output is still captured) and pytest.txt among the logs read.
start=$SECONDS; times > "$DIR/times.txt"; cpu_before=$(children_cpu)
(
  cd "$TREE" || exit 2
  export LD_PRELOAD="${preload[*]}${LD_PRELOAD:+ $LD_PRELOAD}"
  export ASAN_OPTIONS="$leak_options:allocator_may_return_null=1:abort_on_error=1:log_path=$LOGS/asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  export LSAN_OPTIONS="exitcode=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
  export PYTHONMALLOC=malloc
  export PYTHONPATH="$TREE:$TREE/plugins${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONDONTWRITEBYTECODE=1
  "$PYTHON" -m pytest -q -p no:cacheprovider --capture=sys "$@"
) > "$DIR/pytest.txt" 2>&1
tests_rc=$?
times > "$DIR/times.txt"
tail -15 "$DIR/pytest.txt"
echo "tests ran in $((SECONDS - start)) s (CPU $(children_cpu "$cpu_before") s); pytest's exit status: $tests_rc"

echo "== reports"
python3 "$ROOT/scripts/sanitizers/attribute.py" "$LOGS"/* "$DIR/pytest.txt" \
  | tee "$DIR/attribution.txt"
ours_rc=${PIPESTATUS[0]}
[ "$tests_rc" -eq 0 ] && [ "$ours_rc" -eq 0 ]
