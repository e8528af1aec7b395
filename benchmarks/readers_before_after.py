"""The first-party readers of this tree against another tree's, timed in turns on one CPU.

A noisy host's speed changes by up to 2x from one moment to the next (measured on the H100
host: two consecutive processes timing the same code differ by 2x; two processes timed at the
same moment on two CPUs differ from slot to slot by as much), which hides a difference of a few
percent between two separately run benches.  So the two trees take turns on ONE CPU: each runs
in its own interpreter, both pinned to the same CPU, and a conductor hands them the CPU block by
block (one block: 2,000 views of one object, a fraction of a millisecond), before-after,
after-before, ... over adjacent blocks, so that the two blocks of a pair see the same core, the
same neighbours and nearly the same moment.  While one tree times a block the other sleeps in a
read from the conductor, so the timed one has the CPU to itself.

Two statistics per object, both of after / before:

* ``pairs``: the median (and quartiles) of the ratio of the two blocks of each pair;
* ``best``: the ratio of the two trees' 10th-percentile block times: interference from the rest
  of the host only ever slows a block down, so each tree's fastest blocks are the closest to its
  own cost.

Both are taken over several pairs of fresh interpreters (``--processes``): two identical
processes differ by a few percent, one against the other, with where their code and data land.

``--control`` times this tree against itself, the same way: the spread it shows is the method's
own, on this host, and an after / before ratio inside it is no difference.

    python benchmarks/readers_before_after.py BEFORE_TREE [--blocks 200] [--processes 6] [--cpu 2]
        [--objects 'numpy,torch cpu'] [--control]

BEFORE_TREE is a built checkout (``python setup.py build_ext --inplace``) of the older tree;
this checkout is "after".  Objects: numpy, torch (CPU and CUDA), cupy, jax (CPU and CUDA),
numba device arrays (``numba``, and ``numba slice``: a strided view of one), each where
installed and where a GPU exists.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

# One tree's side: import, warm up, then time one block per line read from the conductor.
PROBE = r"""
import os, sys, time
os.sched_setaffinity(0, {int(os.environ["READERS_CPU"])})
want = set(filter(None, os.environ.get("READERS_OBJECTS", "").split(",")))
def wanted(*names):
    return not want or bool(want.intersection(names))
objs = {}
try:
    import numpy as np
    objs["numpy"] = np.zeros((4, 8), np.float32)
except ImportError:
    pass
try:
    if not wanted("torch cpu", "torch cuda"):
        raise ImportError
    import torch
    objs["torch cpu"] = torch.zeros(4, 8)
    if torch.cuda.is_available():
        objs["torch cuda"] = torch.zeros(4, 8, device="cuda")
except ImportError:
    pass
try:
    if not wanted("cupy"):
        raise ImportError
    import cupy
    objs["cupy"] = cupy.zeros((4, 8), cupy.float32)
except Exception:
    pass
try:
    if not wanted("jax cpu", "jax cuda"):
        raise ImportError
    import jax
    objs["jax cpu"] = jax.device_put(jax.numpy.zeros((4, 8)), jax.devices("cpu")[0])
    try:
        objs["jax cuda"] = jax.device_put(jax.numpy.zeros((4, 8)), jax.devices("gpu")[0])
    except RuntimeError:
        pass
except ImportError:
    pass
try:
    if not wanted("numba", "numba slice"):
        raise ImportError
    from numba import cuda
    if cuda.is_available():
        objs["numba"] = cuda.device_array((4, 8), dtype=np.float32)
        objs["numba slice"] = objs["numba"][1:, ::2]   # another pointer class (a view)
except Exception:
    pass
objs = {name: obj for name, obj in objs.items() if wanted(name)}
from interop_core import view
for obj in objs.values():
    for _ in range(20000):
        view(obj)
print(" ".join(name.replace(" ", "_") for name in sorted(objs)), flush=True)
n = 2000
for line in sys.stdin:
    obj = objs[line.strip().replace("_", " ")]
    t = time.perf_counter_ns()
    for _ in range(n):
        view(obj)
    print((time.perf_counter_ns() - t) / n, flush=True)
"""


class _Tree:
    """One tree's interpreter, timing a block of views each time it is asked."""

    def __init__(self, root: str | None, cpu: int, objects: str):
        env = dict(os.environ, READERS_CPU=str(cpu), READERS_OBJECTS=objects)
        if root is not None:
            env["PYTHONPATH"] = os.pathsep.join([root, os.path.join(root, "plugins")])
        # stderr to a file, not a pipe: nobody reads it while the probe runs (a full pipe would
        # block the probe), and it is what to show when the probe dies.
        self.errors = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, "-c", PROBE], env=env,
                                     cwd=root or os.getcwd(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.errors, text=True)
        first_line = self.proc.stdout.readline()
        if not first_line:
            # A tree that cannot be imported (unbuilt, or its files gone) would otherwise leave
            # an empty table that reads like "nothing to compare".
            self.proc.wait()
            self.errors.seek(0)
            raise RuntimeError(f"the probe of tree {root or os.getcwd()!r} exited "
                               f"({self.proc.returncode}) before timing anything:\n"
                               + self.errors.read()[-2000:])
        self.objects = {name.replace("_", " ") for name in first_line.split()}

    def block(self, name: str) -> float:
        """ns per view over one block of views of ``name``."""
        self.proc.stdin.write(name.replace(" ", "_") + "\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()
        self.errors.close()


def _one_pair(before_root: str | None, cpu: int, blocks: int,
              objects: str) -> dict[str, dict[str, list]]:
    """Block times of both trees, per object, from one pair of fresh interpreters."""
    before = _Tree(before_root, cpu, objects)
    try:
        after = _Tree(None, cpu, objects)
    except BaseException:
        before.close()
        raise
    results = {}
    try:
        for name in sorted(before.objects & after.objects):
            times: dict[str, list[float]] = {"before": [], "after": []}
            for k in range(blocks):
                # Alternate which tree goes first, so that neither always follows the other.
                order = (("before", before), ("after", after))
                for label, tree in order if k % 2 == 0 else order[::-1]:
                    times[label].append(tree.block(name))
            results[name] = times
    finally:
        before.close()
        after.close()
    return results


def measure(before_root: str | None, cpu: int, blocks: int, processes: int,
            objects: str = "") -> dict[str, dict[str, float]]:
    """Per object, after / before: pooled pair ratios (median, quartiles) and the best ratio
    of each pair of interpreters (median, lowest, highest)."""
    pairs: dict[str, list[float]] = {}
    best: dict[str, list[float]] = {}
    ns: dict[str, dict[str, list[float]]] = {}
    for _ in range(processes):
        # Fresh interpreters each time: where the loader puts code and data differs from one
        # process to the next, and moves one process's speed by a few percent against an
        # identical one (the control shows it); several pairs average it out.
        for name, times in _one_pair(before_root, cpu, blocks, objects).items():
            pairs.setdefault(name, []).extend(
                a / b for a, b in zip(times["after"], times["before"], strict=True))
            best.setdefault(name, []).append(statistics.quantiles(times["after"], n=10)[0]
                                             / statistics.quantiles(times["before"], n=10)[0])
            for label in ("before", "after"):
                ns.setdefault(name, {}).setdefault(label, []).extend(times[label])
    results = {}
    for name, ratios in pairs.items():
        q1, median, q3 = statistics.quantiles(ratios, n=4)
        results[name] = {"median": median, "q1": q1, "q3": q3,
                         "best": statistics.median(best[name]), "best_low": min(best[name]),
                         "best_high": max(best[name]),
                         "before_ns": statistics.median(ns[name]["before"]),
                         "after_ns": statistics.median(ns[name]["after"])}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", nargs="?", help="a built checkout of the older tree")
    parser.add_argument("--blocks", type=int, default=200, help="block pairs per object")
    parser.add_argument("--cpu", type=int, default=2, help="the one CPU both trees run on")
    parser.add_argument("--processes", type=int, default=6,
                        help="pairs of fresh interpreters, one after the other")
    parser.add_argument("--objects", default="",
                        help="comma-separated objects to time (default: every one installed), "
                             "e.g. 'numpy,torch cpu'")
    parser.add_argument("--control", action="store_true",
                        help="time this tree against itself (the method's own spread)")
    args = parser.parse_args()
    if args.control:
        before_root, title = None, "this tree against itself (control)"
    elif args.before:
        before_root, title = os.path.abspath(args.before), f"this tree against {args.before}"
    else:
        parser.error("give BEFORE_TREE or --control")
    try:
        results = measure(before_root, args.cpu, args.blocks, args.processes, args.objects)
    except RuntimeError as exc:
        print(f"readers_before_after: {exc}", file=sys.stderr)
        return 1
    print(f"{title}: after / before; {args.processes} pairs of interpreters, {args.blocks} "
          f"block pairs per object each, on CPU {args.cpu}\n")
    print("| object | pairs: median | pairs: quartiles | best: median | best: range "
          "| before ns | after ns |")
    print("| --- | ---: | --- | ---: | --- | ---: | ---: |")
    for name, r in results.items():
        print(f"| {name} | {r['median']:.3f} | {r['q1']:.3f}–{r['q3']:.3f} | {r['best']:.3f} "
              f"| {r['best_low']:.3f}–{r['best_high']:.3f} | {r['before_ns']:.1f} "
              f"| {r['after_ns']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
