"""The suite's sections: each builds a list of cases from what is installed here.

A case is a named, deferred measurement.  Building a section creates the sample objects and the
callables (so the run can announce how many paths it will time); running a case times it, and a
path that raises becomes a failed result, never an aborted run.  Peers are looked up at run time:
whatever is importable is measured, in the same process and run as ours.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from ._harness import (
    FULL,
    NOT_APPLICABLE,
    QUICK,
    Measurement,
    Settings,
    bound,
    measure,
    measure_threads,
    sample_interleaved,
)

__all__ = ["Case", "SECTIONS", "build_cases", "run_case", "run_group", "samples"]

FRAMEWORKS = ("numpy", "torch", "cupy", "numba", "jax")


@dataclass
class Case:
    """One path to time: ``fn`` is timed with the harness unless ``runner`` is given."""

    section: str
    group: str
    name: str
    fn: Callable[[], object] | None = None
    ours: bool = False
    # A custom measurement: settings -> (ns or None, note, extra dict).
    runner: Callable[[Settings], tuple[float | None, str, dict]] | None = None
    note: str = ""
    # How many of the operation one call of ``fn`` does (shards() of n shards: n); the time
    # is reported per one.
    calls: int = 1
    # Why this path cannot run here (a CUDA-only interface of host memory): when set, the path
    # is reported as not applicable, never called, and is not counted as a failure.
    not_applicable: str = ""


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:100]


def run_case(case: Case, settings: Settings) -> Measurement:
    """Time one case; an exception is recorded as a failed result."""
    if case.not_applicable:
        return _not_applicable(case)
    try:
        if case.runner is not None:
            ns, note, extra = case.runner(settings)
        else:
            case.fn()  # fails fast, before any warm-up, for a path that cannot take the object
            ns, note, extra = measure(case.fn, settings) / case.calls, case.note, {}
    except Exception as exc:  # a peer that cannot take this object is a result too
        return _failed(case, exc)
    return Measurement(case.section, case.group, case.name, ns, case.ours, note, extra)


def _failed(case: Case, exc: Exception) -> Measurement:
    return Measurement(case.section, case.group, case.name, None, case.ours, _error(exc))


def _not_applicable(case: Case) -> Measurement:
    return Measurement(case.section, case.group, case.name, None, case.ours,
                       case.not_applicable, status=NOT_APPLICABLE)


def run_group(cases: list[Case], settings: Settings) -> list[Measurement]:
    """Time the paths of one operation, interleaved; results in the order of ``cases``.

    Paths with their own runner are timed on their own; a path that raises is a failed result;
    a path marked not applicable is reported as such without being called.
    """
    results: dict[int, Measurement] = {}
    timed: list[int] = []
    for i, case in enumerate(cases):
        if case.not_applicable:
            results[i] = _not_applicable(case)
            continue
        if case.runner is not None:
            results[i] = run_case(case, settings)
            continue
        try:
            case.fn()  # fails fast, before any warm-up, for a path that cannot take the object
        except Exception as exc:
            results[i] = _failed(case, exc)
            continue
        timed.append(i)
    try:
        rounds = sample_interleaved([cases[i].fn for i in timed], settings)
    except Exception:  # a path that fails only under load: time each alone to name it
        rounds = None
    for k, i in enumerate(timed):
        case = cases[i]
        # The rounds are kept so that two paths of the operation can be compared pairwise.
        per_call = [x / case.calls for x in rounds[k]] if rounds is not None else None
        results[i] = (Measurement(case.section, case.group, case.name,
                                  statistics.median(per_call), case.ours, case.note,
                                  {"rounds": [round(x, 2) for x in per_call]})
                      if per_call is not None else run_case(case, settings))
    return [results[i] for i in range(len(cases))]


# -- samples ----------------------------------------------------------------------------------

def _cuda_present() -> bool:
    from ..cuda import _cuda

    try:
        return _cuda.device_count() > 0
    except Exception:
        return False


def samples(device: str, shape: tuple = (64, 64),
            only: tuple[str, ...] = FRAMEWORKS) -> dict[str, object]:
    """One float32 object per framework installed (of ``only``), in host or CUDA memory."""
    out: dict[str, object] = {}
    if device == "cpu":
        if _installed("numpy") and "numpy" in only:
            import numpy as np

            out["numpy"] = np.zeros(shape, dtype=np.float32)
        if _installed("torch") and "torch" in only:
            import torch

            out["torch"] = torch.zeros(shape, dtype=torch.float32)
        if _installed("jax") and "jax" in only:
            try:
                import jax

                out["jax"] = jax.device_put(jax.numpy.zeros(shape, dtype="float32"),
                                            jax.devices("cpu")[0])
            except Exception:
                pass
        return out
    if not _cuda_present():
        return out
    makers: dict[str, Callable[[], object]] = {}
    if _installed("torch"):
        def _torch():
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError("torch has no CUDA")
            return torch.zeros(shape, dtype=torch.float32, device="cuda")

        makers["torch"] = _torch
    if _installed("cupy"):
        def _cupy():
            import cupy

            return cupy.zeros(shape, dtype=cupy.float32)

        makers["cupy"] = _cupy
    if _installed("numba"):
        def _numba():
            from numba import cuda

            return cuda.device_array(shape, dtype="float32")

        makers["numba"] = _numba
    if _installed("jax"):
        def _jax():
            import jax

            return jax.device_put(jax.numpy.zeros(shape, dtype="float32"), jax.devices("gpu")[0])

        makers["jax"] = _jax
    for name, make in makers.items():
        if name not in only:
            continue
        try:
            out[name] = make()
        except Exception:  # a framework without a working CUDA build here is simply absent
            pass
    return out


def _devices(device: str) -> list[str]:
    if device == "all":
        return ["cpu", "cuda"] if _cuda_present() else ["cpu"]
    return [device]


# -- peers ------------------------------------------------------------------------------------

def _cuda_core_view():
    if not (_installed("cuda") and _installed("cuda.core")):
        return None
    try:
        from cuda.core.utils import StridedMemoryView
    except Exception:
        try:
            from cuda.core.experimental.utils import StridedMemoryView
        except Exception:
            return None
    return StridedMemoryView


def _tvm_from_dlpack():
    if not _installed("tvm_ffi"):
        return None
    try:
        import tvm_ffi

        return tvm_ffi.from_dlpack
    except Exception:
        return None


# Why a peer path cannot run on host memory (it is listed, not timed, and is no failure).
_CAI_ON_HOST = ("host memory: the CUDA Array Interface describes device memory only "
                "(the framework raises for a CPU object)")


def _view_peers(fw: str, obj: object, device: str) -> list[tuple[str, Callable[[], object] | None,
                                                                str]]:
    """Every other way installed here to get at ``obj``'s memory description.

    Returns (name, callable, why not applicable) triples: a path that exists on the object's
    type but cannot run on its device has no callable and says why.
    """
    peers: list[tuple[str, Callable[[], object] | None, str]] = []
    smv = _cuda_core_view()
    if smv is not None:
        if hasattr(obj, "__dlpack__"):
            peers.append(("cuda.core from_dlpack",
                          bound(smv.from_dlpack, obj, stream_ptr=-1), ""))
        peers.append(("cuda.core from_any_interface",
                      bound(smv.from_any_interface, obj, stream_ptr=-1), ""))
    tvm = _tvm_from_dlpack()
    if tvm is not None and hasattr(obj, "__dlpack__"):
        peers.append(("tvm_ffi.from_dlpack", bound(tvm, obj), ""))
    if hasattr(obj, "__dlpack__"):
        peers.append((f"{fw} __dlpack__ (capsule only)", obj.__dlpack__, ""))
    if hasattr(type(obj), "__cuda_array_interface__"):
        name = f"{fw} __cuda_array_interface__ (dict only)"
        if device == "cuda":
            peers.append((name, lambda: obj.__cuda_array_interface__, ""))
        else:
            peers.append((name, None, _CAI_ON_HOST))
    if device == "cpu" and hasattr(type(obj), "__array_interface__"):
        peers.append((f"{fw} __array_interface__ (dict only)", lambda: obj.__array_interface__,
                      ""))
    if device == "cpu" and _installed("numpy") and hasattr(obj, "__dlpack__"):
        import numpy as np

        peers.append(("np.from_dlpack", bound(np.from_dlpack, obj), ""))
    if _installed("torch") and hasattr(obj, "__dlpack__") and fw != "torch":
        import torch

        peers.append(("torch.from_dlpack", bound(torch.from_dlpack, obj), ""))
    if device == "cuda" and _installed("cupy") and fw != "cupy":
        import cupy

        peers.append(("cupy.asarray", bound(cupy.asarray, obj), ""))
    if device == "cuda" and _installed("numba") and hasattr(type(obj), "__cuda_array_interface__"):
        from numba import cuda

        peers.append(("numba.cuda.as_cuda_array", bound(cuda.as_cuda_array, obj), ""))
    return peers


def _view_then_ptr(view: Callable, obj: object) -> Callable[[], object]:
    def view_then_ptr():
        return view(obj).ptr
    return view_then_ptr


# -- sections ---------------------------------------------------------------------------------

def _section_view(device: str, quick: bool) -> list[Case]:
    from .. import StridedMemoryView, view

    cases = []
    for dev in _devices(device):
        for fw, obj in samples(dev).items():
            group = f"view({fw} {dev})"
            cases.append(Case("view", group, "interop_core view()", bound(view, obj),
                              ours=True))
            if fw == "jax":
                # A jax view holds the buffer from the first use of its memory: this line is
                # the view with that hold taken (jax's external reference, as __dlpack__ takes).
                cases.append(Case("view", group, "interop_core view() then .ptr (memory held)",
                                  _view_then_ptr(view, obj), ours=True))
            if hasattr(obj, "__dlpack__"):
                cases.append(Case("view", group, "interop_core StridedMemoryView.from_dlpack",
                                  bound(StridedMemoryView.from_dlpack, obj), ours=True))
            cases += [Case("view", group, name, fn, not_applicable=why)
                      for name, fn, why in _view_peers(fw, obj, dev)]
    return cases


# -- the from_* constructors and the cuda.core compat layer -------------------------------------

def _from_cases(fw: str, dev: str, obj: object) -> list[Case]:
    """Every from_* constructor that takes ``obj``, beside view() and cuda.core's own."""
    from .. import StridedMemoryView, view
    from ..compat import cuda_core as compat

    group = f"from_*({fw} {dev})"
    smv = _cuda_core_view()
    cases = [Case("from", group, "interop_core view()", bound(view, obj), ours=True)]
    protocols = ["from_any"]
    if hasattr(obj, "__dlpack__"):
        protocols.append("from_dlpack")
    if hasattr(type(obj), "__cuda_array_interface__") and dev == "cuda":
        protocols.append("from_cuda_array_interface")
    if hasattr(type(obj), "__array_interface__") and dev == "cpu":
        protocols += ["from_array_interface", "from_buffer_protocol"]
    for name in protocols:
        cases.append(Case("from", group, f"interop_core StridedMemoryView.{name}",
                          bound(getattr(StridedMemoryView, name), obj), ours=True))
    # The compat layer, against the core call it wraps and cuda.core's own (stream_ptr=-1:
    # no ordering, the same work as the calls above).
    compat_calls = [("from_any_interface", True)]
    if hasattr(obj, "__dlpack__"):
        compat_calls.append(("from_dlpack", True))
    if hasattr(type(obj), "__cuda_array_interface__") and dev == "cuda":
        compat_calls.append(("from_cuda_array_interface", True))
    if hasattr(type(obj), "__array_interface__") and dev == "cpu":
        compat_calls.append(("from_array_interface", False))
    for name, takes_stream in compat_calls:
        args = (obj, -1) if takes_stream else (obj,)
        if takes_stream and name != "from_any_interface":
            # The core call the compat one wraps, with the same "no ordering" argument.
            cases.append(Case("from", group, f"interop_core StridedMemoryView.{name}(x, -1)",
                              bound(getattr(StridedMemoryView, name), *args), ours=True))
        cases.append(Case("from", group, f"compat.cuda_core StridedMemoryView.{name}",
                          bound(getattr(compat.StridedMemoryView, name), *args), ours=True))
        if smv is not None and hasattr(smv, name):
            cases.append(Case("from", group, f"cuda.core {name}",
                              bound(getattr(smv, name), *args)))
    # As written in a caller's code: the class attribute looked up on every call.
    env = {"_view": view, "_smv": StridedMemoryView, "_compat": compat.StridedMemoryView}
    cases.append(Case("from", group, "view(x) written in a function",
                      bound(_generated("f", 1, ["return _view(a0)"], env), obj), ours=True))
    if hasattr(obj, "__dlpack__"):
        cases.append(Case("from", group, "StridedMemoryView.from_dlpack(x) written in a function",
                          bound(_generated("f", 1, ["return _smv.from_dlpack(a0)"], env), obj),
                          ours=True))
        cases.append(Case("from", group,
                          "compat StridedMemoryView.from_dlpack(x, -1) written in a function",
                          bound(_generated("f", 1, ["return _compat.from_dlpack(a0, -1)"], env),
                                obj), ours=True))
    return cases


def _section_from(device: str, quick: bool) -> list[Case]:
    cases = []
    for dev in _devices(device):
        for fw, obj in samples(dev).items():
            cases += _from_cases(fw, dev, obj)
    return cases


def _stream_and_handle(fw: str, *, current: bool):
    """A stream of ``fw``'s own kind and its CUstream handle: the one ``fw`` writes on now (the
    producer's, ``current=True``) or a new one (a consumer)."""
    if fw == "torch":
        import torch

        s = torch.cuda.current_stream() if current else torch.cuda.Stream()
        return s, s.cuda_stream
    if fw == "cupy":
        import cupy

        s = cupy.cuda.get_current_stream() if current else cupy.cuda.Stream(non_blocking=True)
        return s, s.ptr
    if fw == "numba" and not current:
        from numba import cuda

        s = cuda.stream()
        return s, s.handle.value
    raise LookupError(fw)


def _same_stream_cases(fw: str, obj: object, smv: object) -> list[Case]:
    """view(x) against view(x, stream=the producer's own stream): the ordering that is skipped."""
    from .. import view

    try:
        stream, handle = _stream_and_handle(fw, current=True)
    except LookupError:
        return []
    group = f"view({fw} cuda, same stream)"
    # Positional arguments throughout, so that every path here is called from C, frame-less.
    cases = [Case("stream", group, "interop_core view()", bound(view, obj), ours=True),
             Case("stream", group, "interop_core view(stream=None)",
                  bound(view, obj, None), ours=True),
             # -1 also means "no synchronisation", but is resolved like a handle: the unsynced
             # call that does everything a same-stream call does but decide "same stream".
             Case("stream", group, "interop_core view(stream=-1)",
                  bound(view, obj, -1), ours=True),
             Case("stream", group, f"interop_core view(stream={fw} stream)",
                  bound(view, obj, stream), ours=True),
             Case("stream", group, "interop_core view(stream=int handle)",
                  bound(view, obj, handle), ours=True)]
    if smv is not None and hasattr(obj, "__dlpack__"):
        cases.append(Case("stream", group, "cuda.core from_dlpack (synced)",
                          bound(smv.from_dlpack, obj, stream_ptr=handle)))
    return cases


def _section_stream(device: str, quick: bool) -> list[Case]:
    if "cuda" not in _devices(device):
        return []
    from .. import view

    cases = []
    smv = _cuda_core_view()
    for fw, obj in samples("cuda").items():
        cases += _same_stream_cases(fw, obj, smv)
        try:
            stream, handle = _stream_and_handle(fw, current=False)
        except Exception:
            continue
        group = f"view({fw} cuda, stream=)"
        cases.append(Case("stream", group, f"interop_core view(stream={fw} stream)",
                          bound(view, obj, stream=stream), ours=True))
        cases.append(Case("stream", group, "interop_core view(stream=int handle)",
                          bound(view, obj, stream=handle), ours=True))
        if smv is not None:
            if hasattr(obj, "__dlpack__"):
                cases.append(Case("stream", group, "cuda.core from_dlpack (synced)",
                                  bound(smv.from_dlpack, obj, stream_ptr=handle)))
            cases.append(Case("stream", group, "cuda.core from_any_interface (synced)",
                              bound(smv.from_any_interface, obj, stream_ptr=handle)))
        if hasattr(obj, "__dlpack__"):
            cases.append(Case("stream", group, f"{fw} __dlpack__(stream=) (capsule only)",
                              bound(obj.__dlpack__, stream=handle)))
    return cases


def _targets() -> list[str]:
    return [fw for fw in FRAMEWORKS if _installed(fw)]


def _to_peers(target: str, src: object, dev: str) -> list[tuple[str, Callable[[], object]]]:
    """The target framework's own imports of ``src`` (the budget of each to() pair)."""
    from ..handoff._matrix import target_imports

    return [(name, bound(fn, src)) for name, fn in target_imports(target)]


def _possible(target: str, dev: str) -> bool:
    # Zero-copy only: host memory cannot become a cupy / numba device array, nor device memory
    # a numpy array; jax needs a backend on that device.
    if target in ("cupy", "numba"):
        return dev == "cuda"
    if target == "numpy":
        return dev == "cpu"
    if target == "jax" and dev == "cuda":
        try:
            import jax

            return bool(jax.devices("gpu"))
        except Exception:
            return False
    return True


def _section_to(device: str, quick: bool) -> list[Case]:
    import warnings

    from .. import to, view
    from ..plugins import ReadOnlyHandoffWarning

    # jax arrays are read-only: to(jax, "torch") warns once per call; the warning is the
    # policy, not what is measured.
    warnings.simplefilter("ignore", ReadOnlyHandoffWarning)
    cases = []
    for dev in _devices(device):
        for fw, src in samples(dev).items():
            for target in _targets():
                if target == fw or not _possible(target, dev):
                    continue
                group = f"to({fw} {dev}, {target!r})"
                cases.append(Case("to", group, "interop_core to()",
                                  bound(to, src, target), ours=True))
                try:
                    v = view(src)
                except Exception:
                    v = None
                if v is not None:
                    cases.append(Case("to", group, "interop_core to(view) (export only)",
                                      bound(to, v, target), ours=True))
                try:
                    peers = _to_peers(target, src, dev)
                except Exception:
                    peers = []
                cases += [Case("to", group, name, fn) for name, fn in peers]
    return cases


def _launcher(n: int, decorate: Callable | None = None, by_hand: Callable | None = None):
    """A kernel-launch-like function of ``n`` tensors (its body only returns the first)."""
    params = ", ".join(f"a{i}" for i in range(n))
    env: dict = {}
    body = "    return a0\n"
    if by_hand is not None:
        # What a launcher writes without the decorator: convert each argument itself.
        body = "".join(f"    a{i} = _view(a{i})\n" for i in range(n)) + body
        env["_view"] = by_hand
    exec(f"def launch({params}, stream=None):\n{body}", env)  # our own generated source
    fn = env["launch"]
    return decorate(fn) if decorate is not None else fn


def _section_viewable(device: str, quick: bool) -> list[Case]:
    from .. import view, viewable

    smv = _cuda_core_view()
    cases = []
    for dev in _devices(device):
        objs = samples(dev)
        fw = "torch" if "torch" in objs else next(iter(objs), None)
        if fw is None:
            continue
        obj = objs[fw]
        for n in (1, 4, 16):
            args = (obj,) * n
            group = f"launch({n} × {fw} {dev})"
            decorated = _launcher(n, decorate=viewable(*range(n)))
            by_hand = _launcher(n, by_hand=view)
            bare = _launcher(n)
            cases.append(Case("viewable", group, "interop_core @viewable",
                              bound(decorated, *args), ours=True))
            cases.append(Case("viewable", group, "view() by hand in the launcher",
                              bound(by_hand, *args), ours=True))
            if smv is not None and hasattr(obj, "__dlpack__"):
                peer = _launcher(n, by_hand=lambda o: smv.from_dlpack(o, stream_ptr=-1))
                cases.append(Case("viewable", group, "cuda.core from_dlpack by hand",
                                  bound(peer, *args)))
            cases.append(Case("viewable", group, "no conversion (bare call)",
                              bound(bare, *args)))
    return cases


def _generated(name: str, n: int, body: list[str], env: dict, kwonly: str = "") -> Callable:
    """``def name(a0, ..., a{n-1}{kwonly}):`` with ``body`` (one line per statement)."""
    params = ", ".join(f"a{i}" for i in range(n))
    source = f"def {name}({params}{kwonly}):\n" + "".join(f"    {line}\n" for line in body)
    exec(source, env)  # our own generated source: a launcher written out by hand, unrolled
    return env[name]


def _loop_with_key(n: int, view: Callable) -> Callable:
    """A hand-written launcher: view() each argument, a Python tuple key, the pointers."""
    body = [f"v{i} = _view(a{i})" for i in range(n)]
    body.append("key = (" + "".join(
        f"(v{i}.dlpack_dtype, v{i}.shape, v{i}.strides, v{i}.device_type, v{i}.device_id, "
        f"v{i}.readonly), " for i in range(n)) + ")")
    body.append("ptrs = (" + "".join(f"v{i}.ptr, " for i in range(n)) + ")")
    body.append("return key, ptrs")
    return _generated("launch", n, body, {"_view": view})


def _real_helion_key(n: int) -> Callable[[tuple], object] | None:
    """The real Helion's ``kernel.specialization_key`` for a kernel of ``n`` tensors, or None
    where helion is not installed."""
    if not _installed("helion"):
        return None
    import helion
    import torch

    params = ", ".join(f"a{i}: torch.Tensor" for i in range(n))
    env: dict = {"torch": torch}
    # our own generated source: a kernel of n tensor parameters (never compiled: only its
    # specialization key is asked for)
    exec(f"def kernel({params}) -> torch.Tensor:\n    return a0\n", env)
    return helion.kernel(env["kernel"]).specialization_key


def _helion_key(n: int, with_stream: bool) -> Callable:
    """Helion's fast key re-implemented (where helion is not installed): (dtype, size(),
    stride()) per tensor, data_ptr()s, and torch's current CUDA stream (on CUDA)."""
    body = ["key = (" + "".join(f"(a{i}.dtype, a{i}.size(), a{i}.stride()), "
                                for i in range(n)) + ")",
            "ptrs = (" + "".join(f"a{i}.data_ptr(), " for i in range(n)) + ")"]
    env: dict = {}
    if with_stream:
        import torch

        env["_current_stream"] = torch.cuda.current_stream
        body.append("return key, ptrs, _current_stream()")
    else:
        body.append("return key, ptrs")
    return _generated("launch", n, body, env)


def _per_argument_runner(launch_args: Callable, few: tuple, many: tuple):
    """ns each extra argument adds: launch_args of ``many`` against ``few``, round by round."""
    def run(settings: Settings) -> tuple[float, str, dict]:
        small, large = bound(launch_args, few), bound(launch_args, many)
        rounds = sample_interleaved([small, large], settings)
        extra = len(many) - len(few)
        per_arg = [(b - a) / extra for a, b in zip(*rounds, strict=True)]
        return statistics.median(per_arg), (
            f"({len(many)} args - {len(few)} arg) / {extra}: {statistics.median(rounds[1]):,.0f} "
            f"and {statistics.median(rounds[0]):,.0f} ns"), {"rounds": per_arg}

    return run


def _launch_group(group: str, args: tuple, dev: str, torch_only: bool, stream) -> list[Case]:
    from .. import launch_args, view, viewable

    n = len(args)
    cases = [Case("launch", group, "interop_core launch_args (key + pointers)",
                  bound(launch_args, args), ours=True)]
    if stream is not None:
        cases.append(Case("launch", group, "interop_core launch_args (key + pointers, stream)",
                          bound(launch_args, args, stream), ours=True))
    cases += [
        Case("launch", group, "interop_core launch_args (dynamic key)",
             bound(launch_args, args, key="dynamic"), ours=True),
        Case("launch", group, "interop_core launch_args (no key)",
             bound(launch_args, args, key=None), ours=True),
        Case("launch", group, "interop_core @viewable (view mode)",
             bound(_launcher(n, decorate=viewable(*range(n))), *args), ours=True),
        Case("launch", group, "interop_core @viewable (launch mode)",
             bound(viewable(*range(n), launch="record")(
                 _generated("launch", n, ["return record"], {}, ", *, record=None")), *args),
             ours=True),
        # The budget's reference: what a launcher pays today for views alone.
        Case("launch", group, "view() loop, no key", bound(_launcher(n, by_hand=view), *args),
             ours=True),
        Case("launch", group, "view() loop + tuple key + pointers",
             bound(_loop_with_key(n, view), *args)),
    ]
    if torch_only:
        helion_key = _real_helion_key(n)
        if helion_key is not None:
            cases.append(Case("launch", group, "Helion kernel.specialization_key(args)",
                              bound(helion_key, args)))
        else:
            cases.append(Case("launch", group, "Helion's fast key (torch API)",
                              bound(_helion_key(n, dev == "cuda"), *args),
                              note="re-implemented here: helion is not installed"))
    smv = _cuda_core_view()
    if smv is not None:
        peer = _launcher(n, by_hand=lambda o: smv.from_dlpack(o, stream_ptr=-1))
        cases.append(Case("launch", group, "cuda.core from_dlpack loop", bound(peer, *args)))
    return cases


def _accessor_cases(dev: str, obj: object, fw: str) -> list[Case]:
    from operator import attrgetter

    from .. import view

    v = view(obj)
    group = f"view accessors ({fw} {dev})"
    cases = [Case("launch", group, "bare attribute read (view.owner)",
                  bound(attrgetter("owner"), v), ours=True)]
    for name in ("shape", "strides", "strides_in_bytes", "key", "ptr"):
        cases.append(Case("launch", group, f"view.{name}", bound(attrgetter(name), v),
                          ours=True))
    first = f"view() then .shape, first read ({fw} {dev})"
    cases += [Case("launch", first, "view(x)", bound(view, obj), ours=True),
              Case("launch", first, "view(x).shape", lambda: view(obj).shape, ours=True),
              Case("launch", first, "view(x) in a lambda", lambda: view(obj), ours=True)]
    return cases


def _bare_cu_launch_kernel():
    """libcuda's cuLaunchKernel through ctypes (the floor a launcher is measured against)."""
    import ctypes

    launch = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    launch.restype = ctypes.c_int
    return launch


def _checked(status: int) -> None:
    if status != 0:
        raise RuntimeError(f"cuLaunchKernel failed: CUDA error {status}")


def _triton_group(kernel, nargs: int, cu_launch) -> list[Case]:
    """One kernel of ``nargs`` runtime arguments (``nargs - 1`` arrays and ``n``)."""
    import torch
    import triton

    from .. import launch_args, triton_kernel
    from ..launch import _triton_launch

    group = f"triton launch ({nargs} args, cuda)"
    n, block = 64 * 64, 1024
    grid = (triton.cdiv(n, block),)
    stream = torch.cuda.current_stream()
    fast = triton_kernel(kernel)
    arrays = tuple(samples("cuda", only=("torch",))["torch"] for _ in range(nargs - 1))
    compiled = kernel[grid](*arrays, n, BLOCK=block)
    fast[grid](*arrays, n, BLOCK=block)              # compiled once, before timing
    function = next(iter(_triton_launch._entries(fast).values())).kernel.function
    threads, shared = 32 * compiled.metadata.num_warps, compiled.metadata.shared
    # Triton's layout: the arrays, n as int32, the global and profile scratch pointers (NULL).
    scalar_types = (None,) * len(arrays) + ("int32", None, None)
    prepared = launch_args(arrays + (n, None, None), stream, scalar_types=scalar_types)

    def theirs():
        return kernel[grid](*arrays, n, BLOCK=block)

    def bare():
        _checked(cu_launch(function, grid[0], 1, 1, threads, 1, 1, shared, prepared.stream,
                           prepared.kernel_params_address, None))

    def with_launch_args():
        r = launch_args(arrays + (n, None, None), stream, scalar_types=scalar_types)
        _checked(cu_launch(function, grid[0], 1, 1, threads, 1, 1, shared, r.stream,
                           r.kernel_params_address, None))

    def timed(fn):
        return _host_side_runner(fn, torch.cuda.synchronize)

    cases = [Case("launch", group, "Triton kernel[grid](...) (torch)", runner=timed(theirs)),
             Case("launch", group, "bare cuLaunchKernel (ctypes, arguments prepared once)",
                  runner=timed(bare)),
             Case("launch", group, "launch_args + bare cuLaunchKernel (ctypes)",
                  runner=timed(with_launch_args))]
    for fw in samples("cuda"):
        inputs = tuple(samples("cuda", only=(fw,))[fw] for _ in range(nargs - 2))
        # The output is a torch tensor for every framework (jax arrays are read-only).
        call_args = ((arrays[0],) + inputs if kernel.__name__ == "add16"
                     else inputs + (arrays[-1],))
        cases.append(Case("launch", group, f"interop_core triton_kernel ({fw})", ours=True,
                          runner=timed(_bound_launch(fast, grid, call_args, n, block))))
    return cases


def _bound_launch(fast, grid, args: tuple, n: int, block: int) -> Callable[[], object]:
    def launch():
        return fast[grid](*args, n, BLOCK=block)

    return launch


def _triton_launch_cases() -> list[Case]:
    """Triton's own kernel[grid](...) on torch beside interop_core.triton_kernel on every
    framework's arrays and a bare ctypes cuLaunchKernel on the same compiled function."""
    from . import _triton_kernels

    cu_launch = _bare_cu_launch_kernel()
    return (_triton_group(_triton_kernels.add4, 4, cu_launch)
            + _triton_group(_triton_kernels.add16, 16, cu_launch))


def _public_launch_cases() -> list[Case]:
    """Kernel.launch of a PTX kernel with 4 torch arguments beside launch_args + a bare ctypes
    cuLaunchKernel on the same function."""
    import torch

    from .. import launch_args, load_module

    ptx = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "examples", "axpy.ptx")
    if not os.path.exists(ptx):
        return []
    kernel = load_module(open(ptx).read(), torch.cuda.current_device()).kernel(
        "add3_f32", ("pointer",) * 4 + ("int64",))
    cu_launch = _bare_cu_launch_kernel()
    n = 64 * 64
    tensors = tuple(samples("cuda", only=("torch",))["torch"] for _ in range(4))
    stream = torch.cuda.current_stream()
    blocks = (n + 255) // 256

    def ours():
        kernel.launch(blocks, 256, launch_args(tensors + (n,), stream))

    def reference(f=kernel.handle):
        r = launch_args(tensors + (n,), stream)
        _checked(cu_launch(f, blocks, 1, 1, 256, 1, 1, 0, r.stream, r.kernel_params_address,
                           None))

    group = "public launch (PTX, 4 torch args, cuda)"
    return [Case("launch", group, "interop_core Kernel.launch(grid, block, launch_args(...))",
                 runner=_host_side_runner(ours, torch.cuda.synchronize), ours=True),
            Case("launch", group, "launch_args + bare cuLaunchKernel (ctypes)",
                 runner=_host_side_runner(reference, torch.cuda.synchronize))]


def _kernel_launch_cases(device: str, quick: bool) -> list[Case]:
    if "cuda" not in _devices(device):
        return [Case("launch", "triton launch (4 / 16 args)",
                     "interop_core triton_kernel beside Triton kernel[grid](...)",
                     ours=True, not_applicable="needs a GPU"),
                Case("launch", "public launch (PTX, 4 torch args)",
                     "interop_core Kernel.launch", ours=True, not_applicable="needs a GPU")]
    cases = []
    if _installed("torch"):
        import torch

        if torch.cuda.is_available():
            cases += _public_launch_cases()
            if _installed("triton"):
                cases += _triton_launch_cases()
    return cases


def _section_launch(device: str, quick: bool) -> list[Case]:
    from .. import launch_args

    cases = _kernel_launch_cases(device, quick)
    for dev in _devices(device):
        objs = samples(dev)
        if "torch" not in objs:
            continue
        t = objs["torch"]
        stream = None
        if dev == "cuda":
            import torch

            stream = torch.cuda.current_stream()    # the producer's own: nothing to order
        for n in (1, 4, 16):
            args = tuple(samples(dev, only=("torch",))["torch"] if i else t for i in range(n))
            cases += _launch_group(f"launch({n} × torch {dev})", args, dev, True, stream)
        mixed_names = ("torch", "cupy", "jax") if dev == "cuda" else ("torch", "numpy", "jax")
        mixed = tuple(objs[fw] for fw in mixed_names if fw in objs) * 2
        if len(mixed) > 2:
            label = "/".join(fw for fw in mixed_names if fw in objs)
            cases += _launch_group(f"launch({len(mixed)} × {label} {dev})", mixed, dev, False,
                                   stream)
        many = tuple(samples(dev, only=("torch",))["torch"] for _ in range(16))
        cases.append(Case("launch", f"launch: per extra torch argument ({dev})",
                          "interop_core launch_args (key + pointers)", ours=True,
                          runner=_per_argument_runner(launch_args, many[:1], many)))
        cases += _accessor_cases(dev, t, "torch")
    return cases


def _ndim_objects(dev: str, ndim: int) -> dict[str, object]:
    # Mostly size-1 dimensions so a 64-d object stays small; the first few have extent 2 so
    # the strides are not all trivial.
    shape = tuple(2 if i < 4 else 1 for i in range(ndim))
    return samples(dev, shape, only=("numpy", "torch"))


def _section_ndim(device: str, quick: bool) -> list[Case]:
    from .. import view

    smv = _cuda_core_view()
    tvm = _tvm_from_dlpack()
    cases = []
    ndims = (1, 8, 64) if quick else (1, 2, 4, 8, 16, 32, 64)
    for dev in _devices(device):
        for ndim in ndims:
            for fw, obj in _ndim_objects(dev, ndim).items():
                group = f"ndim={ndim:>2} {fw} {dev}"
                cases.append(Case("ndim", group, "interop_core view()", bound(view, obj),
                                  ours=True))
                cases.append(Case("ndim", group, "interop_core view().shape",
                                  lambda o=obj: view(o).shape, ours=True))
                if smv is not None:
                    cases.append(Case("ndim", group, "cuda.core from_dlpack",
                                      bound(smv.from_dlpack, obj, stream_ptr=-1)))
                    cases.append(Case("ndim", group, "cuda.core from_dlpack().shape",
                                      lambda o=obj: smv.from_dlpack(o, stream_ptr=-1).shape))
                if tvm is not None:
                    cases.append(Case("ndim", group, "tvm_ffi.from_dlpack", bound(tvm, obj)))
    return cases


def _threads_runner(fn: Callable[[], object], threads: int):
    def run(settings: Settings) -> tuple[float, str, dict]:
        fn()
        ns, calls_per_s = measure_threads(fn, threads, settings.thread_s)
        return ns, f"{calls_per_s / 1e6:.2f} M calls/s in all", {
            "threads": threads, "calls_per_s": calls_per_s}

    return run


def _section_threads(device: str, quick: bool) -> list[Case]:
    from .. import view

    smv = _cuda_core_view()
    cases = []
    for dev in _devices(device):
        objs = samples(dev)
        for fw in ("torch", "numpy", "cupy"):
            if fw not in objs:
                continue
            obj = objs[fw]
            for threads in (1, 2, 4, 8):
                group = f"threads={threads} view({fw} {dev})"
                cases.append(Case("threads", group, "interop_core view()",
                                  runner=_threads_runner(bound(view, obj), threads),
                                  ours=True))
                if smv is not None and hasattr(obj, "__dlpack__"):
                    cases.append(Case("threads", group, "cuda.core from_dlpack", runner=(
                        _threads_runner(bound(smv.from_dlpack, obj, stream_ptr=-1),
                                        threads))))
    return cases


class _PyTensor:
    """A framework type whose plugin reader is plain Python (for the dispatch section)."""

    def __init__(self, address: int, n: int, owner: object):
        self.address, self.n, self.owner = address, n, owner


def _read_pytensor(obj, stream):
    from .. import StridedMemoryView

    return StridedMemoryView.from_pointer(obj.address, (obj.n,), dtype="float32", owner=obj)


def _dispatch_runner(obj: object, blocks: int):
    def run(settings: Settings) -> tuple[float, str, dict]:
        from .. import view
        from ..registry._registry import time_dispatch

        view(obj)  # the first call decides and caches the reader for this type
        direct, looked_up = time_dispatch(obj, blocks)
        # The median of paired differences is robust to the machine's noise.
        overhead = statistics.median(b - a for a, b in zip(direct, looked_up, strict=True))
        return overhead, f"reader alone in C: {statistics.median(direct):.1f} ns", {
            "reader_ns": statistics.median(direct)}

    return run


def _section_dispatch(device: str, quick: bool) -> list[Case]:
    from .. import hookimpl, register_plugin, view

    if not _installed("numpy"):
        return []
    import numpy as np

    class _DispatchPlugin:
        @hookimpl
        def interop_core_register(self, registry):
            registry.add_type(_PyTensor, _read_pytensor)

    plugin = _DispatchPlugin()
    try:
        register_plugin(plugin, name="interop-core-bench-dispatch")
    except ValueError:
        pass  # already registered by an earlier run in this process
    objects: dict[str, object] = {}
    if _installed("torch"):
        import torch

        objects["torch cpu"] = torch.zeros(64, 64)
    objects["numpy cpu"] = np.zeros((64, 64), dtype=np.float32)
    objects["bytearray"] = bytearray(256)
    backing = np.zeros(64, dtype=np.float32)
    objects["plugin type, Python reader"] = _PyTensor(backing.ctypes.data, 64, backing)
    blocks = 20 if quick else 400
    cases = []
    for label, obj in objects.items():
        group = f"dispatch {label}"
        cases.append(Case("dispatch", group, "interop_core view()", bound(view, obj),
                          ours=True))
        cases.append(Case("dispatch", group, "table lookup added to the reader (in C)",
                          runner=_dispatch_runner(obj, blocks), ours=True))
    return cases


def _stateful(fn: Callable[[], object], enter: Callable[[], object],
              leave: Callable[[], object]):
    """A runner timing ``fn`` between ``enter()`` and ``leave()`` (a reader forced into a mode)."""
    def run(settings: Settings) -> tuple[float, str, dict]:
        enter()
        try:
            fn()
            return measure(fn, settings), "", {}
        finally:
            leave()

    return run


def _reader_module(name: str):
    try:
        return importlib.import_module(f"interop_core.{name}")
    except ImportError:
        return None


def _torch_reader_cases(dev: str, t: object) -> list[Case]:
    from .. import to, view
    from ..registry import _registry

    try:
        from interop_torch import _reader as mod  # the torch plugin's compiled reader
    except ImportError:
        return []
    group = f"readers: view(torch {dev})"
    ours = "interop_core view() (plugin: AOTI reader)"
    tensor_types = ("torch:Tensor", "torch.nn.parameter:Parameter")

    def checks_on():
        mod._set_keyset_detection(False)

    def checks_off():
        mod._set_keyset_detection(True)

    pins = [_forced_fallback(path) for path in tensor_types]

    def fallback_on():
        for enter, _ in pins:
            enter()

    def fallback_off():
        for _, leave in pins:
            leave()

    view(t)  # the type resolves and its reader is validated; the outcome is then known
    cases = [Case("readers", group, ours, bound(view, t), ours=True,
                  note=_validation_note(tensor_types[0])),
             Case("readers", group, "interop_core view() (AOTI, Python-API checks)", ours=True,
                  runner=_stateful(bound(view, t), checks_on, checks_off)),
             Case("readers", group, "interop_core view() (plugin fallback)", ours=True,
                  runner=_stateful(bound(view, t), fallback_on, fallback_off))]
    for entry_name, label in (("dlpack_c_exchange_api", "DLPack C exchange API reader"),
                              ("dunder_dlpack", "__dlpack__ reader")):
        try:
            entry = _registry.new_entry(entry_name)
        except Exception:
            continue
        cases.append(Case("readers", group, f"interop_core {label} (core, generic)",
                          bound(_registry.read_with, entry, t), ours=True))
    try:
        v = view(t)
    except Exception:
        return cases
    import torch

    group = f"readers: to(view, 'torch') {dev}"
    cases += [Case("readers", group, "interop_core to(view, 'torch')", bound(to, v, "torch"),
                   ours=True),
              Case("readers", group, "interop_torch _reader.to_torch(view)",
                   bound(mod.to_torch, v), ours=True),
              Case("readers", group, "torch.from_dlpack(view)", bound(torch.from_dlpack, v))]
    return cases


def _forced_fallback(type_path: str) -> tuple[Callable[[], object], Callable[[], object]]:
    """(enter, leave): pin the reader of ``type_path`` to its fallback, then unpin it."""
    from ..registry import _validation

    return (lambda: _validation._force(type_path, False, "benchmark: forced fallback"),
            lambda: _validation._force(type_path, None))


def _array_reader_cases(fw: str, dev: str, obj: object) -> list[Case]:
    from .. import StridedMemoryView, view
    from ..plugins import reader_for

    view(obj)  # the type resolves and its reader is validated; the outcome is then known
    # The path as the plugin declared it (jax's array type has had several module paths).
    type_path = reader_for(type(obj)).type_path
    group = f"readers: view({fw} {dev})"
    fallback_on, restore = _forced_fallback(type_path)

    return [Case("readers", group, "interop_core view() (plugin reader)", bound(view, obj),
                 ours=True, note=_validation_note(type_path)),
            Case("readers", group, "interop_core view() (plugin fallback)", ours=True,
                 runner=_stateful(bound(view, obj), fallback_on, restore)),
            Case("readers", group, "interop_core StridedMemoryView.from_any (core, generic)",
                 bound(StridedMemoryView.from_any, obj), ours=True)]


def _cupy_reader_cases(dev: str, a: object) -> list[Case]:
    from .. import StridedMemoryView, to, view

    view(a)  # the plugin's reader is validated on first use; the result is then known
    group = f"readers: view(cupy {dev})"
    attributes_on, restore = _forced_fallback("cupy:ndarray")
    cases = [Case("readers", group, "interop_core view() (plugin reader)", bound(view, a),
                  ours=True, note=_validation_note("cupy:ndarray")),
             Case("readers", group, "interop_core view() (plugin fallback: attributes reader)",
                  ours=True, runner=_stateful(bound(view, a), attributes_on, restore)),
             Case("readers", group, "interop_core from_cuda_array_interface (core, generic)",
                  bound(StridedMemoryView.from_cuda_array_interface, a), ours=True),
             Case("readers", group, "interop_core StridedMemoryView.from_dlpack (core, generic)",
                  bound(StridedMemoryView.from_dlpack, a), ours=True)]
    try:
        import cupy
        import interop_cupy
    except ImportError:
        return cases
    v = view(a)
    group = f"readers: to(view, 'cupy') {dev}"
    original = getattr(interop_cupy, "EXPORT_PATH", None)
    for path in ("memory", "dlpack"):
        if original is None:
            break

        def enter(path=path):
            interop_cupy.EXPORT_PATH = path

        def leave():
            interop_cupy.EXPORT_PATH = original

        cases.append(Case("readers", group, f"interop_core to(view, 'cupy') (export: {path})",
                          ours=True, runner=_stateful(bound(to, v, "cupy"), enter, leave)))
    cases += [Case("readers", group, "cupy.from_dlpack(view)", bound(cupy.from_dlpack, v)),
              Case("readers", group, "cupy.asarray(view)", bound(cupy.asarray, v))]
    return cases


def _validation_note(type_path: str, kind: str = "reader") -> str:
    """How the core's one validation mechanism decided on the reader (``kind="shards"``: the
    sharded path) of ``type_path``."""
    from ..registry import _validation

    for result in reversed(_validation.results()):
        if result.type_path == type_path and result.kind == kind:
            if result.validated:
                return f"validated on {result.canaries} canaries"
            return f"fell back: {result.reason}"
    return ""


def _numba_reader_cases(dev: str, d: object) -> list[Case]:
    from .. import StridedMemoryView, view
    from ..plugins import reader_for

    view(d)  # the type resolves and its reader is validated; the outcome is then known
    # The path as the plugin declared it (numba's or numba-cuda's module path).
    type_path = reader_for(type(d)).type_path
    group = f"readers: view(numba {dev})"
    cases = [Case("readers", group, "interop_core view() (plugin reader)", bound(view, d),
                  ours=True, note=_validation_note(type_path)),
             Case("readers", group, "interop_core view() (plugin fallback)", ours=True,
                  runner=_stateful(bound(view, d), *_forced_fallback(type_path))),
             Case("readers", group, "interop_core from_cuda_array_interface (core, generic)",
                  bound(StridedMemoryView.from_cuda_array_interface, d), ours=True)]
    try:
        sliced = d[1:, ::2]
    except Exception:
        return cases
    cases.append(Case("readers", f"readers: view(numba {dev}, sliced [1:, ::2])",
                      "interop_core view() (plugin reader)", bound(view, sliced), ours=True))
    return cases


def _public_abi_cases() -> list[Case]:
    """A third party's compiled reader (the example plugin's, in C on interop_core.h) against
    the first-party numpy reader (on the same ABI), for objects of the same shape and dtype."""
    from .. import view

    if not (_installed("bytetensor") and _installed("numpy")):
        return []
    import numpy as np
    from bytetensor import CTensor

    array = np.zeros((64, 64), dtype=np.float32)
    tensor = CTensor(np.zeros((64, 64), dtype=np.float32), (64, 64), "float32")
    group = "readers: public C ABI, third party vs first party"
    return [Case("readers", group, "view(bytetensor.CTensor): third-party C reader",
                 bound(view, tensor), ours=True),
            Case("readers", group, "view(numpy.ndarray): first-party reader",
                 bound(view, array), ours=True)]


def _section_readers(device: str, quick: bool) -> list[Case]:
    """The first-party plugins' compiled readers against their own fallbacks and the generic
    path (what a type gets with no plugin, or when a framework's internals changed), and a
    third party's compiled reader against a first-party one."""
    cases = _public_abi_cases() if device in ("cpu", "all") else []
    for dev in _devices(device):
        for fw, obj in samples(dev).items():
            try:
                if fw == "torch":
                    cases += _torch_reader_cases(dev, obj)
                elif fw in ("numpy", "jax"):
                    cases += _array_reader_cases(fw, dev, obj)
                elif fw == "cupy":
                    cases += _cupy_reader_cases(dev, obj)
                elif fw == "numba":
                    cases += _numba_reader_cases(dev, obj)
            except Exception as exc:  # one plugin's setup failing leaves the others measured
                cases.append(Case("readers", f"readers: view({fw} {dev})", "setup",
                                  runner=_raiser(exc)))
    return cases


# -- shards -----------------------------------------------------------------------------------
# shards() of a jax array split by rows over n devices (each shard 32 x 32 float32), per shard,
# beside one view() of a single-device array of a shard's shape; and assembling a jax global
# array from per-device pieces beside jax's own make_array_from_single_device_arrays over its
# from_dlpack per piece.  jax's CPU devices come from XLA_FLAGS, read once when jax starts, so
# host-device runs happen in a child interpreter per device count; GPU runs in this process.

SHARD_ROWS = 32
SHARD_PATHS = {
    "shards": ("interop_core shards(), per shard",
               "interop_core view(), one single-device array of a shard's shape per device, per view",
               "interop_core view(), one single-device array of a shard's shape, again and again",
               "view() of each addressable_shards[i].data, per shard",
               "jax __dlpack__ of each addressable shard (capsule only), per shard"),
    "assemble": ("interop_core to(Shards.from_pieces(pieces), 'jax', sharding=)",
                 "interop_core to(shards, 'jax', sharding=) (shards made once)",
                 "jax make_array_from_single_device_arrays over from_dlpack(piece, device=)",
                 "jax make_array_from_single_device_arrays over device_put(numpy piece)"),
}


def _shards_groups(label: str) -> tuple[str, str]:
    return f"shards(jax over {label})", f"assemble(jax over {label})"


def shards_cases(devices: list, label: str) -> list[Case]:
    """The shards section's cases over ``devices`` (jax devices of one platform)."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from .. import Shards, shards, to, view
    from ..shards import _shards

    n = len(devices)
    host = devices[0].platform == "cpu"
    shards_group, assemble_group = _shards_groups(label)
    ours, per_device, single, by_hand, dlpack = SHARD_PATHS["shards"]
    sharding = NamedSharding(Mesh(devices, ("x",)), PartitionSpec("x"))
    whole = jax.numpy.arange(n * SHARD_ROWS * 32, dtype="float32").reshape(n * SHARD_ROWS, 32)
    x = jax.device_put(whole, sharding)
    # The same work without the sharded container: n single-device arrays, one on each device,
    # viewed in turn.  (Both this and shards() read arrays met before -- these n, or the
    # per-device arrays -- from the jax reader's per-array cache.)
    ones = [jax.device_put(jax.numpy.zeros((SHARD_ROWS, 32), "float32"), d) for d in devices]
    shards(x)   # the sharded path is validated on first use: say which one is measured
    entry = _shards.sharded_entry_for(type(x))
    path_note = (f"{entry.shards.__name__}: "
                 f"{_validation_note(entry.type_path, 'shards') or 'not validated'}")
    cases = [
        Case("shards", shards_group, ours, bound(shards, x), ours=True, calls=n,
             note=path_note),
        Case("shards", shards_group, per_device, lambda: [view(a) for a in ones], ours=True,
             calls=n),
        Case("shards", shards_group, single, bound(view, ones[0]), ours=True),
        Case("shards", shards_group, by_hand,
             lambda: [view(s.data) for s in x.addressable_shards], ours=True, calls=n),
        Case("shards", shards_group, dlpack,
             lambda: [s.data.__dlpack__() for s in x.addressable_shards], calls=n),
    ]
    # Per-device pieces of another framework: torch tensors where torch is installed (64-byte
    # aligned, so jax shares host memory), else numpy arrays on the host.
    pieces = _shard_pieces(devices, host)
    indices = [(slice(k * SHARD_ROWS, (k + 1) * SHARD_ROWS), slice(None)) for k in range(n)]
    shape = (n * SHARD_ROWS, 32)
    made = Shards.from_pieces(shape, list(zip(pieces, indices, strict=True)))
    from_pieces, made_once, peer, peer_host = SHARD_PATHS["assemble"]

    def ours_from_pieces():
        return to(Shards.from_pieces(shape, zip(pieces, indices, strict=True)), "jax",
                  sharding=sharding)

    def peer_from_dlpack():
        arrays = []
        for p, d in zip(pieces, devices, strict=True):
            # torch exports a CUDA tensor to a consumer stream only from its own device's
            # context (else "Can't export tensors on a different CUDA device index"): a user
            # of jax's from_dlpack must switch to each piece's device, so the peer does too.
            with _device_of(p):
                arrays.append(jax.dlpack.from_dlpack(p, device=d))
        return jax.make_array_from_single_device_arrays(shape, sharding, arrays)

    cases += [Case("shards", assemble_group, from_pieces, ours_from_pieces, ours=True),
              Case("shards", assemble_group, made_once,
                   bound(to, made, "jax", sharding=sharding), ours=True),
              Case("shards", assemble_group, peer, peer_from_dlpack,
                   note="copies each piece to its CPU device but the first" if host else "")]
    if host:
        import numpy as np

        arrays = [np.from_dlpack(p) for p in pieces]
        cases.append(Case("shards", assemble_group, peer_host, lambda: (
            jax.make_array_from_single_device_arrays(
                shape, sharding, [jax.device_put(a, d)
                                  for a, d in zip(arrays, devices, strict=True)]))))
    return cases


def _device_of(piece: object):
    """A context making ``piece``'s CUDA device current (torch's), else one doing nothing."""
    device = getattr(piece, "device", None)
    if getattr(device, "type", None) == "cuda":
        import torch

        return torch.cuda.device(device)
    return contextlib.nullcontext()


def _shard_pieces(devices: list, host: bool) -> list:
    if _installed("torch"):
        import torch

        return [torch.arange(SHARD_ROWS * 32, dtype=torch.float32).reshape(SHARD_ROWS, 32).to(
            "cpu" if host else f"cuda:{d.local_hardware_id}") for d in devices]
    import numpy as np

    return [np.arange(SHARD_ROWS * 32, dtype=np.float32).reshape(SHARD_ROWS, 32)
            for _ in devices]


_SHARDS_CHILD = """
import json, sys
from interop_core.bench._cases import shards_measurements
print("RESULTS " + json.dumps(shards_measurements(int(sys.argv[1]), sys.argv[2] == "quick")))
"""


def shards_measurements(count: int, quick: bool) -> list[dict]:
    """Run the shards section over ``count`` jax CPU devices here (in a child interpreter)."""
    import jax

    devices = jax.devices("cpu")[:count]
    if len(devices) < count:
        raise RuntimeError(f"jax has {len(devices)} CPU devices, {count} wanted (XLA_FLAGS)")
    cases = shards_cases(devices, f"{count} cpu devices")
    results = []
    for group in dict.fromkeys(c.group for c in cases):
        results += run_group([c for c in cases if c.group == group], QUICK if quick else FULL)
    return [r.as_dict() for r in results]


def _host_devices_runner(count: int, group: str, name: str, cache: dict):
    """A runner reading one path's result from the child run over ``count`` host devices."""
    def run(settings: Settings) -> tuple[float | None, str, dict]:
        if count not in cache:
            import interop_core

            root = os.path.dirname(os.path.dirname(os.path.abspath(interop_core.__file__)))
            env = dict(os.environ, JAX_PLATFORMS="cpu",
                       XLA_FLAGS=f"--xla_force_host_platform_device_count={count}",
                       PYTHONPATH=os.pathsep.join(
                           p for p in (root, os.environ.get("PYTHONPATH")) if p))
            quick = "quick" if settings == QUICK else "full"
            done = subprocess.run([sys.executable, "-c", _SHARDS_CHILD, str(count), quick],
                                  capture_output=True, text=True, env=env, timeout=600)
            line = next((x for x in done.stdout.splitlines() if x.startswith("RESULTS ")), None)
            if done.returncode != 0 or line is None:
                cache[count] = RuntimeError(
                    f"the run over {count} jax CPU devices failed: {done.stderr.strip()[-300:]}")
            else:
                cache[count] = {(r["group"], r["name"]): r for r in json.loads(line[8:])}
        found = cache[count]
        if isinstance(found, Exception):
            raise found
        if (group, name) not in found:
            raise LookupError(f"{name}: not measured in the run over {count} jax CPU devices")
        r = found[(group, name)]
        if r["ns"] is None:
            raise RuntimeError(r["note"])
        return r["ns"], r["note"], r["extra"]

    return run


def _section_shards(device: str, quick: bool) -> list[Case]:
    if not _installed("jax"):
        return []
    cases: list[Case] = []
    if "cpu" in _devices(device):
        cache: dict = {}
        for count in (2, 8):
            for kind, group in zip(("shards", "assemble"),
                                   _shards_groups(f"{count} cpu devices"), strict=True):
                for name in SHARD_PATHS[kind]:
                    ours = name.startswith(("interop_core", "view()"))
                    cases.append(Case("shards", group, name, ours=ours,
                                      runner=_host_devices_runner(count, group, name, cache)))
    if "cuda" in _devices(device):
        import jax

        try:
            gpus = jax.devices("gpu")
        except RuntimeError:
            gpus = []
        if len(gpus) >= 2:
            cases += shards_cases(gpus[:2], "2 cuda devices")
    return cases


# -- copies ---------------------------------------------------------------------------------------

class _DeviceTimedGroup:
    """Paths of one GPU copy operation timed in device time, interleaved round by round.

    Every path enqueues one copy on ``stream``.  A round times, for each path in turn, a batch
    of copies between two CUDA events on that stream (after a synchronize, so nothing else is
    pending); ns per copy is the events' elapsed time over the batch length.  The first case's
    runner measures every path of the group; the others read their results.
    """

    def __init__(self, torch, stream, paths: dict[str, Callable[[], object]]):
        self.torch, self.stream, self.paths = torch, stream, paths
        self.results: dict[str, tuple[float, str, dict]] | None = None

    def runner(self, name: str) -> Callable[[Settings], tuple[float | None, str, dict]]:
        def run(settings: Settings) -> tuple[float | None, str, dict]:
            if self.results is None:
                self.results = self._measure(settings)
            result = self.results[name]
            if isinstance(result, BaseException):
                raise result
            return result

        return run

    def _batch_ms(self, fn: Callable[[], object], n: int) -> float:
        torch, stream = self.torch, self.stream
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        stream.synchronize()
        start.record(stream)
        for _ in range(n):
            fn()
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end)

    def _measure(self, settings: Settings) -> dict:
        target_ms = max(settings.min_batch_s * 1e3, 1.0)
        ready: dict[str, tuple[Callable[[], object], int]] = {}
        out: dict = {}
        for name, fn in self.paths.items():
            try:
                fn()
                once = max(self._batch_ms(fn, 2) / 2, 1e-3)
                ready[name] = (fn, max(1, min(1000, int(target_ms / once))))
            except Exception as exc:  # a peer that cannot do this copy is a result too
                out[name] = exc
        rounds: dict[str, list[float]] = {name: [] for name in ready}
        for _ in range(settings.repeats):
            for name, (fn, n) in ready.items():
                rounds[name].append(self._batch_ms(fn, n) / n * 1e6)
        for name, samples in rounds.items():
            out[name] = (statistics.median(samples), "device time (CUDA events)",
                         {"rounds": [round(x, 2) for x in samples]})
        return out


def _host_copy_cases() -> list[Case]:
    from .. import view

    if not _installed("numpy"):
        return []
    import numpy as np

    big = np.arange(1 << 22, dtype=np.float32)          # 16 MiB
    square = np.arange(1024 * 1024, dtype=np.float32).reshape(1024, 1024)
    layouts = {
        "contiguous 16 MiB": (big, np.empty_like(big)),
        "transpose 1024x1024 float32": (square.T, np.empty((1024, 1024), np.float32)),
        "[:, ::2] 1024x1024 float32": (square[:, ::2], np.empty((1024, 512), np.float32)),
        "4-D permute (16, 32, 32, 16) float32": (
            np.arange(16 * 32 * 32 * 16, dtype=np.float32).reshape(16, 32, 32, 16)
            .transpose(0, 2, 3, 1), np.empty((16, 32, 16, 32), np.float32)),
        "4 bytes": (np.ones(1, np.float32), np.empty(1, np.float32)),
    }
    cases = []
    for label, (src, dst) in layouts.items():
        group = f"copy host {label}"
        cases.append(Case("copies", group, "interop_core copy_from",
                          bound(view(dst).copy_from, view(src)), ours=True))
        cases.append(Case("copies", group, "numpy copyto", bound(np.copyto, dst, src)))
    return cases


def _device_copy_cases(quick: bool) -> list[Case]:
    from .. import view

    if not (_installed("torch") and _cuda_present()):
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    cupy = None
    if _installed("cupy"):
        try:
            import cupy
        except Exception:
            cupy = None
    stream = torch.cuda.Stream()
    handle = stream.cuda_stream
    n = (1 << 24 if quick else 1 << 26)                 # float32: 64 MiB quick, 256 MiB full
    size = f"{n * 4 >> 20} MiB"
    device = torch.empty(n, device="cuda")
    device.fill_(1.0)
    pinned = torch.ones(n).pin_memory()
    square = torch.arange(4096 * 4096, dtype=torch.float32, device="cuda").reshape(4096, 4096)
    cube = torch.arange(64 * 128 * 64 * 32, dtype=torch.float32, device="cuda").reshape(
        64, 128, 64, 32)
    operations = {
        f"copy D2D {size} contiguous": (device, torch.empty_like(device)),
        f"copy H2D {size} pinned": (pinned, torch.empty_like(device)),
        f"copy D2H {size} pinned": (device, torch.empty(n).pin_memory()),
        "copy transpose 4096x4096 float32": (square.t(), torch.empty(4096, 4096, device="cuda")),
        "copy [:, ::2] 4096x4096 float32": (square[:, ::2],
                                             torch.empty(4096, 2048, device="cuda")),
        "copy 4-D permute (64, 128, 64, 32) float32": (
            cube.permute(0, 2, 3, 1), torch.empty(64, 64, 32, 128, device="cuda")),
    }
    cases = []
    for group, (src, dst) in operations.items():
        src_view, dst_view = view(src), view(dst)

        def ours(d=dst_view, s=src_view):
            d.copy_from(s, stream=handle)

        def torch_copy(d=dst, s=src):
            with torch.cuda.stream(stream):
                d.copy_(s, non_blocking=True)

        paths = {"interop_core copy_from": ours, "torch Tensor.copy_": torch_copy}
        if cupy is not None and src.is_cuda and dst.is_cuda:
            c_src, c_dst = cupy.asarray(src), cupy.asarray(dst)
            cupy_stream = cupy.cuda.ExternalStream(handle)

            def cupy_copy(d=c_dst, s=c_src, cs=cupy_stream):
                with cs:
                    cupy.copyto(d, s)

            paths["cupy copyto"] = cupy_copy
        timed = _DeviceTimedGroup(torch, stream, paths)
        for name in paths:
            cases.append(Case("copies", group, name, runner=timed.runner(name),
                              ours=name.startswith("interop_core")))
    # What a tiny copy costs the host (the call, not the transfer): enqueued, not waited for.
    # The budget's path: the source was produced on the default stream, so every copy orders
    # the stream after it (an event record and a wait).  Beside it, the same copy with both
    # producers on the copy's stream (no ordering): the difference is the ordering's cost.
    small_src = torch.ones(1, device="cuda")
    small_dst = torch.empty(1, device="cuda")
    sv, dv = view(small_src), view(small_dst)
    with torch.cuda.stream(stream):
        sv_same, dv_same = view(small_src), view(torch.empty(1, device="cuda"))
    group = "copy 4 bytes D2D (host-side cost per call)"

    def torch_small():
        with torch.cuda.stream(stream):
            small_dst.copy_(small_src, non_blocking=True)

    drain = torch.cuda.synchronize
    cases.append(Case("copies", group, "interop_core copy_from(stream=)", ours=True,
                      runner=_host_side_runner(bound(dv.copy_from, sv, handle), drain)))
    cases.append(Case("copies", group, "interop_core copy_from(stream=), producers on it",
                      ours=True,
                      runner=_host_side_runner(bound(dv_same.copy_from, sv_same, handle),
                                               drain)))
    cases.append(Case("copies", group, "torch Tensor.copy_ (in a stream context)",
                      runner=_host_side_runner(torch_small, drain)))
    memcpy = _raw_driver_memcpy()
    if memcpy is not None:
        # The floor on this host: the one driver call any 4-byte copy makes, with nothing
        # around it but ctypes' own argument conversion (~0.6 us on the H100 host).
        dst_ptr, src_ptr = small_dst.data_ptr(), small_src.data_ptr()
        cases.append(Case("copies", group, "CUDA driver cuMemcpyAsync alone (through ctypes)",
                          runner=_host_side_runner(
                              lambda: memcpy(dst_ptr, src_ptr, 4, handle), drain)))
    return cases


def _raw_driver_memcpy():
    """libcuda's cuMemcpyAsync through ctypes, or None where the library cannot be loaded."""
    import ctypes

    try:
        memcpy = ctypes.CDLL("libcuda.so.1").cuMemcpyAsync
    except OSError:
        return None
    memcpy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    memcpy.restype = ctypes.c_int
    return memcpy


def _host_side_runner(fn: Callable[[], object], drain: Callable[[], object], calls: int = 32,
                      batches: int = 40):
    """Host time per call of an asynchronous ``fn``, the GPU's queue drained between batches.

    Timed back to back for 20 ms, thousands of tiny copies outrun the GPU, the queue fills and
    the host waits for the GPU inside the driver: that measures the GPU, not the call.  Here
    each batch of ``calls`` calls starts on an empty queue (``drain()``, untimed), so every
    call returns as soon as its work is enqueued.  Per round: the median of ``batches`` batches.
    """
    def run(settings: Settings) -> tuple[float, str, dict]:
        for _ in range(settings.warmup):
            fn()
        rounds = []
        for _ in range(settings.repeats):
            per_batch = []
            for _ in range(batches):
                drain()
                start = time.perf_counter_ns()
                for _ in range(calls):
                    fn()
                per_batch.append((time.perf_counter_ns() - start) / calls)
            rounds.append(statistics.median(per_batch))
        drain()
        return statistics.median(rounds), (
            f"host time per call: batches of {calls} calls, the GPU's queue drained between "
            "them (untimed)"), {"rounds": rounds}

    return run


def _section_copies(device: str, quick: bool) -> list[Case]:
    cases = []
    if device in ("cpu", "all"):
        cases += _host_copy_cases()
    if "cuda" in _devices(device):
        cases += _device_copy_cases(quick)
    return cases


_IMPORT_PROBE = """
import sys, time
t = time.perf_counter()
import interop_core
ms = (time.perf_counter() - t) * 1e3
heavy = sorted(m for m in ("torch", "cupy", "jax", "numba", "numpy", "pluggy") if m in sys.modules)
print(__import__("json").dumps([ms, heavy]))
"""


def _import_runner(settings: Settings) -> tuple[float, str, dict]:
    import interop_core

    # The package as this process sees it (a source checkout on PYTHONPATH or an install).
    root = os.path.dirname(os.path.dirname(os.path.abspath(interop_core.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p))
    times, heavy = [], []
    for _ in range(max(settings.import_runs, 1)):
        out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], capture_output=True,
                             text=True, env=env, timeout=120, check=True).stdout
        ms, heavy = json.loads(out.strip().splitlines()[-1])
        times.append(ms)
    note = "imported: " + ", ".join(heavy) if heavy else "no framework, numpy or pluggy imported"
    return statistics.median(times) * 1e6, note, {"imported": heavy}


def _section_import(device: str, quick: bool) -> list[Case]:
    return [Case("import", "import interop_core", "interop_core (fresh interpreter)",
                 runner=_import_runner, ours=True)]


# In the order they run and print.
SECTIONS: dict[str, Callable[[str, bool], list[Case]]] = {
    "view": _section_view,
    "from": _section_from,
    "readers": _section_readers,
    "stream": _section_stream,
    "to": _section_to,
    "viewable": _section_viewable,
    "launch": _section_launch,
    "ndim": _section_ndim,
    "threads": _section_threads,
    "dispatch": _section_dispatch,
    "shards": _section_shards,
    "copies": _section_copies,
    "import": _section_import,
}


def build_cases(device: str, quick: bool, sections: list[str] | None = None) -> list[Case]:
    """Every case of the chosen sections, for the frameworks installed here."""
    cases: list[Case] = []
    for name, build in SECTIONS.items():
        if sections and name not in sections:
            continue
        try:
            cases += build(device, quick)
        except Exception as exc:  # a section that cannot be set up is reported, not fatal
            cases.append(Case(name, f"{name} (setup)", "section", runner=_raiser(exc)))
    return cases


def _raiser(exc: BaseException):
    def run(settings: Settings):
        raise exc

    return run
