#!/usr/bin/env bash
# The suite on the other supported CPythons and against the release wheel, three lanes side by
# side, each in its own copy of this checkout and its own virtual environment; .ci/run calls it
# after the README's two Quick start commands, and CI fails when any lane fails.
#   py3.12  the release wheel: scripts/build_wheels.sh builds the sdist and from it a stripped,
#           repaired manylinux wheel, installed (binaries only, with the test-base extra) into an
#           environment whose PATH holds no compiler; the suite runs from a copy of what it reads
#           (tests/, examples/, docs/, benchmarks/, scripts/, README.md, CHANGELOG.md,
#           pyproject.toml) outside the source tree, against the installed package; jax, no torch
#   py3.10  editable install; no torch, no jax (the jax plugin needs jax >= 0.10, which needs
#           Python >= 3.11)
#   py3.13  editable install; jax, no torch
# Tests whose framework is missing skip, naming it; so does the docs build test (the sphinx
# tools are installed for Quick start command 2 only).  Each part's time is printed; the closing
# line adds up the suites' results.  Exit status: non-zero when any lane failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ci_start=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/interop-core-ci.XXXXXX")
lanes=()
cleanup() {
    local pid
    for pid in "${lanes[@]}"; do
        pkill -P "$pid" 2>/dev/null || true
        kill "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
# Everything printed is kept as well, to add the suites' results up at the end.
exec > >(tee "$work/ci.log") 2>&1

# --- the other Pythons and the release wheel ----------------------------------------------------
pyenv_root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
python_for() {  # the newest CPython $1 (e.g. 3.12) under pyenv, or nothing
    ls -d "$pyenv_root"/versions/"$1".*/bin/python3 2>/dev/null | sort -V | tail -1
}

copy_tree() {  # this checkout's files (tracked, and new ones not ignored) into $1
    mkdir -p "$1"
    git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$1"
}

editable_job() {  # $1: version; the suite on an editable install of a copy of the tree
    local version=$1 python src venv step
    python=$(python_for "$version")
    src=$work/src-$version
    venv=$work/venv-$version
    copy_tree "$src"
    "$python" -m venv "$venv"
    step=$SECONDS
    # Built at -O1 (the last -O on the command line wins): these lanes test behaviour on their
    # Python, and half the compile time keeps CI within its budget on two cores; the main job
    # and the release wheel build as users do.
    CFLAGS="${CFLAGS:+$CFLAGS }-O1" \
        "$venv/bin/pip" install -q -e "$src[test-base]" -e "$src/examples/third_party_plugin"
    echo "[ci] py$version: install and build: $((SECONDS - step)) s"
    "$venv/bin/pip" list 2>/dev/null | grep -i -E '^(numpy|jax|jaxlib|numba|torch|ml.dtypes) ' || true
    step=$SECONDS
    (cd "$src" && "$venv/bin/python" -m pytest -q -p no:cacheprovider)
    echo "[ci] py$version: suite: $((SECONDS - step)) s"
}

wheel_job() {  # $1: version; the suite against an installed release wheel, no compiler on PATH
    local version=$1 python src venv dist tests step
    python=$(python_for "$version")
    src=$work/src-$version
    venv=$work/venv-$version
    dist=$work/dist
    tests=$work/tests-$version
    copy_tree "$src"
    step=$SECONDS
    DIST=$dist "$src/scripts/build_wheels.sh" "$python"
    # The example third-party plugin has C modules of its own: its wheel is built here, with
    # the compiler, for the tests of discovery and of the conformance kit.
    "$python" -m pip wheel -q --no-deps --wheel-dir "$dist" "$src/examples/third_party_plugin"
    echo "[ci] py$version wheel: sdist, wheel, repair: $((SECONDS - step)) s"
    "$python" -m venv "$venv"
    # Everything the suite reads except the package's sources, outside the source tree.
    mkdir -p "$tests"
    cp -r "$src/tests" "$src/examples" "$src/docs" "$src/benchmarks" "$src/scripts" \
        "$src/README.md" "$src/CHANGELOG.md" "$src/pyproject.toml" "$tests/"
    wheel=$(ls "$dist"/interop_core-*.whl)
    plugin_wheel=$(ls "$dist"/interop_bytetensor-*.whl)
    step=$SECONDS
    (
        # Nothing but the environment's own programs: no compiler (nor any other tool).
        export PATH=$venv/bin
        if command -v cc gcc clang; then echo "a compiler is on PATH" >&2; exit 1; fi
        pip install -q --only-binary :all: "$wheel[test-base]" "$plugin_wheel"
    )
    echo "[ci] py$version wheel: install (binaries only): $((SECONDS - step)) s"
    "$venv/bin/pip" list 2>/dev/null | grep -i -E '^(interop.core|numpy|jax|jaxlib|numba|torch|ml.dtypes) ' || true
    (
        export PATH=$venv/bin
        cd "$tests"
        python - <<'EOF'
import sys

import interop_core

assert "site-packages" in interop_core.__file__, interop_core.__file__
frameworks = ("torch", "jax", "jaxlib", "numba", "cupy", "numpy", "ml_dtypes")
imported = [name for name in frameworks if name in sys.modules]
assert not imported, f"import interop_core imported {imported}"
print(f"[ci] the wheel's interop_core: {interop_core.__file__}; it imports no framework")
EOF
        step=$SECONDS
        python -m pytest -q -p no:cacheprovider
        echo "[ci] py$version wheel: suite: $((SECONDS - step)) s"
    )
}

run_lane() {  # $1: log file; the rest: jobs run one after another, each "kind version"
    local log=$1 status=0 kind version start
    shift
    while [ $# -gt 0 ]; do
        kind=$1 version=$2
        shift 2
        if [ -z "$(python_for "$version")" ]; then
            echo "[ci] py$version: no CPython $version on this machine" >> "$log"
            continue
        fi
        start=$SECONDS
        # In the background and waited for, so that `set -e` holds inside the job.
        ( set -euo pipefail; "${kind}_job" "$version" ) >> "$log" 2>&1 &
        if wait $!; then
            echo "[ci] py$version ($kind): passed, $((SECONDS - start)) s" >> "$log"
        else
            echo "[ci] py$version ($kind): FAILED, $((SECONDS - start)) s" >> "$log"
            status=1
        fi
    done
    return $status
}

step=$SECONDS
run_lane "$work/lane1.log" wheel 3.12 &
lanes+=($!)
run_lane "$work/lane2.log" editable 3.10 &
lanes+=($!)
run_lane "$work/lane3.log" editable 3.13 &
lanes+=($!)
failed=0
for i in "${!lanes[@]}"; do
    wait "${lanes[$i]}" || failed=1
    echo "==================== lane $((i + 1)) ===================="
    cat "$work/lane$((i + 1)).log"
done
lanes=()
echo "[ci] other Pythons and the wheel, side by side: $((SECONDS - step)) s"
grep -h '^\[ci\] py[0-9.]* (' "$work"/lane*.log
echo "[ci] total: $((SECONDS - ci_start)) s"

# The closing line: every suite's results added up.
python3 - "$work/ci.log" "$work"/lane*.log <<'EOF'
import re
import sys

totals = dict.fromkeys(("passed", "failed", "skipped", "error"), 0)
for path in sys.argv[1:]:
    for line in open(path, errors="replace"):
        if line.startswith("==================== lane"):
            break       # the lanes' logs, printed: read from their own files
        if re.match(r"^=* ?\d+ (passed|failed)", line):
            for count, word in re.findall(r"(\d+) (passed|failed|skipped|error)", line):
                totals[word] += int(count)
failed = totals["failed"] + totals["error"]
print(f"suites: {totals['passed']} passed, {failed} failed, {totals['skipped']} skipped")
EOF
exit $failed
