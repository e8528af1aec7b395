"""view(torch tensor): the torch plugin's AOTI reader against the other paths, in one run.

Run from the repository root: ``python -m benchmarks.bench_torch [--device cuda]``.  Paths:
``interop_core.view`` (the plugin's AOTI reader), the same reader with its Python-API checks
instead of the DispatchKeySet load, the core's DLPack C exchange API reader and ``__dlpack__``
reader (what the plugin falls back to), cuda.core's ``StridedMemoryView.from_dlpack`` and
torch's own ``__dlpack__``; plus ``to(view, "torch")`` against ``torch.from_dlpack(view)``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

import interop_core
from benchmarks._harness import Measurement, format_table, measure
from interop_core import _registry, _torch_reader

__all__ = ["run", "main"]


def run(device: str = "cpu", quick: bool = False) -> list[Measurement]:
    """Measure every path on a small 2-d tensor of ``device``."""
    import torch

    settings = {"min_batch_s": 0.005, "repeats": 3, "warmup": 20} if quick else {}
    t = torch.zeros((64, 64), device=device)
    results: list[Measurement] = []

    def add(group, name, fn):
        try:
            fn()
            results.append(Measurement(group, name, measure(fn, **settings)))
        except Exception as exc:  # a path that cannot take the object is a result too
            results.append(Measurement(group, name, None, f"{type(exc).__name__}: {exc}"[:80]))

    view = interop_core.view
    group = f"view(torch {device})"
    add(group, "interop_core view (AOTI)", lambda: view(t))
    _torch_reader.set_validation_result(True, keyset=False)
    add(group, "interop_core view (AOTI, Python-API checks)", lambda: view(t))
    _torch_reader.set_validation_result(True)
    exchange = _registry.new_entry("dlpack_c_exchange_api")
    dunder = _registry.new_entry("dunder_dlpack")
    read_with = _registry.read_with
    add(group, "interop_core DLPack C exchange API reader", lambda: read_with(exchange, t))
    add(group, "interop_core __dlpack__ reader", lambda: read_with(dunder, t))
    _torch_reader.set_validation_result(False, "benchmark")
    add(group, "interop_core view (fallback: checks + exchange API)", lambda: view(t))
    _torch_reader.set_validation_result(True)
    if importlib.util.find_spec("cuda") and importlib.util.find_spec("cuda.core"):
        try:
            from cuda.core.utils import StridedMemoryView as CudaCoreView

            add(group, "cuda.core from_dlpack",
                lambda: CudaCoreView.from_dlpack(t, stream_ptr=-1))
        except ImportError as exc:
            results.append(Measurement(group, "cuda.core from_dlpack", None, str(exc)[:80]))
    add(group, "torch __dlpack__ (capsule only)", t.__dlpack__)

    v = view(t)
    group = f"to(view, 'torch') {device}"
    add(group, "interop_core to(view, 'torch')", lambda: interop_core.to(v, "torch"))
    add(group, "interop_core _torch_reader.to_torch", lambda: _torch_reader.to_torch(v))
    add(group, "torch.from_dlpack(view)", lambda: torch.from_dlpack(v))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(_torch_reader.validation_status())
    print(format_table(run(args.device, args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
