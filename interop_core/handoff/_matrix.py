"""The handoff matrix of the main job: every installed framework to every other, verified.

For each source object (a 3x4 float32 array of each installed framework, on the host and, where
a GPU exists, on the device) and each exporter target, ``to(source, target)`` is called once and
checked: the result must have the source's pointer (zero-copy) and its values; then the call is
timed, together with the target framework's own imports of the same source (``np.asarray``,
``torch.from_dlpack``, ...), and the cell gives ours divided by the fastest of them (the
DESIGN.md budget: at most 1.0).  Moves that cannot be zero-copy (device memory into numpy, host
memory into cupy) are reported as impossible rather than attempted as copies.
"""

from __future__ import annotations

import importlib.util
import timeit
import warnings

from .. import plugins
from ..registry._registry import view
from ._handoff import to

__all__ = ["handoff_matrix", "format_matrix", "TARGET_IMPORTS", "target_imports"]

#: The target framework's own imports of a foreign object, per exporter target (by name).
TARGET_IMPORTS: dict[str, tuple[str, ...]] = {
    "numpy": ("np.from_dlpack", "np.asarray"),
    "torch": ("torch.from_dlpack",),
    "cupy": ("cupy.from_dlpack", "cupy.asarray"),
    "numba": ("numba.cuda.as_cuda_array",),
    "jax": ("jax.dlpack.from_dlpack", "jnp.from_dlpack"),
}


def target_imports(target: str) -> list[tuple[str, object]]:
    """``[(name, import_function)]``: ``target``'s own imports (imports that framework)."""
    if target == "numpy":
        import numpy as np

        return [("np.from_dlpack", np.from_dlpack), ("np.asarray", np.asarray)]
    if target == "torch":
        import torch

        return [("torch.from_dlpack", torch.from_dlpack)]
    if target == "cupy":
        import cupy

        return [("cupy.from_dlpack", cupy.from_dlpack), ("cupy.asarray", cupy.asarray)]
    if target == "numba":
        from numba import cuda

        return [("numba.cuda.as_cuda_array", cuda.as_cuda_array)]
    if target == "jax":
        import jax.dlpack
        import jax.numpy as jnp

        return [("jax.dlpack.from_dlpack", jax.dlpack.from_dlpack),
                ("jnp.from_dlpack", jnp.from_dlpack)]
    return []


def _time_per_call(fn, min_time: float) -> float:
    """Seconds per call of ``fn()``, timed over at least ``min_time`` seconds."""
    timer = timeit.Timer(fn)
    number = 1
    while (elapsed := timer.timeit(number)) < min_time:
        number *= 2
    return elapsed / number


def _fastest_own_import(target: str, source: object, min_time: float) -> tuple[str, float] | None:
    """(name, seconds per call) of the fastest of ``target``'s imports that takes ``source``."""
    best = None
    for name, fn in target_imports(target):
        try:
            fn(source)
        except Exception:  # an import that cannot take this source is no budget
            continue
        seconds = _time_per_call(lambda fn=fn: fn(source), min_time)
        if best is None or seconds < best[1]:
            best = (name, seconds)
    return best


def _sources() -> dict[str, object]:
    """One small object per installed framework and device."""
    sources: dict[str, object] = {}
    find = importlib.util.find_spec
    if find("numpy"):
        import numpy as np

        # 64-byte aligned, as jax needs to share host memory rather than copy it.
        raw = np.zeros(12 * 4 + 64, dtype=np.uint8)
        start = -raw.ctypes.data % 64
        sources["numpy"] = raw[start:start + 48].view(np.float32).reshape(3, 4)
        sources["numpy"][...] = np.arange(12, dtype=np.float32).reshape(3, 4)
    if find("torch"):
        import torch

        sources["torch"] = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        if torch.cuda.is_available():
            sources["torch cuda"] = sources["torch"].cuda()
    if find("jax"):
        import jax

        cpu = jax.devices("cpu")[0]
        sources["jax"] = jax.device_put(jax.numpy.arange(12, dtype="float32").reshape(3, 4), cpu)
        try:
            gpu = jax.devices("gpu")[0]
            sources["jax cuda"] = jax.device_put(sources["jax"], gpu)
        except RuntimeError:
            pass
    if find("cupy") and "torch cuda" in sources:
        import cupy

        sources["cupy"] = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    if find("numba") and "torch cuda" in sources:
        from numba import cuda

        if cuda.is_available():
            import numpy as np

            sources["numba"] = cuda.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
    return sources


def _host_values(obj: object) -> list:
    """The values of any viewable object, copied to the host by a framework that can."""
    v = view(obj)
    if v.is_host_accessible:
        import numpy as np

        return np.array(np.asarray(to(v, "numpy"))).tolist()
    import torch

    return torch.from_dlpack(v).cpu().tolist()


def handoff_matrix(min_time: float = 0.02) -> tuple[list[str], list[str], dict]:
    """Run every (source, target) handoff once, verify it, and time it.

    Parameters
    ----------
    min_time : float
        Seconds of calls to time each pair over.

    Returns
    -------
    tuple
        ``(source names, target names, {(source, target): cell text})``.
    """
    sources = _sources()
    plugins.discover()
    # Exporters are registered whether or not their framework is installed (plugins never
    # import it): a column only for the frameworks that are.
    targets = sorted(name for name in plugins.export_table if isinstance(name, str)
                     and name in {"numpy", "torch", "jax", "cupy", "numba"}
                     and importlib.util.find_spec(name) is not None)
    cells = {}
    for source_name, source in sources.items():
        expected_ptr = view(source).ptr
        expected_values = _host_values(source)
        for target in targets:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # read-only handoffs warn by design
                try:
                    out = to(source, target)
                except (BufferError, ValueError) as exc:
                    cells[source_name, target] = "impossible" if "without a copy" in str(
                        exc) or "host memory" in str(exc) else f"error: {exc}"[:40]
                    continue
                except Exception as exc:  # a framework refusing: reported, not fatal
                    cells[source_name, target] = f"error: {type(exc).__name__}"
                    continue
                if view(out).ptr != expected_ptr:
                    cells[source_name, target] = "COPIED"
                    continue
                if _host_values(out) != expected_values:
                    cells[source_name, target] = "WRONG VALUES"
                    continue
                ours = _time_per_call(lambda s=source, t=target: to(s, t), min_time)
                cell = f"ok {ours * 1e6:,.1f} us"
                # A framework's import of its own object is an identity: no budget to compare.
                own = (None if source_name.split()[0] == target
                       else _fastest_own_import(target, source, min_time))
                if own is not None:
                    # Timed again after the peer, the better of the two: the machine's drift
                    # during the peer's timing is not ours.
                    ours = min(ours, _time_per_call(lambda s=source, t=target: to(s, t),
                                                    min_time))
                    cell = f"ok {ours * 1e6:,.1f} us"
                    cell += f", {ours / own[1]:.2f}x {own[0]}"
                cells[source_name, target] = cell
    return list(sources), targets, cells


def format_matrix(sources: list[str], targets: list[str], cells: dict) -> str:
    """A markdown table: one row per source, one column per target."""
    lines = ["| from \\ to | " + " | ".join(targets) + " |",
             "| --- |" + " --- |" * len(targets)]
    for source in sources:
        lines.append(f"| {source} | " + " | ".join(cells.get((source, t), "") for t in targets)
                     + " |")
    return "\n".join(lines)
