"""The timing harness: warm-up, calibration to a minimum batch time, median of repeats.

Each measurement calls a zero-argument callable in a tight loop (``timeit``).  The suite builds
them with :func:`bound`: ``functools.partial(fn, obj, ...)`` objects, called from C without a
Python frame, so the figure is the call a user's code makes (argument passing included) and
nothing of the harness; calls with keywords get a small compiled function instead, because a
partial holding keywords rebuilds a dict on every call (~110 ns, which would be charged to
whichever path, ours or a peer's, takes keywords).  The timeit loop itself adds a few ns, the
same for every path.  The median of several
calibrated batches is robust to the scheduler noise of a shared machine; ratios between paths
measured in the same run are what to read, not absolute figures across machines.  The paths of
one operation are timed interleaved (:func:`sample_interleaved`: one batch of each in turn,
round after round), so a slow spell of the machine lands on all of them rather than on
whichever path happened to be running; before each batch the garbage collector's young
generations are collected, untimed, so that no path pays for the garbage another left behind.
"""

from __future__ import annotations

import gc
import statistics
import sys
import threading
import time
import timeit
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial

__all__ = ["Measurement", "Settings", "FULL", "QUICK", "OK", "FAILED", "NOT_APPLICABLE", "STATUSES",
           "bound", "measure", "measure_threads", "sample_interleaved", "Progress"]


def bound(fn: Callable, /, *args: object, **kwargs: object) -> Callable[[], object]:
    """``fn(*args, **kwargs)`` as a zero-argument callable adding as little as possible.

    Parameters
    ----------
    fn : callable
    *args, **kwargs
        Bound now; keywords are passed the way a caller's code passes them (names known when
        the call is compiled), not through a dict built per call.

    Returns
    -------
    callable
    """
    if not kwargs:
        return partial(fn, *args)
    env: dict[str, object] = {"fn": fn}
    params = []
    for i, arg in enumerate(args):
        env[f"arg{i}"] = arg
        params.append(f"arg{i}")
    for name, value in kwargs.items():
        if not name.isidentifier():
            raise ValueError(f"keyword {name!r} is not an identifier")
        env[f"kw_{name}"] = value
        params.append(f"{name}=kw_{name}")
    exec(f"def call():\n    return fn({', '.join(params)})\n", env)  # our own generated source
    return env["call"]  # type: ignore[return-value]


@dataclass(frozen=True)
class Settings:
    """How long and how often to time each path."""

    min_batch_s: float  # each timed batch runs at least this long (calibrated once per path)
    repeats: int        # timed batches per path; the median is reported
    warmup: int         # untimed calls first (caches, lazy imports, branch predictors)
    thread_s: float     # how long each thread runs in the threads section
    import_runs: int    # fresh interpreters started for the import-time measurement


FULL = Settings(min_batch_s=0.02, repeats=9, warmup=200, thread_s=0.3, import_runs=7)
QUICK = Settings(min_batch_s=0.001, repeats=3, warmup=10, thread_s=0.02, import_runs=2)


#: A timed path.
OK = "ok"
#: A path that raised: the error is in ``note``.
FAILED = "failed"
#: A path that cannot run on this object or device (a CUDA-only interface of host memory):
#: not timed, not a failure; the reason is in ``note``.
NOT_APPLICABLE = "not applicable"
STATUSES = (OK, FAILED, NOT_APPLICABLE)


@dataclass(frozen=True)
class Measurement:
    """One benchmarked path.

    ``group`` is what is done (e.g. ``"view(torch cpu)"``); ``name`` is who does it (ours or a
    peer); ``ours`` marks interop-core's paths, the first of which in a group is the group's
    reference for ratios.  ``status`` is :data:`OK` (timed), :data:`FAILED` (it raised) or
    :data:`NOT_APPLICABLE` (it cannot run here); when left empty it follows ``ns`` (results
    written before the field existed load as timed or failed).
    """

    section: str          # the suite section, e.g. "view", "to", "viewable"
    group: str            # what is being done, e.g. "view(numpy cpu)"
    name: str             # who does it, e.g. "interop_core view()" or a peer
    ns: float | None      # median ns per call; None when the path failed or does not apply
    ours: bool = False    # an interop-core path
    note: str = ""        # why it failed or does not apply, or a remark
    extra: dict = field(default_factory=dict)  # section-specific numbers (threads, ...)
    status: str = ""      # OK, FAILED or NOT_APPLICABLE (derived from ns when empty)

    def __post_init__(self) -> None:
        status = self.status or (OK if self.ns is not None else FAILED)
        if status not in STATUSES:
            raise ValueError(f"Measurement {self.group!r} / {self.name!r}: status {status!r} "
                             f"is not one of {STATUSES}")
        if (status == OK) != (self.ns is not None):
            raise ValueError(f"Measurement {self.group!r} / {self.name!r}: status {status!r} "
                             f"with ns={self.ns!r} (only a timed path has a time)")
        object.__setattr__(self, "status", status)

    def as_dict(self) -> dict:
        """A JSON-ready dict."""
        return asdict(self)


def measure(fn: Callable[[], object], settings: Settings) -> float:
    """Median nanoseconds per call of ``fn()``.

    Parameters
    ----------
    fn : callable
        Called with no arguments.
    settings : Settings
        Batch length, repeats and warm-up.

    Returns
    -------
    float
    """
    return statistics.median(sample_interleaved([fn], settings)[0])


def sample_interleaved(fns: list[Callable[[], object]],
                       settings: Settings) -> list[list[float]]:
    """Nanoseconds per call of each ``fn()`` in every round, their batches taken in turn.

    Each callable is warmed up and gets its own batch length; then every round times one batch
    of each, so the paths of an operation share the machine's slow and fast spells, and the
    k-th samples of two paths can be compared pairwise.

    Parameters
    ----------
    fns : list of callable
        Called with no arguments.
    settings : Settings
        Batch length, repeats (rounds) and warm-up.

    Returns
    -------
    list of list of float
        Per callable, in order, its ``settings.repeats`` samples in round order.
    """
    timers, numbers = [], []
    for fn in fns:
        for _ in range(settings.warmup):
            fn()
        timer = timeit.Timer(fn)
        number = 1
        while timer.timeit(number) < settings.min_batch_s:
            number *= 2
        timers.append(timer)
        numbers.append(number)
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(settings.repeats):
        for timer, number, out in zip(timers, numbers, samples, strict=True):
            # The garbage the previous path left (a peer's cycles, finalizers) is collected
            # now, untimed, rather than by whichever path the collector happens to interrupt.
            gc.collect(1)
            out.append(timer.timeit(number) / number * 1e9)
    return samples


def measure_threads(fn: Callable[[], object], threads: int, seconds: float,
                    chunk: int = 200) -> tuple[float, float]:
    """Run ``fn`` from ``threads`` threads at once for ``seconds``.

    Returns
    -------
    tuple of float
        (median over threads of ns per call seen by one thread, total calls per second).
    """
    barrier = threading.Barrier(threads + 1)
    per_thread: list[tuple[int, float]] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(chunk):  # warm-up
            fn()
        barrier.wait()
        calls = 0
        start = time.perf_counter()
        deadline = start + seconds
        now = start
        while now < deadline:
            for _ in range(chunk):
                fn()
            calls += chunk
            now = time.perf_counter()
        with lock:
            per_thread.append((calls, now - start))

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    wall_start = time.perf_counter()
    for w in workers:
        w.join()
    wall = time.perf_counter() - wall_start
    ns_per_call = statistics.median(elapsed / calls * 1e9 for calls, elapsed in per_thread)
    return ns_per_call, sum(calls for calls, _ in per_thread) / wall


class Progress:
    """``[ 12/140] section: group: path`` on stderr, one rewritten line on a terminal."""

    def __init__(self, total: int, enabled: bool = True, stream=None):
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = enabled and getattr(self.stream, "isatty", lambda: False)()
        self._last_section = None

    def step(self, section: str, group: str, name: str) -> None:
        """Announce the next path."""
        self.done += 1
        if not self.enabled:
            return
        text = f"[{self.done:>4}/{self.total}] {section}: {group}: {name}"
        if self.tty:
            self.stream.write("\r" + text[:110].ljust(110))
        elif section != self._last_section:
            # Logs (CI, tee) get one line per section rather than hundreds of lines.
            self.stream.write(text + "\n")
        self._last_section = section
        self.stream.flush()

    def close(self) -> None:
        """End the progress line."""
        if self.enabled and self.tty:
            self.stream.write("\r" + " " * 110 + "\r")
            self.stream.flush()
