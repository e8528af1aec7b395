"""Build the compiled hot path of interop-core (Cython extension modules).

Every ``_*.pyx`` under ``interop_core/`` (the core's layers) and ``plugins/`` (first-party
plugins' compiled readers) is one extension module named after its path.
"""

import os
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = Path(__file__).parent


def _modules():
    for top, prefix in (("interop_core", "interop_core"), ("plugins", "")):
        for pyx in sorted((HERE / top).rglob("_*.pyx")):
            rel = pyx.relative_to(HERE / top).with_suffix("")
            name = ".".join(filter(None, (prefix, *rel.parts)))
            yield name, str(pyx.relative_to(HERE))


extensions = [
    Extension(
        name,
        [source],
        include_dirs=["interop_core/include"],
        extra_compile_args=["-O3", "-fno-strict-aliasing"],
    )
    for name, source in _modules()
]

setup(
    ext_modules=cythonize(
        extensions,
        include_path=[".", "plugins"],
        compiler_directives={
            "language_level": 3,
            "embedsignature": True,
            "binding": False,
            "boundscheck": False,
            "wraparound": False,
            "initializedcheck": False,
            "cdivision": True,
        },
        nthreads=os.cpu_count() or 2,
    ),
)
