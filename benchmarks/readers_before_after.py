"""The first-party readers of this tree against another tree's, timed side by side.

A noisy host's speed changes by up to 2x from one second to the next (measured on the H100
host: two consecutive processes timing the same code differ by 2x), which hides a difference of
a few percent between two separately run benches, and even between two processes run one after
the other.  So the two trees run AT THE SAME TIME, each in its own interpreter pinned to its own
CPU, on one shared clock: every object is timed in many short blocks, block k of both trees in
the same time slot, so both see the same host speed.  The ratio after / before is taken block by
block; the report gives its median and quartiles per object.  ``--swap`` repeats the run with
the two trees' CPUs exchanged, so a difference between the two CPUs cancels out.

    python benchmarks/readers_before_after.py BEFORE_TREE [--blocks 60] [--cpus 2,3] [--swap]

BEFORE_TREE is a built checkout (``python setup.py build_ext --inplace``) of the older tree;
this checkout is "after".  Objects: numpy, torch (CPU and CUDA), cupy, numba, jax (CPU and CUDA),
each where installed and where a GPU exists.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PROBE = r"""
import json, os, sys, time
os.sched_setaffinity(0, {int(os.environ["READERS_CPU"])})
objs = {}
try:
    import numpy as np
    objs["numpy"] = np.zeros((4, 8), np.float32)
except ImportError:
    pass
try:
    import torch
    objs["torch cpu"] = torch.zeros(4, 8)
    if torch.cuda.is_available():
        objs["torch cuda"] = torch.zeros(4, 8, device="cuda")
except ImportError:
    pass
try:
    import cupy
    objs["cupy"] = cupy.zeros((4, 8), cupy.float32)
except Exception:
    pass
try:
    import jax
    objs["jax cpu"] = jax.device_put(jax.numpy.zeros((4, 8)), jax.devices("cpu")[0])
    try:
        objs["jax cuda"] = jax.device_put(jax.numpy.zeros((4, 8)), jax.devices("gpu")[0])
    except RuntimeError:
        pass
except ImportError:
    pass
from interop_core import view
start = float(os.environ["READERS_START"])
slot = float(os.environ["READERS_SLOT"])
blocks = int(os.environ["READERS_BLOCKS"])
names = sorted(objs)
out = {name: [] for name in names}
for obj in objs.values():
    for _ in range(2000):
        view(obj)
for index, name in enumerate(names):
    obj = objs[name]
    for block in range(blocks):
        # Block `block` of object `index` starts at the same moment in both trees' processes.
        wait = start + (index * blocks + block) * slot - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        n = 2000
        t = time.perf_counter_ns()
        for _ in range(n):
            view(obj)
        out[name].append((time.perf_counter_ns() - t) / n)
print(json.dumps(out))
"""

# Seconds given to both interpreters to import the frameworks before the first slot.
IMPORT_ALLOWANCE = 25.0
# One block's slot: 2,000 views take 0.2-6 ms; the rest of the slot is idle, so that a slow
# block of one tree never runs into the next slot of the other.
SLOT = 0.02


def _run_pair(before_tree: str, cpus: tuple[int, int], blocks: int) -> dict[str, list[float]]:
    """Ratios after / before, block by block, of one simultaneous run."""
    start = time.perf_counter() + IMPORT_ALLOWANCE
    procs = []
    for tree, cpu in ((before_tree, cpus[0]), (None, cpus[1])):
        env = dict(os.environ, READERS_CPU=str(cpu), READERS_START=repr(start),
                   READERS_SLOT=repr(SLOT), READERS_BLOCKS=str(blocks))
        if tree is not None:
            env["PYTHONPATH"] = os.pathsep.join([tree, os.path.join(tree, "plugins")])
        procs.append(subprocess.Popen([sys.executable, "-c", PROBE], env=env, cwd=tree or os.getcwd(),
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    before, after = (json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs)
    return {name: [a / b for a, b in zip(after[name], before[name], strict=True)]
            for name in after.keys() & before.keys()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="a built checkout of the older tree")
    parser.add_argument("--blocks", type=int, default=60, help="timed blocks per object")
    parser.add_argument("--cpus", default="2,3", help="the before tree's CPU and the after tree's")
    parser.add_argument("--swap", action="store_true",
                        help="a second run with the two CPUs exchanged")
    args = parser.parse_args()
    first, second = (int(c) for c in args.cpus.split(","))
    runs = [(first, second)] + ([(second, first)] if args.swap else [])
    ratios: dict[str, list[float]] = {}
    for cpus in runs:
        for name, values in _run_pair(os.path.abspath(args.before), cpus, args.blocks).items():
            ratios.setdefault(name, []).extend(values)
        print(f"run on CPUs {cpus} done", file=sys.stderr, flush=True)
    print("| object | after / before, median | quartiles | blocks |")
    print("| --- | ---: | --- | ---: |")
    for name, values in sorted(ratios.items()):
        q1, q2, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values * 3)
        print(f"| {name} | {q2:.3f} | {q1:.3f}–{q3:.3f} | {len(values)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
