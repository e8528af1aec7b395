"""A careful timeit harness: warm-up, calibration to a minimum batch time, median of repeats.

Each measurement calls the function in a tight loop (``timeit`` with a zero-argument callable)
so the per-call figure includes the Python call overhead a user pays, and nothing else.
"""

from __future__ import annotations

import statistics
import timeit
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Measurement", "measure", "format_table"]


@dataclass(frozen=True)
class Measurement:
    """One benchmarked path."""

    group: str          # what is being done, e.g. "view(numpy)"
    name: str           # who does it, e.g. "interop_core from_any" or a peer
    ns: float | None    # median ns per call, None when the path failed
    note: str = ""      # why it failed, or a remark


def measure(fn: Callable[[], object], *, min_batch_s: float = 0.05, repeats: int = 7,
            warmup: int = 200) -> float:
    """Median nanoseconds per call of ``fn()``.

    Parameters
    ----------
    fn : callable
        Called with no arguments.
    min_batch_s : float
        Each timed batch runs at least this long (calibrated once).
    repeats : int
        Number of timed batches; the median is reported.
    warmup : int
        Untimed calls first (caches, lazy imports, branch predictors).
    """
    for _ in range(warmup):
        fn()
    timer = timeit.Timer(fn)
    number = 1
    while True:
        if timer.timeit(number) >= min_batch_s:
            break
        number *= 2
    samples = [timer.timeit(number) / number * 1e9 for _ in range(repeats)]
    return statistics.median(samples)


def format_table(results: list[Measurement], ours_prefix: str = "interop_core") -> str:
    """A markdown table: group, path, ns per call, and ratio of each peer to ours in its group."""
    ours: dict[str, float] = {}  # group -> the first (headline) path of ours in that group
    for r in results:
        if r.name.startswith(ours_prefix) and r.ns:
            ours.setdefault(r.group, r.ns)
    lines = ["| operation | path | ns / call | × ours |", "| --- | --- | ---: | ---: |"]
    for r in results:
        if r.ns is None:
            lines.append(f"| {r.group} | {r.name} | failed: {r.note} | |")
            continue
        base = ours.get(r.group)
        ratio = f"{r.ns / base:.1f}" if base else ""
        lines.append(f"| {r.group} | {r.name} | {r.ns:,.0f} | {ratio} |")
    return "\n".join(lines)
