"""Build the compiled hot path of interop-core (Cython extension modules)."""

from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = Path(__file__).parent
MODULES = sorted(p.stem for p in (HERE / "interop_core").glob("_*.pyx"))

extensions = [
    Extension(
        f"interop_core.{name}",
        [f"interop_core/{name}.pyx"],
        include_dirs=["interop_core/include"],
        extra_compile_args=["-O3", "-fno-strict-aliasing"],
    )
    for name in MODULES
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={
            "language_level": 3,
            "embedsignature": True,
            "binding": False,
            "boundscheck": False,
            "wraparound": False,
            "initializedcheck": False,
            "cdivision": True,
        },
        nthreads=2,
    ),
)
