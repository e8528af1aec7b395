"""What the cuda.core compatibility layer costs per call, beside the core call it wraps.

For every framework installed here (numpy, torch on the CPU, torch on CUDA, cupy, numba device
arrays; whatever is missing, or needs a GPU that is absent, is skipped), each call of
``interop_core.compat.cuda_core`` is timed beside the same call on the core API, in the same
process, interleaved round by round, and the ratio compat / core is printed (the budget in
DESIGN.md: at most 1.2)::

    python benchmarks/compat_overhead.py                 # ~1 minute per framework
    python benchmarks/compat_overhead.py --quick         # a smoke run: indicative only
    python benchmarks/compat_overhead.py --only numba --json out.json

The pairs (compat | core):

- ``StridedMemoryView.from_dlpack(x, -1)`` | ``StridedMemoryView.from_dlpack(x)`` (and the core
  call with the same ``-1``)
- ``StridedMemoryView.from_any_interface(x, -1)`` | ``StridedMemoryView.from_any(x)``
- ``StridedMemoryView.from_cuda_array_interface(x, -1)`` | the core's, for CUDA arrays
- ``StridedMemoryView.from_array_interface(x)`` | the core's, for numpy
- the decorator's proxy, ``proxy.view(-1)`` | ``StridedMemoryView.from_dlpack(x)`` (or the CUDA
  Array Interface constructor for objects without DLPack)
- ``StridedMemoryView(x, -1)`` (deprecated: it warns on every call, as cuda.core's does; the
  warning is filtered out here, and still costs Python's warning machinery) | ``view(x)``
- the accessors ``ptr shape strides dtype layout device_id size is_device_accessible readonly``
  of a compat view | the same of a core view, and ``exporting_obj`` | ``owner``

Each call is written out in a small compiled loop (no lambda, no partial: what a caller's own
code does), the loop run for a calibrated batch; a round times one batch of every path of a
framework in turn; the figure is the median over rounds of the time per call, and the ratio
the median of the per-round ratios (with its quartiles), so that a slow spell of a shared
machine lands on both sides.  The loop itself (a few ns) is in both figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import warnings


def _objects(only: set[str]) -> dict[str, object]:
    """One float32 (64, 64) array per framework and device that can be made here."""
    out: dict[str, object] = {}

    def attempt(name: str, make) -> None:
        if only and name.split(" ")[0] not in only:
            return
        try:
            out[name] = make()
        except Exception as exc:   # not installed, no GPU, no CUDA build: skipped
            print(f"skipping {name}: {type(exc).__name__}: {str(exc)[:80]}", file=sys.stderr)

    def numpy_array():
        import numpy as np

        return np.zeros((64, 64), np.float32)

    def torch_cpu():
        import torch

        return torch.zeros((64, 64), dtype=torch.float32)

    def torch_cuda():
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        return torch.zeros((64, 64), dtype=torch.float32, device="cuda")

    def cupy_array():
        import cupy

        return cupy.zeros((64, 64), dtype=cupy.float32)

    def numba_array():
        from numba import cuda

        if not cuda.is_available():
            raise RuntimeError("numba sees no CUDA device")
        return cuda.device_array((64, 64), dtype="float32")

    attempt("numpy", numpy_array)
    attempt("torch cpu", torch_cpu)
    attempt("torch cuda", torch_cuda)
    attempt("cupy", cupy_array)
    attempt("numba", numba_array)
    return out


def _pairs(x: object) -> list[tuple[str, str, str]]:
    """(what, compat statement, core statement) over the names C, S, view, P, x, cv, v."""
    pairs = []
    import interop_core

    has_dlpack = hasattr(x, "__dlpack__")
    # torch has the interface on the type and refuses it for host tensors: device memory only.
    has_cai = (hasattr(type(x), "__cuda_array_interface__")
               and interop_core.view(x).device_type != 1)
    if has_dlpack:
        pairs.append(("from_dlpack(x, -1) | from_dlpack(x)",
                      "C.from_dlpack(x, -1)", "S.from_dlpack(x)"))
        pairs.append(("from_dlpack(x, -1) | from_dlpack(x, -1)",
                      "C.from_dlpack(x, -1)", "S.from_dlpack(x, -1)"))
    pairs.append(("from_any_interface(x, -1) | from_any(x)",
                  "C.from_any_interface(x, -1)", "S.from_any(x)"))
    if has_cai:
        pairs.append(("from_cuda_array_interface(x, -1) | from_cuda_array_interface(x)",
                      "C.from_cuda_array_interface(x, -1)", "S.from_cuda_array_interface(x)"))
    if hasattr(type(x), "__array_interface__"):
        pairs.append(("from_array_interface(x) | from_array_interface(x)",
                      "C.from_array_interface(x)", "S.from_array_interface(x)"))
    pairs.append(("proxy.view(-1) | " + ("from_dlpack(x)" if has_dlpack
                                          else "from_cuda_array_interface(x)"),
                  "P.view(-1)", "S.from_dlpack(x)" if has_dlpack
                  else "S.from_cuda_array_interface(x)"))
    pairs.append(("StridedMemoryView(x, -1) [deprecated, warns] | view(x)",
                  "C(x, -1)", "view(x)"))
    for name in ("ptr", "shape", "strides", "dtype", "layout", "device_id", "size",
                 "is_device_accessible", "readonly"):
        pairs.append((f".{name}", f"cv.{name}", f"v.{name}"))
    pairs.append((".exporting_obj | .owner", "cv.exporting_obj", "v.owner"))
    return pairs


def _loop(statement: str, env: dict):
    source = f"def run(n):\n    for _ in range(n):\n        {statement}\n"
    exec(source, env)  # our own generated source: the call written out as a caller writes it
    return env["run"]


def _calibrate(run, batch_s: float) -> int:
    n = 16
    while True:
        start = time.perf_counter()
        run(n)
        if time.perf_counter() - start >= batch_s or n > 1 << 26:
            return n
        n *= 2


def _measure(x: object, rounds: int, batch_s: float) -> list[dict]:
    import interop_core
    from interop_core.compat import cuda_core as compat

    # What a function decorated with args_viewable_as_strided_memory receives for x.
    proxy = compat.args_viewable_as_strided_memory((0,))(lambda arg: arg)(x)
    env = {"C": compat.StridedMemoryView, "S": interop_core.StridedMemoryView,
           "view": interop_core.view, "x": x, "P": proxy,
           "cv": compat.StridedMemoryView.from_any_interface(x, -1),
           "v": interop_core.StridedMemoryView.from_any(x)}
    rows = []
    for what, mine, theirs in _pairs(x):
        runs = []
        for statement in (mine, theirs):
            run = _loop(statement, dict(env))
            try:
                run(10)   # warm-up; a path that cannot take this object is reported
            except Exception as exc:
                runs = None
                rows.append({"call": what, "error": f"{type(exc).__name__}: {exc}"[:100]})
                break
            runs.append((run, _calibrate(run, batch_s)))
        if runs is not None:
            rows.append({"call": what, "runs": runs, "ns": ([], []), "ratios": []})
    for _ in range(rounds):
        for row in rows:
            if "runs" not in row:
                continue
            per_call = []
            for k, (run, n) in enumerate(row["runs"]):
                gc.collect(1)
                start = time.perf_counter_ns()
                run(n)
                per_call.append((time.perf_counter_ns() - start) / n)
                row["ns"][k].append(per_call[-1])
            row["ratios"].append(per_call[0] / per_call[1])
    out = []
    for row in rows:
        if "runs" not in row:
            out.append(row)
            continue
        q = statistics.quantiles(row["ratios"], n=4) if len(row["ratios"]) > 1 else \
            [row["ratios"][0]] * 3
        out.append({"call": row["call"], "compat_ns": statistics.median(row["ns"][0]),
                    "core_ns": statistics.median(row["ns"][1]),
                    "ratio": statistics.median(row["ratios"]), "ratio_q1": q[0],
                    "ratio_q3": q[2]})
    return out


def main(argv: list[str] | None = None) -> int:
    """Time every compat call beside its core call; print a table per framework.

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 (the ratios are reported, not judged).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short batches, few rounds")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 15; 3 quick)")
    parser.add_argument("--only", action="append", default=[],
                        help="numpy, torch, cupy or numba (repeatable; default: all)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 15)
    batch_s = 0.002 if args.quick else 0.02
    # The deprecated constructor warns on every call: filtered, so that nothing is printed.
    warnings.simplefilter("ignore", DeprecationWarning)

    import interop_core

    results = {"interop_core": interop_core.__version__, "python": sys.version.split()[0],
               "frameworks": {}}
    for name, x in _objects(set(args.only)).items():
        rows = _measure(x, rounds, batch_s)
        results["frameworks"][name] = rows
        print(f"\n## {name} ({type(x).__module__}.{type(x).__qualname__})\n")
        print("| call (compat \\| core) | compat ns | core ns | compat / core (quartiles) |")
        print("| --- | ---: | ---: | ---: |")
        for row in rows:
            call = row["call"].replace("|", "\\|")
            if "error" in row:
                print(f"| {call} | failed: {row['error']} | | |")
                continue
            print(f"| {call} | {row['compat_ns']:.1f} | {row['core_ns']:.1f} | "
                  f"{row['ratio']:.2f} ({row['ratio_q1']:.2f}-{row['ratio_q3']:.2f}) |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
