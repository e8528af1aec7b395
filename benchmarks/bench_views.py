"""Per-call cost of turning a framework object into a view, beside the peers, in one run.

Usage::

    python benchmarks/bench_views.py [--quick] [--markdown FILE] [--json FILE]

Paths measured per framework present (numpy, torch CPU, jax CPU):
``StridedMemoryView.from_any`` (ours), cuda.core 1.2 ``StridedMemoryView.from_dlpack`` and
``from_any_interface`` (when installed), the framework's own ``__dlpack__`` (capsule creation
only), ``np.from_dlpack`` and ``torch.from_dlpack`` (a full framework-object import).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._harness import Measurement, format_table, measure  # noqa: E402
from interop_core import StridedMemoryView  # noqa: E402


def _samples(device: str) -> dict[str, object]:
    """One 64x64 float32 object per framework installed, in host or CUDA memory."""
    samples: dict[str, object] = {}
    find = importlib.util.find_spec
    if device == "cpu":
        if find("numpy"):
            import numpy as np

            samples["numpy"] = np.zeros((64, 64), dtype=np.float32)
        if find("torch"):
            import torch

            samples["torch"] = torch.zeros((64, 64), dtype=torch.float32)
        if find("jax"):
            import jax.numpy as jnp

            samples["jax"] = jnp.zeros((64, 64), dtype=jnp.float32)
        return samples
    if find("torch"):
        import torch

        if torch.cuda.is_available():
            samples["torch"] = torch.zeros((64, 64), dtype=torch.float32, device="cuda")
    if find("cupy"):
        import cupy

        samples["cupy"] = cupy.zeros((64, 64), dtype=cupy.float32)
    if find("numba"):
        from numba import cuda

        samples["numba"] = cuda.device_array((64, 64), dtype="float32")
    if find("jax"):
        import jax

        try:
            samples["jax"] = jax.device_put(jax.numpy.zeros((64, 64)), jax.devices("gpu")[0])
        except RuntimeError:
            pass
    return samples


def _paths(framework: str, obj: object, device: str) -> list[tuple[str, Callable[[], object]]]:
    paths: list[tuple[str, Callable[[], object]]] = [
        ("interop_core from_any", lambda: StridedMemoryView.from_any(obj)),
    ]
    if hasattr(obj, "__dlpack__"):
        paths.append(("interop_core from_dlpack", lambda: StridedMemoryView.from_dlpack(obj)))
    if importlib.util.find_spec("cuda") and importlib.util.find_spec("cuda.core"):
        try:
            from cuda.core.utils import StridedMemoryView as CudaCoreView

            if hasattr(obj, "__dlpack__"):
                paths.append(("cuda.core from_dlpack",
                              lambda: CudaCoreView.from_dlpack(obj, stream_ptr=-1)))
            paths.append(("cuda.core from_any_interface",
                          lambda: CudaCoreView.from_any_interface(obj, stream_ptr=-1)))
        except ImportError:
            pass
    if hasattr(obj, "__dlpack__"):
        paths.append((f"{framework} __dlpack__ (capsule only)", obj.__dlpack__))
    if hasattr(obj, "__cuda_array_interface__"):
        paths.append((f"{framework} __cuda_array_interface__ (dict only)",
                      lambda: obj.__cuda_array_interface__))
    if device == "cpu" and importlib.util.find_spec("numpy"):
        import numpy as np

        paths.append(("np.from_dlpack", lambda: np.from_dlpack(obj)))
    if importlib.util.find_spec("torch") and hasattr(obj, "__dlpack__"):
        import torch

        paths.append(("torch.from_dlpack", lambda: torch.from_dlpack(obj)))
    return paths


def run(quick: bool = False, device: str = "cpu") -> list[Measurement]:
    """Measure every path on every framework present; failures are recorded, not raised."""
    results = []
    settings = {"min_batch_s": 0.005, "repeats": 3, "warmup": 20} if quick else {}
    for framework, obj in _samples(device).items():
        for name, fn in _paths(framework, obj, device):
            group = f"view({framework})"
            try:
                fn()
                results.append(Measurement(group, name, measure(fn, **settings)))
            except Exception as exc:  # a peer that cannot take this object is a result too
                results.append(Measurement(group, name, None, f"{type(exc).__name__}: {exc}"[:80]))
    return results


def environment() -> str:
    """One line naming the machine and versions, for the results page."""
    versions = []
    for module in ("numpy", "torch", "jax", "cupy", "numba", "cuda.core"):
        if importlib.util.find_spec(module.split(".")[0]) and importlib.util.find_spec(module):
            try:
                versions.append(f"{module} {importlib.import_module(module).__version__}")
            except Exception:
                pass
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        pass
    cores = os.cpu_count()
    return (f"{cpu} ({cores} cores), Python {platform.python_version()}, " + ", ".join(versions))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run with short batches")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="benchmark host objects (default) or CUDA objects")
    parser.add_argument("--markdown", type=Path, help="write the table to this file")
    parser.add_argument("--json", type=Path, help="write raw results as JSON")
    args = parser.parse_args(argv)
    results = run(args.quick, args.device)
    table = format_table(results)
    print(table)
    if args.markdown:
        args.markdown.write_text(f"Environment: {environment()}\n\n{table}\n")
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=1))
    return 0




if __name__ == "__main__":
    raise SystemExit(main())
