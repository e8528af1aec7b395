#!/usr/bin/env python3
"""Sort sanitizer reports into this project's own and the frameworks' own.

Reads AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer logs (the files their
``log_path`` option writes, or any text holding their reports) and the output of NVIDIA's
``compute-sanitizer``; prints one line per distinct report saying whom it belongs to, the frames
of this project's reports, and a summary.

    python3 scripts/sanitizers/attribute.py LOG [LOG ...]

A report is this project's ("ours") when the first frame of its stack that is not the
sanitizer's runtime, the C library or an allocator lies in interop_core, a first-party plugin
(interop_numpy, interop_torch, interop_cupy, interop_numba, interop_jax), the example
third-party plugin (interop_bytetensor) or one of the core's PTX kernels (``ic_copy_*``); it is
"ours (inside <framework>)" when that first frame is a framework's or the driver's but a frame of
ours called it (a bad argument we passed is ours to fix until shown otherwise).  Every other
report is the framework's own, named after the first such frame: python, numpy, torch, jax
(jax, jaxlib, XLA), cupy, numba, cuda (NVIDIA's libraries), system or other.  The CUDA driver
and runtime count as the sanitizer's runtime: compute-sanitizer catches a failed API call
there, and the frame that made the call is the one that counts.

A failed driver call this project makes on purpose (``_EXPECTED``: the parameter count of a
kernel learned by asking past the last parameter) is "expected", listed and never failing.

Exit status: 1 when any report is ours, 0 otherwise (also when there is no log at all).
Standard library only: it runs on the GPU machine as it is.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Report", "owner_of_frame", "parse", "main"]

_PLUGINS = "numpy|torch|cupy|numba|jax|bytetensor"
# Cython spells a module's dotted name into its C symbols with length prefixes:
# interop_core.core._view -> __pyx_..._12interop_core_4core_5_view_...
_OUR_SYMBOL = re.compile(rf"__pyx_\w*?_(?:12interop_core|\d+interop_(?:{_PLUGINS}))_")
_OUR_PATH = re.compile(
    rf"(?:^|[\s(/])(?:interop_core|plugins/interop_(?:{_PLUGINS})|interop_(?:{_PLUGINS}))/")
_OUR_KERNEL = re.compile(r"\bic_copy_\w+")
_SITE = re.compile(r"(?:site|dist)-packages/([A-Za-z0-9_.\-]+)")
# An installed package's folder -> the framework it belongs to.
_PACKAGES = {
    "torch": "torch", "functorch": "torch", "triton": "torch",
    "jax": "jax", "jaxlib": "jax", "jax_plugins": "jax", "jax_cuda12_plugin": "jax",
    "jax_cuda13_plugin": "jax", "jax_cuda12_pjrt": "jax", "jax_cuda13_pjrt": "jax",
    "numpy": "numpy", "numpy.libs": "numpy", "ml_dtypes": "numpy",
    "cupy": "cupy", "cupy_backends": "cupy", "cupyx": "cupy", "fastrlock": "cupy",
    "numba": "numba", "numba_cuda": "numba", "llvmlite": "numba",
    "nvidia": "cuda", "cuda": "cuda",
}
# Symbols of frameworks linked into one big library, and CPython's own source tree.
_SYMBOLS = [
    (re.compile(r"\b(?:xla|stream_executor|tsl|pjrt|jax|nanobind|absl)::|\bPjRt|\bXla"), "jax"),
    (re.compile(r"\b(?:at|c10|torch|caffe2)::"), "torch"),
    (re.compile(r"\bcupy\b|\bCupy"), "cupy"),
    (re.compile(r"(?:^|\s)(?:Objects|Python|Include|Modules|Parser)/\S+\.[ch]:\d"), "python"),
    (re.compile(r"libpython\d|/bin/python\d"), "python"),
    (re.compile(r"libnvrtc|libcublas|libcudnn|libnccl|libnvJitLink|libcusparse|libcufft"),
     "cuda"),
]
# Frames that say where the sanitizer caught it, not who did it: skipped when attributing.
_RUNTIME = re.compile(
    r"libsanitizer/|/libasan\.so|/libubsan\.so|/liblsan\.so|\b__interceptor_|\b__asan_|"
    r"\b__ubsan_|\b__sanitizer|\b___interceptor_|\bin (?:operator new|operator delete|malloc|"
    r"calloc|realloc|free|posix_memalign|aligned_alloc|memalign|valloc|__libc_\w+|mem(?:cpy|"
    r"move|set|cmp|chr)|str(?:n?len|n?cmp|n?cpy|r?chr|str|n?dup|n?cat)|wcslen)\b|/libc\.so|/ld-linux|/libstdc\+\+\.so|/libgcc_s\.so|"
    r"/libpthread\.so|/libm\.so|"
    # The CUDA driver and runtime: where compute-sanitizer catches an API call, not its caller.
    r"/?\blibcuda\.so|/?\blibcudart\.so")
# CPython's allocation wrappers: a leak's owner is whoever called them.
_ALLOCATORS = re.compile(
    r"\bin _?(?:PyMem_\w*(?:Malloc|Calloc|Realloc)|PyObject_\w*(?:Malloc|Calloc|Realloc)|"
    r"_PyObject_GC_\w+|PyType_GenericAlloc|_PyType_AllocNoTrack|gc_alloc|PyObject_GC_New\w*|"
    r"_PyObject_New\w*|PyObject_New\w*|_PyMem_Debug\w+)\b")


def owner_of_frame(frame: str) -> str:
    """Who a stack frame belongs to: 'ours', 'runtime', or a framework's name."""
    if _RUNTIME.search(frame):
        return "runtime"
    site = _SITE.search(frame)
    if site:
        package = site.group(1)
        if re.fullmatch(rf"interop_(?:core|{_PLUGINS})[\w.\-]*", package):
            return "ours"
        return _PACKAGES.get(package.split("-")[0], _PACKAGES.get(package, "other"))
    if _OUR_SYMBOL.search(frame) or _OUR_PATH.search(frame) or _OUR_KERNEL.search(frame):
        return "ours"
    for pattern, owner in _SYMBOLS:
        if pattern.search(frame):
            return owner
    if re.search(r"\[stack\]|\[heap\]|\(<unknown module>\)", frame):
        return "other"
    return "system" if re.search(r"/(?:usr/)?lib\d*/", frame) else "other"


# Failed driver calls made on purpose: (headline, first counted frame, why).  Such a report is
# "expected": listed, never failing the run.
_EXPECTED = [
    (re.compile(r"CUDA_ERROR_INVALID_VALUE\b.*\bcuFuncGetParamInfo\b"),
     re.compile(r"interop_core_4cuda_7_module_function_param_sizes"),
     "a kernel's parameter count, learned where the driver has no cuFuncGetParamCount by asking "
     "for the parameter past the last one"),
]


@dataclass
class Report:
    """One sanitizer report: which tool, its headline, its first stack, and whose it is."""

    tool: str
    headline: str
    frames: list[str] = field(default_factory=list)
    source: str = ""

    def counted_frames(self) -> list[tuple[str, str]]:
        """(frame, owner) of the frames that count: not the runtime's; for a leak, not
        CPython's either (its object constructors allocate for whichever extension called
        them), unless CPython's are all there is."""
        counted = []
        for frame in self.frames:
            owner = owner_of_frame(frame)
            if owner == "runtime" or (self.tool == "leak" and _ALLOCATORS.search(frame)):
                continue
            counted.append((frame, owner))
        if self.tool == "leak":
            return [c for c in counted if c[1] != "python"] or counted
        return counted

    @property
    def owner(self) -> str:
        """'ours', 'ours (inside X)', 'expected' (a failed call made on purpose, see
        _EXPECTED), or the framework whose frame comes first."""
        counted = self.counted_frames()
        if counted and any(headline.search(self.headline) and frame.search(counted[0][0])
                           for headline, frame, _ in _EXPECTED):
            return "expected"
        owners = [owner for _, owner in counted]
        if not owners:
            return "ours" if _OUR_KERNEL.search(self.headline) else "unknown"
        if owners[0] == "ours":
            return "ours"
        if "ours" in owners:
            return f"ours (inside {owners[0]})"
        return owners[0]

    @property
    def is_ours(self) -> bool:
        """Whether the report involves this project's frames (see the module's docstring)."""
        return self.owner.startswith("ours")

    def key(self) -> tuple:
        """Reports with one headline and one first relevant frame count as one."""
        kind = re.sub(r"0x[0-9a-f]+|\d+", "N", self.headline)
        top = next((frame for frame, _ in self.counted_frames()), "")
        return (self.tool, kind, re.sub(r"0x[0-9a-f]+", "", top))


_HOST_START = re.compile(r"^==\d+==ERROR: (\w+Sanitizer): (.*)$")
_UBSAN_START = re.compile(r"^(.*?): runtime error: (.*)$")
_LEAK_START = re.compile(r"^((?:Direct|Indirect) leak of .*)$")
_FRAME = re.compile(r"^\s*#\d+ ")
_CS_LINE = re.compile(r"^=========(?: |$)")
_CS_PREFIX = re.compile(r"^========= ?")


def _host_reports(lines: list[str], source: str) -> list[Report]:
    reports: list[Report] = []
    current: Report | None = None
    stack_lines = 0          # frames of the current report's first stack seen so far
    collecting = False       # still inside (or before) that first stack
    for line in lines:
        start = _HOST_START.match(line)
        ubsan = _UBSAN_START.match(line)
        leak = _LEAK_START.match(line.strip())
        if start and start.group(1) == "LeakSanitizer":
            current = None          # the leak blocks that follow are the reports
            continue
        if start or ubsan or leak:
            if start:
                headline = re.sub(r" (?:on (?:unknown )?address|at pc) .*", "", start.group(2))
                current = Report("asan", headline.strip(), source=source)
            elif ubsan:
                current = Report("ubsan", ubsan.group(2).strip(), source=source)
                current.frames.append(f"at {ubsan.group(1)}")
            else:
                current = Report("leak", leak.group(1).strip(), source=source)
            reports.append(current)
            stack_lines, collecting = 0, True
            continue
        if current is None or not collecting:
            continue
        if _FRAME.match(line):
            current.frames.append(line.strip())
            stack_lines += 1
        elif stack_lines:
            collecting = False      # the allocation / free stacks that follow are not the fault's
    return reports


def _compute_sanitizer_reports(lines: list[str], source: str) -> list[Report]:
    reports: list[Report] = []
    current: Report | None = None
    for line in lines:
        if not _CS_LINE.match(line):
            continue        # (AddressSanitizer's own rule of 65 '=' is not compute-sanitizer's)
        body = _CS_PREFIX.sub("", line.rstrip("\n"))
        if not body.strip():
            current = None
            continue
        if not body.startswith(" "):
            if re.match(r"(?:COMPUTE-SANITIZER|ERROR SUMMARY|LEAK SUMMARY|Target application "
                        r"returned)", body):
                current = None
                continue
            current = Report("compute-sanitizer", body.strip(), source=source)
            reports.append(current)
            continue
        if current is None:
            continue
        text = body.strip()
        if text.startswith(("Host Frame", "Device Frame")) or re.match(r"at \S+", text):
            current.frames.append(text)
        elif text.startswith("in ") and current.frames and "Frame" in current.frames[-1]:
            current.frames[-1] += " " + text      # older releases put the module on a line of its own
    return reports


def parse(text: str, source: str = "") -> list[Report]:
    """Every report in `text` (host sanitizers' and compute-sanitizer's alike)."""
    lines = text.splitlines()
    return _host_reports(lines, source) + _compute_sanitizer_reports(lines, source)


def main(argv: list[str]) -> int:
    """Print the attribution of every report in the files named in `argv`; 1 if any is ours."""
    reports: list[Report] = []
    for name in argv:
        path = Path(name)
        if path.is_file():
            reports += parse(path.read_text(errors="replace"), path.name)
    distinct: dict[tuple, list[Report]] = {}
    for report in reports:
        distinct.setdefault(report.key(), []).append(report)
    ours = {k: v for k, v in distinct.items() if v[0].is_ours}
    theirs = {k: v for k, v in distinct.items() if not v[0].is_ours}
    owners = Counter(v[0].owner for v in theirs.values())
    print(f"sanitizer reports: {len(reports)} ({len(distinct)} distinct): "
          f"{len(ours)} ours, {len(theirs)} the frameworks' own"
          + (f" ({', '.join(f'{o}: {n}' for o, n in sorted(owners.items()))})" if owners else ""))
    for group in ours.values():
        first = group[0]
        print(f"\nOURS  [{first.tool}] {first.owner}: {first.headline}  "
              f"(x{len(group)}, first in {first.source})")
        for frame in first.frames[:12]:
            print(f"      {frame}")
    for group in theirs.values():
        first = group[0]
        top = next((frame for frame, _ in first.counted_frames()), "(no frame)")
        label = "expected" if first.owner == "expected" else "theirs"
        print(f"{label} [{first.tool}] {first.owner}: {first.headline}  (x{len(group)}, first in "
              f"{first.source})\n      {top}")
    return 1 if ours else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
