"""The documentation site builds with warnings as errors, and documents every public name."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BUILD_PACKAGES = ("sphinx", "myst_parser", "numpydoc", "pydata_sphinx_theme")

# The modules whose public names (__all__) the API reference must document, with the members of
# every class among them.
DOCUMENTED_MODULES = ("interop_core", "interop_core.plugins", "interop_core.hookspecs",
                      "interop_core.dtypes", "interop_core.testing",
                      "interop_core.compat.cuda_core")
# The first-party plugins (documented on their own page); their public names are their __all__,
# or their hook alone where they declare none.
PLUGIN_MODULES = ("interop_numpy", "interop_torch", "interop_cupy", "interop_numba", "interop_jax",
                  "interop_cuda_core")
PROTOCOL_DUNDERS = {"__getitem__", "__dlpack__", "__dlpack_device__",
                    "__cuda_array_interface__", "__array_interface__"}


def _require_docs_tools() -> None:
    for name in BUILD_PACKAGES:
        pytest.importorskip(name, reason=f"building the docs needs {name} "
                                         "(pip install -e '.[docs]')")


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    _require_docs_tools()
    out = tmp_path_factory.mktemp("docs")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "plugins"), *filter(None, [env.get("PYTHONPATH")])])
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(out / "doctrees"), str(DOCS), str(out / "html")],
        capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert result.returncode == 0, (
        f"sphinx-build failed (exit {result.returncode}):\n{result.stderr[-6000:]}")
    return out / "html"


def _inventory(html: Path) -> set[str]:
    """The object names in Sphinx's objects.inv (version 2: 4 header lines, then zlib)."""
    raw = (html / "objects.inv").read_bytes()
    header_end = 0
    for _ in range(4):
        header_end = raw.index(b"\n", header_end) + 1
    lines = zlib.decompress(raw[header_end:]).decode().splitlines()
    return {line.split(" ", 1)[0] for line in lines if " py:" in line}


def _public_names() -> list[tuple[str, str]]:
    """(acceptable documented names, what is meant) for every public name and class member."""
    import interop_core

    wanted = []
    for module_name in DOCUMENTED_MODULES + PLUGIN_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ("interop_core_register",)):
            obj = getattr(module, name)
            # A name re-exported at the top level may be documented there instead.
            homes = [f"{module_name}.{name}"]
            if getattr(interop_core, name, None) is obj:
                homes.append(f"interop_core.{name}")
            wanted.append((tuple(homes), f"{module_name}.{name}"))
            if not isinstance(obj, type):
                continue
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr not in PROTOCOL_DUNDERS:
                    continue
                if not callable(member) and not hasattr(member, "__get__"):
                    continue  # plain class constants (enum members are checked as attributes)
                wanted.append((tuple(f"{home}.{attr}" for home in homes),
                               f"{module_name}.{name}.{attr}"))
    return wanted


def test_docs_build_with_warnings_as_errors(built_site):
    for page in ("index", "getting_started", "guide", "handoff", "streams", "plugins",
                 "performance", "faq", "api/index"):
        assert (built_site / f"{page}.html").is_file(), f"the site has no {page} page"


def test_api_reference_documents_every_public_name_and_member(built_site):
    documented = _inventory(built_site)
    missing = [what for homes, what in _public_names() if not documented.intersection(homes)]
    assert missing == [], (
        f"not in the API reference: {missing} (a function or class needs a docstring and a "
        "page under docs/ that autodocs it; module-level data needs a `#:` doc comment)")


def test_api_reference_shows_compiled_signatures(built_site):
    # Signatures of the compiled modules come from Cython's embedsignature docstring line;
    # without it autodoc would show no parameters at all.
    page = (built_site / "api" / "views.html").read_text()
    for fragment in ("from_pointer", "max_version", "slice_offset", "new_itemsize"):
        assert fragment in page
    assert "(self" not in page and "(cls" not in page


def test_every_markdown_page_is_in_the_site(built_site):
    pages = sorted(p.stem for p in DOCS.glob("*.md"))
    assert [p for p in pages if not (built_site / f"{p}.html").is_file()] == []


def test_performance_page_includes_every_recorded_result(built_site):
    page = (DOCS / "performance.md").read_text()
    results = sorted((ROOT / "benchmarks" / "results").glob("*.md"))
    included = [r.name for r in results if f"../benchmarks/results/{r.name}" in page]
    fragments = [r.name for r in results if r.name not in included and _is_fragment(r, results)]
    assert sorted(included + fragments) == [r.name for r in results]


def _is_fragment(result: Path, results: list[Path]) -> bool:
    # A table written by a script to be pasted into a results page is not a page of its own.
    return any(other != result and result.name in other.read_text() for other in results)
