"""``StridedMemoryView.from_dlpack(x)`` as a caller writes it: the class attribute looked up per call.

The compiled classes keep their static constructors in the class's dictionary as the builtin
functions themselves, not in ``staticmethod`` wrappers (``interop_core/core/_view.pyx``, "static
methods looked up as plain functions").  This times both forms in one process, in alternating
rounds: the constructors as built, and wrapped in ``staticmethod`` again for the round (the same
function, found through the wrapper's descriptor call).  Each is timed inside a Python function,
as user code calls it, and divided by ``view(x)`` inside a Python function timed in the same round.

    python benchmarks/static_constructor_lookup.py [--rounds 25] [--calls 20000]

Prints, per object (numpy, torch CPU and CUDA where present) and constructor, the median over
rounds of each form's ratio to ``view()``, and of the difference per call in ns.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import statistics
import sys
import timeit

import numpy as np

from interop_core import StridedMemoryView, view

CONSTRUCTORS = ("from_dlpack", "from_any")


def _class_dictionary(cls: type) -> dict:
    # The dictionary behind the read-only mappingproxy, for this measurement alone.
    return gc.get_referents(cls.__dict__)[0]


def _wrap(wrapped: bool) -> None:
    namespace = _class_dictionary(StridedMemoryView)
    for name in CONSTRUCTORS:
        function = namespace[name]
        if wrapped and not isinstance(function, staticmethod):
            namespace[name] = staticmethod(function)
        elif not wrapped and isinstance(function, staticmethod):
            namespace[name] = function.__func__
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(StridedMemoryView))


def _view_in_a_function(x):
    return view(x)


def _from_dlpack_in_a_function(x):
    return StridedMemoryView.from_dlpack(x)


def _from_any_in_a_function(x):
    return StridedMemoryView.from_any(x)


CALLS = {"view": _view_in_a_function, "from_dlpack": _from_dlpack_in_a_function,
         "from_any": _from_any_in_a_function}


def _objects() -> dict:
    objects = {"numpy": np.zeros((4, 4))}
    try:
        import torch
    except ImportError:
        return objects
    objects["torch cpu"] = torch.zeros(4, 4)
    if torch.cuda.is_available():
        objects["torch cuda"] = torch.zeros(4, 4, device="cuda")
    return objects


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args(argv)
    print(f"Python {sys.version.split()[0]}; median over {args.rounds} rounds of "
          f"{args.calls} calls each")
    print("| object | constructor | plain / view() | staticmethod / view() | "
          "staticmethod - plain | view() in a function |")
    print("| --- | --- | --- | --- | --- | --- |")
    try:
        for label, x in _objects().items():
            times: dict[tuple[str, bool], list[float]] = {}
            for _ in range(args.rounds):
                for wrapped in (False, True):
                    _wrap(wrapped)
                    for name, call in CALLS.items():
                        seconds = timeit.timeit(lambda call=call, x=x: call(x), number=args.calls)
                        times.setdefault((name, wrapped), []).append(seconds / args.calls * 1e9)
            base = times[("view", False)]
            for name in CONSTRUCTORS:
                plain = statistics.median(
                    a / b for a, b in zip(times[(name, False)], base, strict=True))
                wrapped = statistics.median(
                    a / b for a, b in zip(times[(name, True)], base, strict=True))
                saved = statistics.median(
                    a - b for a, b in zip(times[(name, True)], times[(name, False)], strict=True))
                print(f"| {label} | {name} | {plain:.2f} | {wrapped:.2f} | {saved:.1f} ns | "
                      f"{statistics.median(base):.0f} ns |")
    finally:
        _wrap(False)


if __name__ == "__main__":
    main()
