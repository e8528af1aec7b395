"""Host time per launch: Triton's own launch, the Triton wrapper, the public launch, bare ctypes.

For one compiled Triton kernel of 4 runtime arguments and one of 16 (three or fifteen arrays and
``n``), every round times, in a shuffled order, batches of 32 launches of:

- Triton's own ``kernel[grid](...)`` on torch tensors;
- ``interop_core.triton_kernel(kernel)[grid](...)`` on torch, cupy, jax and numba arrays (the
  output a torch tensor: jax arrays are read-only);
- ``launch_args`` + a bare ``cuLaunchKernel`` through ctypes on the same function handle, and
  the bare ``cuLaunchKernel`` alone with the arguments prepared once (the floor);

and for ``add3_f32`` of ``examples/axpy.ptx`` (4 torch arrays and ``n``):
``Kernel.launch(grid, block, launch_args(...))`` beside ``launch_args`` + a bare ctypes
``cuLaunchKernel``.  The GPU's queue is drained (untimed) before each batch, so every launch
returns as soon as it is enqueued: this is host time per call.  Ratios are taken round by round
(paths of a round share the host's slow and fast spells); the table gives their median and
quartiles and checks the DESIGN.md budgets: the wrapper <= 0.5x Triton's own launch at 4
arguments and <= 0.35x at 16, the public launch <= 1.2x launch_args + bare cuLaunchKernel.

Run: python benchmarks/triton_launch.py [--rounds 15] [--json FILE]   (needs a CUDA GPU, torch
and Triton; cupy, jax and numba where installed)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CALLS = 32          # launches per timed batch
BATCHES = 25        # batches per path and round (the round keeps their median)
N, BLOCK = 64 * 64, 1024


def _bare_launch():
    launch = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    launch.restype = ctypes.c_int
    return launch


def _frameworks(torch, count: int) -> dict:
    """name -> `count` float32 device arrays of N elements (each framework installed here)."""
    import numpy as np

    host = np.ones(N, np.float32)
    makers = {"torch": lambda: torch.ones(N, device="cuda")}
    try:
        import cupy

        makers["cupy"] = lambda: cupy.asarray(host)
    except ImportError:
        pass
    try:
        import jax

        gpu = jax.devices("gpu")[0]
        makers["jax"] = lambda: jax.device_put(host, gpu)
    except Exception:
        pass
    try:
        from numba import cuda

        if cuda.is_available():
            makers["numba"] = lambda: cuda.to_device(host)
    except ImportError:
        pass
    return {name: tuple(make() for _ in range(count)) for name, make in makers.items()}


def triton_paths(torch, triton, kernel, nargs: int, bare) -> dict:
    import interop_core
    from interop_core.launch import _triton_launch

    arrays = tuple(torch.ones(N, device="cuda") for _ in range(nargs - 1))
    grid = (triton.cdiv(N, BLOCK),)
    stream = torch.cuda.current_stream()
    fast = interop_core.triton_kernel(kernel)
    compiled = kernel[grid](*arrays, N, BLOCK=BLOCK)
    fast[grid](*arrays, N, BLOCK=BLOCK)
    function = next(iter(_triton_launch._entries(fast).values())).kernel.function
    threads, shared = 32 * compiled.metadata.num_warps, compiled.metadata.shared
    scalar_types = (None,) * len(arrays) + ("int32", None, None)
    prepared = interop_core.launch_args(arrays + (N, None, None), stream,
                                        scalar_types=scalar_types)

    def check(status):
        if status:
            raise RuntimeError(f"cuLaunchKernel failed: CUDA error {status}")

    def theirs():
        kernel[grid](*arrays, N, BLOCK=BLOCK)

    def with_launch_args():
        r = interop_core.launch_args(arrays + (N, None, None), stream, scalar_types=scalar_types)
        check(bare(function, grid[0], 1, 1, threads, 1, 1, shared, r.stream,
                   r.kernel_params_address, None))

    def floor():
        check(bare(function, grid[0], 1, 1, threads, 1, 1, shared, prepared.stream,
                   prepared.kernel_params_address, None))

    paths = {"Triton kernel[grid](...) (torch)": theirs,
             "launch_args + bare cuLaunchKernel (ctypes)": with_launch_args,
             "bare cuLaunchKernel (ctypes, prepared once)": floor}
    for name, inputs in _frameworks(torch, nargs - 2).items():
        args = (arrays[0],) + inputs if nargs == 16 else inputs + (arrays[-1],)
        paths[f"interop_core triton_kernel ({name})"] = _wrapper_call(fast, grid, args)
    return paths


def _wrapper_call(fast, grid, args):
    def launch():
        fast[grid](*args, N, BLOCK=BLOCK)

    return launch


def public_paths(torch, bare) -> dict:
    import interop_core

    kernel = interop_core.load_module(ROOT / "examples" / "axpy.ptx").kernel(
        "add3_f32", ("pointer",) * 4 + ("int64",))
    tensors = tuple(torch.ones(N, device="cuda") for _ in range(4))
    stream = torch.cuda.current_stream()
    blocks = (N + 255) // 256

    def ours():
        kernel.launch(blocks, 256, interop_core.launch_args(tensors + (N,), stream))

    def reference():
        r = interop_core.launch_args(tensors + (N,), stream)
        status = bare(kernel.handle, blocks, 1, 1, 256, 1, 1, 0, r.stream,
                      r.kernel_params_address, None)
        if status:
            raise RuntimeError(f"cuLaunchKernel failed: CUDA error {status}")

    return {"interop_core Kernel.launch(grid, block, launch_args(...))": ours,
            "launch_args + bare cuLaunchKernel (ctypes)": reference}


def measure(paths: dict, rounds: int, drain) -> dict:
    """name -> per-round host ns per call (each round: the median of BATCHES batches)."""
    for fn in paths.values():
        for _ in range(200):
            fn()
    drain()
    samples = {name: [] for name in paths}
    for _ in range(rounds):
        per_batch = {name: [] for name in paths}
        for _ in range(BATCHES):
            order = list(paths)
            random.shuffle(order)
            for name in order:
                fn = paths[name]
                drain()
                start = time.perf_counter_ns()
                for _ in range(CALLS):
                    fn()
                per_batch[name].append((time.perf_counter_ns() - start) / CALLS)
        for name, values in per_batch.items():
            samples[name].append(statistics.median(values))
    drain()
    return samples


def _quartiles(values):
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return q[0], statistics.median(values), q[2]


def report(title: str, samples: dict, reference: str, ours_prefix: str, budget: float) -> list:
    rows = []
    print(f"\n{title}")
    print(f"  {'path':<58} {'ns / call':>10}  {'÷ ' + reference.split(' (')[0]:>28}")
    for name, values in samples.items():
        ratios = [a / b for a, b in zip(values, samples[reference], strict=True)]
        low, mid, high = _quartiles(ratios)
        verdict = ""
        if name.startswith(ours_prefix):
            verdict = "within budget" if mid <= budget else "OVER BUDGET"
            verdict = f"  (budget {budget}x: {verdict})"
        print(f"  {name:<58} {statistics.median(values):>10,.0f}  {mid:>6.3f} "
              f"[{low:.3f}-{high:.3f}]{verdict}")
        rows.append({"group": title, "path": name, "ns": statistics.median(values),
                     "ratio": mid, "ratio_quartiles": [low, high], "rounds": values,
                     "budget": budget if name.startswith(ours_prefix) else None})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    try:
        import torch
        import triton
    except ImportError as exc:
        print(f"skipped: needs torch and Triton ({exc})")
        return 0
    if not torch.cuda.is_available():
        print("skipped: needs a CUDA GPU")
        return 0
    sys.path.insert(0, str(ROOT))
    import interop_core
    from interop_core.bench import _triton_kernels
    from interop_core.launch import _triton

    bare = _bare_launch()
    drain = torch.cuda.synchronize
    environment = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(),
                   "python": platform.python_version(), "torch": torch.__version__,
                   "triton": triton.__version__, "interop_core": interop_core.__file__}
    print(", ".join(f"{k} {v}" for k, v in environment.items()))
    rows = []
    for nargs, kernel, budget in ((4, _triton_kernels.add4, 0.5),
                                  (16, _triton_kernels.add16, 0.35)):
        samples = measure(triton_paths(torch, triton, kernel, nargs, bare), args.rounds, drain)
        rows += report(f"Triton kernel, {nargs} arguments", samples,
                       "Triton kernel[grid](...) (torch)", "interop_core", budget)
    samples = measure(public_paths(torch, bare), args.rounds, drain)
    rows += report("public launch of a PTX kernel, 4 torch arrays + n", samples,
                   "launch_args + bare cuLaunchKernel (ctypes)", "interop_core", 1.2)
    status = _triton.status()
    print(f"\nTriton wrapper: {status['mode']}: {status['reason']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": environment, "results": rows,
                                               "triton_wrapper": status}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
