"""What ``interop_core.view()`` adds over calling the reader directly.

Usage::

    python benchmarks/bench_dispatch.py [--quick] [--markdown FILE]

For each object, the reader is called in a C loop with its table entry in hand, and again with
the lookup of ``type(obj)`` that ``view()`` does first (``_registry.time_dispatch``); the
difference is the dispatch overhead, free of Python call overhead and of timer noise.  The
Python-level ``view(obj)`` is timed too, for the absolute per-call cost.  Readers: the core's compiled DLPack C exchange API reader (torch), the
compiled ``__dlpack__`` reader (numpy), the compiled buffer-protocol reader (bytearray), and a
pure-Python plugin reader.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import interop_core  # noqa: E402
from benchmarks._harness import measure  # noqa: E402
from interop_core import StridedMemoryView, plugins, view  # noqa: E402
from interop_core._registry import time_dispatch  # noqa: E402


class PyTensor:
    """A framework type whose plugin reader is plain Python."""

    def __init__(self, address: int, n: int, owner: object):
        self.address, self.n, self.owner = address, n, owner


def read_pytensor(obj, stream):
    return StridedMemoryView.from_pointer(obj.address, (obj.n,), dtype="float32", owner=obj)


class _Plugin:
    @interop_core.hookimpl
    def interop_core_register(self, registry):
        registry.add_type(PyTensor, read_pytensor)


def _objects() -> dict[str, object]:
    import numpy as np

    objects: dict[str, object] = {}
    if importlib.util.find_spec("torch"):
        import torch

        objects["torch (compiled: DLPack C exchange API)"] = torch.zeros(64, 64)
    objects["numpy (compiled: __dlpack__)"] = np.zeros((64, 64), dtype=np.float32)
    objects["bytearray (compiled: buffer protocol)"] = bytearray(256)
    backing = np.zeros(64, dtype=np.float32)
    objects["plugin type (Python reader)"] = PyTensor(backing.ctypes.data, 64, backing)
    return objects


def run(quick: bool = False) -> list[tuple[str, float, float, float]]:
    """(object, ns of view() from Python, ns of the reader in C, ns the lookup adds)."""
    interop_core.register_plugin(_Plugin(), name="bench-dispatch")
    settings = {"min_batch_s": 0.005, "repeats": 3, "warmup": 20} if quick else {}
    rows = []
    try:
        for label, obj in _objects().items():
            view(obj)  # first call decides and caches the reader for this type
            assert plugins.reader_for(type(obj)) is not None
            through_view = measure(lambda obj=obj: view(obj), **settings)
            direct, looked_up = time_dispatch(obj, 20 if quick else 400)
            # The median of paired differences is robust to the machine's noise; the medians
            # of each side give the absolute figures.
            overhead = statistics.median(b - a for a, b in zip(direct, looked_up, strict=True))
            rows.append((label, through_view, statistics.median(direct), overhead))
    finally:
        interop_core.unregister_plugin("bench-dispatch")
    return rows


def format_rows(rows: list[tuple[str, float, float, float]]) -> str:
    lines = ["| object (reader) | view() from Python, ns | reader called in C, ns"
             " | dispatch overhead (median of paired blocks), ns |",
             "| --- | ---: | ---: | ---: |"]
    lines += [f"| {label} | {v:,.1f} | {d:,.1f} | {o:+.1f} |" for label, v, d, o in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run with short batches")
    parser.add_argument("--markdown", type=Path, help="write the table to this file")
    args = parser.parse_args(argv)
    table = format_rows(run(args.quick))
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
