"""view() of numpy and jax arrays: the plugins' compiled readers vs the generic path vs peers.

Run ``python -m benchmarks.bench_plugins_numpy_jax [--quick]`` from the repository root (with
``plugins/`` importable).  Prints a markdown table; every path runs in the same process so the
ratios are comparable.  ``generic`` is the core's protocol path the type would take without a
plugin (``StridedMemoryView.from_any``); ``fallback`` is the plugin's own reader with its
validation result pinned to False (what a numpy/jax whose internals changed would get).
"""

from __future__ import annotations

import argparse
import importlib.util

from benchmarks._harness import Measurement, format_table, measure

__all__ = ["run", "main"]


def _samples() -> dict[str, object]:
    import numpy as np

    samples = {"numpy": np.zeros((64, 64), np.float32)}
    if importlib.util.find_spec("jax"):
        import jax
        import jax.numpy as jnp

        samples["jax cpu"] = jax.device_put(jnp.zeros((64, 64), jnp.float32),
                                            jax.devices("cpu")[0])
        try:
            samples["jax cuda"] = jax.device_put(jnp.zeros((64, 64), jnp.float32),
                                                 jax.devices("cuda")[0])
        except RuntimeError:
            pass
    return samples


def run(quick: bool = False) -> list[Measurement]:
    """Measure each path on each sample; failures are recorded, not raised."""
    import interop_core
    from interop_core import StridedMemoryView, _jax_reader, _numpy_reader

    settings = {"min_batch_s": 0.005, "repeats": 3, "warmup": 20} if quick else {}
    results = []
    for label, obj in _samples().items():
        group = f"view({label})"
        module = _numpy_reader if label == "numpy" else _jax_reader
        interop_core.view(obj)
        ok, reason = module.validation_status()
        paths = [
            ("interop_core view (plugin reader)", lambda o=obj: interop_core.view(o)),
            ("interop_core generic (from_any)", lambda o=obj: StridedMemoryView.from_any(o)),
        ]
        if hasattr(obj, "__dlpack__"):
            paths.append(("interop_core from_dlpack",
                          lambda o=obj: StridedMemoryView.from_dlpack(o)))
        try:
            from cuda.core.utils import StridedMemoryView as CudaCoreView

            paths.append(("cuda.core from_dlpack",
                          lambda o=obj: CudaCoreView.from_dlpack(o, stream_ptr=-1)))
            paths.append(("cuda.core from_any_interface",
                          lambda o=obj: CudaCoreView.from_any_interface(o, stream_ptr=-1)))
        except ImportError:
            pass
        if hasattr(obj, "__dlpack__"):
            paths.append((f"{label} __dlpack__ (capsule only)", obj.__dlpack__))
        for name, fn in paths:
            try:
                results.append(Measurement(group, name, measure(fn, **settings),
                                           "" if ok or "plugin" not in name else reason))
            except Exception as exc:
                results.append(Measurement(group, name, None, f"{type(exc).__name__}: {exc}"))
        module.set_validation_result(False, "benchmark")
        try:
            results.append(Measurement(group, "interop_core view (plugin fallback)",
                                       measure(lambda o=obj: interop_core.view(o), **settings)))
        finally:
            module.set_validation_result(None)
    return results


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short batches (smoke test)")
    args = parser.parse_args(argv)
    print(format_table(run(quick=args.quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
