"""Build the example's two C extensions: bytetensor._ctensor (the framework's C tensor type)
and interop_bytetensor._creader (the plugin's compiled reader, on interop_core.h).

A third party finds the header with ``interop_core.get_include()``; inside the interop-core
repository (where pip may build this in an isolated environment without interop-core) the
header is taken from the checkout instead.
"""

from pathlib import Path

from setuptools import Extension, setup


def _interop_core_include():
    try:
        import interop_core
    except ImportError:
        return str(Path(__file__).resolve().parents[2] / "interop_core" / "include")
    return interop_core.get_include()


setup(
    ext_modules=[
        Extension("bytetensor._ctensor", ["src/bytetensor/_ctensor.c"],
                  include_dirs=["src/bytetensor"]),
        Extension("interop_bytetensor._creader", ["src/interop_bytetensor/_creader.c"],
                  include_dirs=[_interop_core_include(), "src"]),
    ],
)
