"""The first-party readers of this tree against another tree's, alternated process by process.

A noisy host's speed can change by 2x between consecutive processes, which hides a difference of
a few percent between two separately run benches.  This runs many short rounds, each timing
``view(x)`` for every object first under one tree and then under the other (fresh interpreters,
the same objects), and reports the per-round ratio after / before with its median and quartiles.

    python benchmarks/readers_before_after.py BEFORE_TREE [--rounds 12] [--cpu N]

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

PROBE = r"""
import json, os, sys, time
if os.environ.get("READERS_CPU"):
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
out = {}
for name, obj in objs.items():
    view(obj)
    best = float("inf")
    for _ in range(5):
        n = 20000
        start = time.perf_counter_ns()
        for _ in range(n):
            view(obj)
        best = min(best, (time.perf_counter_ns() - start) / n)
    out[name] = best
print(json.dumps(out))
"""


def _probe(tree: str | None, cpu: int | None) -> dict[str, float]:
    env = dict(os.environ)
    if cpu is not None:
        env["READERS_CPU"] = str(cpu)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([tree, os.path.join(tree, "plugins")])
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, check=True, cwd=tree or os.getcwd())
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="a built checkout of the older tree")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--cpu", type=int, default=None,
                        help="pin every probe to this CPU (a host whose cores or memory nodes "
                             "differ in speed otherwise moves each process's timing)")
    args = parser.parse_args()
    ratios: dict[str, list[float]] = {}
    for round_number in range(args.rounds):
        before, after = _probe(os.path.abspath(args.before), args.cpu), _probe(None, args.cpu)
        for name in after.keys() & before.keys():
            ratios.setdefault(name, []).append(after[name] / before[name])
        # Each round as it ends, so a run cut short still reports what it measured.
        print(f"round {round_number + 1}: " + ", ".join(
            f"{name} {after[name]:.0f}/{before[name]:.0f} ns" for name in sorted(ratios)),
            file=sys.stderr, flush=True)
    print("| object | after / before, median | quartiles | rounds |")
    print("| --- | ---: | --- | ---: |")
    for name, values in sorted(ratios.items()):
        q1, q2, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values * 3)
        print(f"| {name} | {q2:.3f} | {q1:.3f}–{q3:.3f} | {len(values)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
