"""What a user installs: the sdist builds, the wheel carries what a third party needs, and the
compiled modules load on the glibc versions the wheel's manylinux tag promises.

CI runs this file twice: against the source tree (editable install) and against an installed
release wheel (``scripts/build_wheels.sh``); each test skips, saying why, where its subject is
not at hand.
"""

from __future__ import annotations

import importlib
import platform
import re
import shutil
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

import pytest

import interop_core

ROOT = Path(__file__).resolve().parent.parent
# The first-party packages of the distribution (the core and its plugins).
PACKAGES = ("interop_core", "interop_numpy", "interop_torch", "interop_cupy", "interop_numba",
            "interop_jax", "interop_cuda_core")
# Building needs these beside the Python sources (README is the long description).
BUILD_SUFFIXES = (".py", ".pyx", ".pxd", ".pyi", ".h", ".typed")
BUILD_PRODUCTS = (".c", ".so", ".html", ".pyc")
# manylinux2014: the tag release wheels carry (scripts/build_wheels.sh enforces the same).
NEWEST_GLIBC = (2, 17)


def _package_dirs() -> list[Path]:
    dirs = []
    for name in PACKAGES:
        module = __import__(name)
        dirs.append(Path(module.__file__).parent)
    return dirs


def test_the_running_python_is_one_the_distribution_declares():
    meta = metadata.metadata("interop-core")
    floor = re.fullmatch(r">=\s*3\.(\d+)", meta["Requires-Python"])
    assert floor, meta["Requires-Python"]
    assert sys.version_info >= (3, int(floor.group(1)))
    declared = {c.rsplit(" :: ", 1)[1] for c in meta.get_all("Classifier")
                if c.startswith("Programming Language :: Python :: 3.")}
    assert f"{sys.version_info[0]}.{sys.version_info[1]}" in declared, sorted(declared)
    assert f"3.{floor.group(1)}" in declared, "the oldest Python allowed is declared too"


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="glibc symbol versions exist on glibc Linux only")
def test_compiled_modules_need_no_glibc_newer_than_the_wheel_tag_admits():
    # The versions a module needs are named in its dynamic string table (kept by strip).
    newest = {}
    modules = [so for folder in _package_dirs() for so in folder.rglob("*.so")
               if f"cpython-{sys.version_info[0]}{sys.version_info[1]}" in so.name]
    assert modules, "no compiled module found beside the imported packages"
    for so in modules:
        versions = {(2, int(minor)) for minor in re.findall(rb"GLIBC_2\.(\d+)", so.read_bytes())}
        newest[so.name] = max(versions, default=(2, 0))
    too_new = {name: f"GLIBC_{v[0]}.{v[1]}" for name, v in newest.items() if v > NEWEST_GLIBC}
    assert not too_new, f"these modules need a glibc newer than 2.{NEWEST_GLIBC[1]}: {too_new}"


def test_every_compiled_module_loads_on_this_python():
    # A module that names a C API function this CPython lacks (PyFloat_Pack2 is public from
    # 3.11 only) builds, then fails at import with an undefined symbol: load every one.
    tag = f"cpython-{sys.version_info[0]}{sys.version_info[1]}"
    names = []
    for folder in _package_dirs():
        for so in folder.rglob(f"*.{tag}*.so"):
            parts = so.relative_to(folder.parent).parts
            names.append(".".join((*parts[:-1], so.name.split(".")[0])))
    assert names, "no compiled module found beside the imported packages"
    failed = {}
    for name in sorted(names):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            failed[name] = str(exc)
    assert not failed, f"compiled modules that do not load on Python {platform.python_version()}: {failed}"


def _installed_files() -> list[str]:
    files = metadata.distribution("interop-core").files or []
    return [str(f) for f in files]


def test_an_installed_wheel_carries_stubs_declarations_and_the_header_and_no_sources():
    files = _installed_files()
    compiled = [f for f in files if f.endswith(".so")]
    if not compiled:
        pytest.skip("interop-core is not installed from a wheel here (an editable install)")
    for so in compiled:
        stem = so.split(".cpython-")[0]
        assert f"{stem}.pyi" in files, f"{so} has no type stub beside it"
    for needed in ("interop_core/py.typed", "interop_core/abi.pxd",
                   "interop_core/include/interop_core.h"):
        assert needed in files
    assert Path(interop_core.get_include(), "interop_core.h").is_file()
    leftovers = [f for f in files if f.endswith((".c", ".pyx", ".html"))]
    assert not leftovers, f"the wheel holds build sources or products: {leftovers}"


def test_the_sdist_holds_every_source_a_build_needs_and_no_build_products(tmp_path):
    if not (ROOT / "setup.py").is_file():
        pytest.skip("needs the source tree (this run tests an installed wheel)")
    pytest.importorskip("Cython", reason="making the sdist runs setup.py, which needs Cython")
    pytest.importorskip("setuptools")
    # A copy of what the sdist is made from, with this tree's build products in it (generated
    # .c, built modules), which the sdist must leave out.
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    for name in ("interop_core", "plugins"):
        shutil.copytree(ROOT / name, tree / name, ignore=ignore)
    for name in ("setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, tree / name)
    done = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path)],
                          cwd=tree, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (sdist,) = tmp_path.glob("interop_core-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    expected = {str(path.relative_to(tree)) for name in ("interop_core", "plugins")
                for path in (tree / name).rglob("*")
                if path.is_file() and path.name.endswith(BUILD_SUFFIXES)}
    expected |= {"setup.py", "pyproject.toml", "README.md", "LICENSE"}
    assert expected - names == set(), f"missing from the sdist: {sorted(expected - names)}"
    products = sorted(n for n in names if n.endswith(BUILD_PRODUCTS))
    assert products == [], f"build products in the sdist: {products}"
    assert not any(n.startswith("tests/") for n in names)
