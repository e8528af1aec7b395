"""Build the compiled hot path of interop-core (Cython extension modules).

Every ``_*.pyx`` under ``interop_core/`` (the core's layers) and ``plugins/`` (first-party
plugins' compiled readers) is one extension module named after its path.
"""

import os
import platform
import tempfile
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).parent

# GCC's generic x86-64 tuning inlines a memset or memcpy of a known size between 32 bytes and
# 8 KiB as `rep stosq` / `rep movsq`, whose start-up costs 25-40 cycles.  Cython's freelists
# clear every recycled object that way (a StridedMemoryView is 240 bytes), so each view paid
# more for clearing its memory than for reading its tensor: on the dev VM view() of a numpy
# array took 123 ns with it and 111 ns without (benchmarks/readers_before_after.py).  Small
# known sizes become SSE store loops, anything else glibc's own memset/memcpy.  Only GCC on x86
# takes these options; other compilers never emit the slow form for these sizes and are left
# alone (each flag is tried on an empty file first).
_STRING_OP_FLAGS = [
    "-mmemset-strategy=vector_loop:512:noalign,libcall:-1:noalign",
    "-mmemcpy-strategy=vector_loop:512:noalign,libcall:-1:noalign",
]

# Wheels built here must load on glibc older than this machine's: _glibc_compat.h, included
# first in every module, binds dlopen/dlsym to their first symbol versions instead of glibc
# 2.34's (see the header).  Before glibc 2.34 those live in libdl.so.2, so a module that calls
# them links it (a no-op stub from 2.34 on); --no-as-needed keeps it although this glibc's
# libdl defines nothing the module uses.
_GLIBC_COMPAT_COMPILE = ["-include", "interop_core/include/_glibc_compat.h"]
_LIBDL_LINK = ["-Wl,--push-state,--no-as-needed", "-l:libdl.so.2", "-Wl,--pop-state"]


# Python's own CFLAGS carry -g.  Debug information costs a quarter of the compile time (the torch
# reader: 31 s with it, 24 s without, dev VM) and nothing at run time; the release wheels are
# built without it (scripts/build_wheels.sh).  -g0 comes later on the command line and wins,
# unless the caller's CFLAGS ask for -g (a debugging build) or a sanitizer build adds it back.
_DEBUG_INFO = [] if "-g" in os.environ.get("CFLAGS", "").split() else ["-g0"]


def _link_args(source):
    """Linker arguments for the module built from `source` (libdl where it calls dlopen)."""
    if platform.libc_ver()[0] != "glibc":
        return []
    text = (HERE / source).read_text()
    return _LIBDL_LINK if ("dlopen(" in text or "dlsym(" in text) else []


def _modules():
    for top, prefix in (("interop_core", "interop_core"), ("plugins", "")):
        for pyx in sorted((HERE / top).rglob("_*.pyx")):
            rel = pyx.relative_to(HERE / top).with_suffix("")
            name = ".".join(filter(None, (prefix, *rel.parts)))
            yield name, str(pyx.relative_to(HERE))


def _accepted(compiler, flag):
    """Whether `compiler` compiles an empty C file with `flag`."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "probe.c")
        source.write_text("int interop_core_probe;\n")
        try:
            compiler.compile([str(source)], output_dir=tmp, extra_postargs=[flag])
        except Exception:       # CompileError, or the compiler missing altogether
            return False
    return True


def _sanitizer_flags():
    """Compile and link flags for an opt-in sanitizer build (scripts/sanitize.sh), else none.

    ``INTEROP_CORE_SANITIZE=address,undefined`` builds every module with those sanitizers, with
    frame pointers and debug lines so that reports name our source lines, and at -O1 (later on
    the command line than -O3, so it wins) so that inlining does not hide the faulty frame.
    -fno-wrapv undoes CPython's -fwrapv, under which a signed overflow (an extent product, an
    offset) silently wraps and UBSan does not look for it.  UBSan reports abort (no recovery)
    so that one fails the run.  The sanitizer runtimes must be preloaded into the
    (uninstrumented) interpreter; scripts/sanitize.sh does that.
    """
    names = [name.strip() for name in os.environ.get("INTEROP_CORE_SANITIZE", "").split(",")]
    names = [name for name in names if name]
    if not names:
        return [], []
    sanitize = f"-fsanitize={','.join(names)}"
    compile_flags = [sanitize, "-fno-omit-frame-pointer", "-g", "-O1", "-fno-wrapv"]
    if "undefined" in names:
        compile_flags.append("-fno-sanitize-recover=undefined")
    return compile_flags, [sanitize]


class BuildExt(build_ext):
    """build_ext that adds the optional flags the compiler in use accepts."""

    def finalize_options(self):
        super().finalize_options()
        # One module per core unless `-j N` says otherwise (pip and build pass no -j).
        if not self.parallel:
            self.parallel = True

    def build_extensions(self):
        extra = [flag for flag in _STRING_OP_FLAGS if _accepted(self.compiler, flag)]
        sanitize_compile, sanitize_link = _sanitizer_flags()
        for ext in self.extensions:
            ext.extra_compile_args = [*ext.extra_compile_args, *extra, *sanitize_compile]
            ext.extra_link_args = [*ext.extra_link_args, *sanitize_link]
        super().build_extensions()


extensions = [
    Extension(
        name,
        [source],
        include_dirs=["interop_core/include"],
        extra_compile_args=["-O3", "-fno-strict-aliasing", *_DEBUG_INFO, *_GLIBC_COMPAT_COMPILE],
        extra_link_args=_link_args(source),
    )
    for name, source in _modules()
]

setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=cythonize(
        extensions,
        include_path=[".", "plugins"],
        compiler_directives={
            "language_level": 3,
            "embedsignature": True,
            # Argument Clinic's form: CPython reads it as __text_signature__, so that
            # inspect.signature (and help(), IDEs, Sphinx) sees every compiled callable's.
            "embedsignature.format": "clinic",
            "binding": False,
            "boundscheck": False,
            "wraparound": False,
            "initializedcheck": False,
            "cdivision": True,
        },
        nthreads=os.cpu_count() or 2,
    ),
)
