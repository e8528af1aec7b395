"""Eight threads: view(), to() and launch_args() on every framework's objects while plugins
come and go.

Five threads read and hand over numpy, torch, jax, bytetensor and numba-simulator objects
(``view()``, ``to()`` into every installed target and into targets that plugins add and remove,
``launch_args()``), checking every pointer and every value; three threads register and
unregister plugins that override the readers of numpy and torch arrays and the numpy exporter
(with correct ones), add exporters, declare types of modules never imported, declare stream
types, and fail in their hooks.  Each result must be right, or, for a target that a plugin is
adding or removing at that moment, a ``ValueError`` naming it; nothing may crash or hang.

It runs in a worker process (tests/_subprocess_pool.py): a crash fails the test, and a hang is
killed after a bound, with every thread's stack (``faulthandler``) in the report.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import random
import sys
import threading
import time
import warnings

import numpy as np
import pytest
from _subprocess_pool import SubprocessPool, TaskError, WorkerDied, WorkerTimeout
from _targets import WORKER_ENVIRONMENT, installed_targets, read_result

#: Seconds the plugin threads churn; the whole test stays well under 20 s.
CHURN_SECONDS = 4.0
#: Seconds after which a thread that has not finished counts as hung.
HANG_SECONDS = 12.0
READERS = 5
CHURNERS = 3
COUNT = 64


def _sources():
    """name -> an object of that framework holding 0, 1, ..., COUNT - 1 (those installed)."""
    sources = {"numpy": np.arange(COUNT, dtype=np.float32)}
    try:
        import torch
    except ImportError:
        pass
    else:
        sources["torch"] = torch.arange(COUNT, dtype=torch.float32)
    try:
        import jax
    except ImportError:
        pass
    else:
        sources["jax"] = jax.device_put(np.arange(COUNT, dtype=np.float32))
    try:
        import bytetensor
    except ImportError:
        pass
    else:
        sources["bytetensor"] = bytetensor.ByteTensor.arange(COUNT, "float32")
    try:
        from numba import cuda
    except ImportError:
        pass
    else:
        if "simulator" in getattr(cuda.to_device, "__module__", ""):   # no GPU: the simulator
            sources["numba"] = cuda.to_device(np.arange(COUNT, dtype=np.float32))
    return sources


class StressStream:
    """A stream type a churning plugin declares (never passed to view())."""

    handle = 7


def _declarations(rng, thread, i):
    """A random set of declarations for one plugin (correct readers and exporters only)."""
    from interop_core import StridedMemoryView

    def numpy_exporter(v, stream):
        return np.asarray(v)

    choices = [
        lambda r: r.add_exporter(f"stress-{thread}-{i % 4}", lambda v, s: v),
        lambda r: r.add_type("numpy:ndarray", "array_interface"),
        lambda r: r.add_type("torch:Tensor", "dunder_dlpack"),
        lambda r: r.add_type("numpy:ndarray",
                             lambda obj, s: StridedMemoryView.from_array_interface(obj)),
        lambda r: r.add_exporter("numpy", numpy_exporter, types=("numpy:ndarray",),
                                 preserves_readonly=True),
        lambda r: r.add_type(f"ic_stress_never_imported_{thread}.m:Thing", "array_interface"),
        lambda r: r.add_stream_type(StressStream, lambda s: s.handle),
    ]
    chosen = rng.sample(choices, rng.randint(1, 3))
    fails = rng.random() < 0.1

    def declare(registry):
        for choice in chosen:
            choice(registry)
        if fails:
            raise RuntimeError("a plugin whose hook fails")

    return declare, fails


def stress():
    """The 8-thread run; returns a dict of counts and the failures seen (empty: right).

    Runs in a worker process.
    """
    from conftest import make_plugin

    import interop_core
    from interop_core.plugins import ReadOnlyHandoffWarning

    warnings.simplefilter("ignore", ReadOnlyHandoffWarning)
    warnings.simplefilter("ignore")      # jax's copy warnings for numpy memory it cannot share
    # Every thread's stack goes to stderr (and so into the report) if the run hangs.
    faulthandler.dump_traceback_later(HANG_SECONDS + 2, exit=False)
    sources = _sources()
    expected = np.arange(COUNT, dtype=np.float32)
    addresses = {name: interop_core.view(obj).ptr for name, obj in sources.items()}
    targets = installed_targets()
    stress_targets = [f"stress-{t}-{k}" for t in range(CHURNERS) for k in range(4)]
    failures = []
    counts = {"view": 0, "to": 0, "launch_args": 0, "unknown_target": 0, "registered": 0,
              "failed_hooks": 0}
    lock = threading.Lock()
    stop = threading.Event()

    def fail(what):
        with lock:
            if len(failures) < 20:
                failures.append(what)

    def count(key):
        with lock:
            counts[key] += 1

    def reader(seed):
        rng = random.Random(seed)
        names = list(sources)
        while not stop.is_set():
            name = rng.choice(names)
            obj = sources[name]
            try:
                v = interop_core.view(obj)
                if v.ptr != addresses[name] or v.shape != (COUNT,):
                    fail(f"view({name}) gave ptr {v.ptr:#x}, shape {v.shape}")
                count("view")
                target = rng.choice(targets if rng.random() < 0.7 else stress_targets)
                try:
                    result = interop_core.to(obj, target)
                except ValueError as exc:
                    if target in stress_targets and target in str(exc):
                        count("unknown_target")
                    else:
                        fail(f"to({name}, {target!r}): ValueError: {exc}")
                else:
                    if target in stress_targets:
                        values = np.asarray(result)
                    else:
                        values = read_result(target, result, np.float32)[0]
                    if not np.array_equal(values, expected):
                        fail(f"to({name}, {target!r}) gave {values[:4]}")
                    count("to")
                others = rng.sample(names, rng.randint(1, len(names)))
                record = interop_core.launch_args([sources[n] for n in others])
                if record.pointers.tolist() != [addresses[n] for n in others]:
                    fail(f"launch_args({others}) gave {record.pointers.tolist()}")
                count("launch_args")
            except Exception as exc:  # noqa: BLE001  (every failure is reported)
                fail(f"{name}: {type(exc).__name__}: {exc}")

    def churn(thread):
        rng = random.Random(1000 + thread)
        alive = []
        i = 0
        deadline = time.monotonic() + CHURN_SECONDS
        try:
            while time.monotonic() < deadline:
                declare, fails = _declarations(rng, thread, i)
                name = f"stress-plugin-{thread}-{i}"
                i += 1
                try:
                    interop_core.register_plugin(make_plugin(declare), name)
                except RuntimeError as exc:
                    if not (fails and name in str(exc)):
                        fail(f"register_plugin({name}): {exc}")
                    count("failed_hooks")
                else:
                    if fails:
                        fail(f"register_plugin({name}) accepted a plugin whose hook raised")
                    alive.append(name)
                    count("registered")
                while alive and (len(alive) > 3 or rng.random() < 0.5):
                    interop_core.unregister_plugin(alive.pop(rng.randrange(len(alive))))
        except Exception as exc:  # noqa: BLE001
            fail(f"churn {thread}: {type(exc).__name__}: {exc}")
        finally:
            for name in alive:
                interop_core.unregister_plugin(name)

    threads = [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(READERS)]
    churners = [threading.Thread(target=churn, args=(k,), daemon=True) for k in range(CHURNERS)]
    started = time.monotonic()
    for t in threads + churners:
        t.start()
    for t in churners:
        t.join(max(0.0, HANG_SECONDS - (time.monotonic() - started)))
    stop.set()
    for t in threads:
        t.join(max(0.0, HANG_SECONDS - (time.monotonic() - started)))
    hung = [t.name for t in threads + churners if t.is_alive()]
    faulthandler.cancel_dump_traceback_later()
    if hung:
        faulthandler.dump_traceback(all_threads=True)
        failures.append(f"threads still running after {HANG_SECONDS} s: {hung}")
    leftover = [info.name for info in interop_core.plugin_status()
                if info.name.startswith("stress-plugin-")]
    if leftover:
        failures.append(f"plugins left registered: {leftover}")
    sys.stderr.flush()
    return {"counts": counts, "sources": sorted(sources), "failures": failures,
            "seconds": round(time.monotonic() - started, 2)}


@pytest.fixture(scope="module")
def pool():
    with SubprocessPool(size=1, environment=WORKER_ENVIRONMENT, timeout=HANG_SECONDS + 6) as workers:
        yield workers


def test_views_exports_and_launch_args_stay_right_while_plugins_come_and_go(pool):
    (result,) = pool.map(stress, [()])
    if isinstance(result, WorkerDied):
        pytest.fail(f"the stress run crashed its worker process:\n{result}", pytrace=False)
    if isinstance(result, (WorkerTimeout, TaskError)):
        pytest.fail(str(result), pytrace=False)
    assert not result["failures"], "\n".join(result["failures"])
    counts = result["counts"]
    # The run did real work on both sides (a test that checked nothing could not fail).
    assert counts["registered"] >= CHURNERS and counts["failed_hooks"] >= 1, counts
    assert min(counts["view"], counts["to"], counts["launch_args"]) >= 100, counts
    installed = {name for name in ("numpy", "torch", "jax", "bytetensor")
                 if importlib.util.find_spec(name) is not None}
    assert installed <= set(result["sources"]), result["sources"]
