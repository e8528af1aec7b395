"""Where a ``view(obj)`` loop spends its time, by function and by instruction.

Hardware counters cannot be read on our machines (both are VMs), so this samples the instruction
pointer on a timer (``benchmarks/sampling/sampler.c``, compiled on first use with ``cc``) while
a loop calls ``interop_core.view`` on one object, then names each sample's function with ``nm``
and prints, per shared object and per function, the share of samples converted to ns per view.
``--annotate FILE`` writes the hottest functions' disassembly (``objdump``) with a sample count
per instruction: a load that waits for a store it cannot take its value from (the 64-bit
reference-count read after a 32-bit increment, see ``interop_core/core/_refcount.pxd``) shows up
as one instruction holding a tenth of all samples.

    python benchmarks/profile_view.py [--object numpy] [--seconds 4] [--cpu 0] [--annotate FILE]

Objects: numpy, torch (CPU), torch-cuda, cupy.  Linux only.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PERIOD_NS = 50_000           # 20,000 samples per second


def make_object(name: str):
    if name == "numpy":
        import numpy as np
        return np.zeros((4, 8), np.float32)
    if name in ("torch", "torch-cuda"):
        import torch
        return torch.zeros(4, 8, device="cuda" if name == "torch-cuda" else "cpu")
    if name == "cupy":
        import cupy
        return cupy.zeros((4, 8), cupy.float32)
    raise SystemExit(f"unknown object {name!r}: numpy, torch, torch-cuda or cupy")


def load_sampler() -> ctypes.CDLL:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("profile_view.py needs a C compiler (cc) to build its sampler")
    out = os.path.join(tempfile.mkdtemp(prefix="interop_sampler_"), "sampler.so")
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", out,
                    os.path.join(HERE, "sampling", "sampler.c")], check=True)
    lib = ctypes.CDLL(out)
    lib.sampler_start.argtypes = [ctypes.c_long, ctypes.c_long]
    lib.sampler_stop.restype = ctypes.c_long
    lib.sampler_samples.restype = ctypes.POINTER(ctypes.c_uint64)
    return lib


class Symbols:
    """Instruction address -> (shared object, function), from /proc/self/maps and nm."""

    def __init__(self):
        self.maps = []                      # (start, end, path), sorted by start
        self.load_base = {}                 # path -> lowest mapped address
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 6:
                    continue
                start, end = (int(x, 16) for x in parts[0].split("-"))
                path = parts[5]
                self.maps.append((start, end, path))
                self.load_base[path] = min(start, self.load_base.get(path, start))
        self.maps.sort()
        self.starts = [m[0] for m in self.maps]
        self.tables = {}                    # path -> (addresses, [(address, size, name)])
        self.fixed = {}                     # path -> whether it is linked at a fixed address

    def table(self, path: str):
        if path not in self.tables:
            rows = []
            for dynamic in ([], ["-D"]):    # stripped binaries keep their dynamic symbols
                try:
                    out = subprocess.run(["nm", "-S", "-n", "--defined-only", *dynamic, path],
                                         capture_output=True, text=True).stdout
                except OSError:
                    out = ""
                for line in out.splitlines():
                    p = line.split()
                    if len(p) == 4 and p[2] in "tTwW":
                        rows.append((int(p[0], 16), int(p[1], 16), p[3]))
                if rows:
                    break
            rows.sort()
            self.tables[path] = ([r[0] for r in rows], rows)
        return self.tables[path]

    def relative(self, path: str, address: int) -> int:
        # A position-independent object's symbols are offsets from its load address; an
        # executable linked at a fixed address (ELF type 2) names absolute addresses.
        if path not in self.fixed:
            with open(path, "rb") as f:
                header = f.read(18)
            self.fixed[path] = len(header) == 18 and int.from_bytes(header[16:18], "little") == 2
        return address if self.fixed[path] else address - self.load_base[path]

    def name(self, address: int):
        i = bisect.bisect_right(self.starts, address) - 1
        if i < 0 or address >= self.maps[i][1] or not self.maps[i][2].startswith("/"):
            return "?", "?", None, 0
        path = self.maps[i][2]
        offset = self.relative(path, address)
        addresses, rows = self.table(path)
        j = bisect.bisect_right(addresses, offset) - 1
        if j >= 0 and offset < rows[j][0] + max(rows[j][1], 1):
            return path, rows[j][2], rows[j], offset
        return path, "?", None, offset


def annotate(out, symbols: Symbols, path, row, counts, total):
    """Disassembly of one function with the samples of each instruction in front."""
    start, size, _ = row
    hot = sorted(a for a, c in counts.items() if c >= 0.002 * total)
    # Large functions (the interpreter's loop): only the neighbourhood of hot instructions.
    spans = [(start, start + size)] if size <= 4096 else [(max(start, a - 64), a + 24) for a in hot]
    merged = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    for lo, hi in merged:
        text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={lo:#x}",
                               f"--stop-address={hi:#x}", path],
                              capture_output=True, text=True).stdout
        out.write(f"  ---- {lo:x}..{hi:x}\n")
        for line in text.splitlines():
            try:
                address = int(line.strip().split(":", 1)[0], 16)
            except ValueError:
                continue
            c = counts.get(address, 0)
            out.write(f"{c:7d} {line}\n" if c else f"        {line}\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--object", default="numpy")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--cpu", type=int, default=None, help="pin to this CPU")
    parser.add_argument("--annotate", default=None, help="write annotated disassembly here")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    from interop_core import view

    obj = make_object(args.object)
    view(obj)

    def loop(n):
        v, o = view, obj
        for _ in range(n):
            v(o); v(o); v(o); v(o); v(o); v(o); v(o); v(o); v(o); v(o)  # noqa: E702

    loop(10_000)
    best = min(_timed(loop) for _ in range(7))       # ns per view, unsampled
    sampler = load_sampler()
    if sampler.sampler_start(int(args.seconds * 1e9 / PERIOD_NS) + 1000, PERIOD_NS) != 0:
        raise SystemExit("could not start the sampling timer")
    t0, views = time.perf_counter(), 0
    while time.perf_counter() - t0 < args.seconds:
        loop(20_000)
        views += 200_000
    n = sampler.sampler_stop()
    raw = sampler.sampler_samples()
    symbols = Symbols()
    by_object, by_function = collections.Counter(), collections.Counter()
    by_instruction = collections.defaultdict(collections.Counter)
    rows = {}
    for i in range(n):
        path, function, row, offset = symbols.name(raw[i])
        key = f"{os.path.basename(path)}:{function}"
        by_object[os.path.basename(path)] += 1
        by_function[key] += 1
        if row is not None:
            by_instruction[key][offset] += 1
            rows[key] = (path, row)
    if n == 0:
        raise SystemExit("no samples taken")
    print(f"view({args.object}): {best:.1f} ns per view unsampled; {n} samples over {views} views")
    print("-- by shared object (ns per view, samples)")
    for key, c in by_object.most_common(12):
        print(f"  {c / n * best:8.2f} {c:8d}  {key}")
    print("-- by function (ns per view, samples)")
    for key, c in by_function.most_common(30):
        print(f"  {c / n * best:8.2f} {c:8d}  {key[:140]}")
    if args.annotate:
        with open(args.annotate, "w") as out:
            for key, c in by_function.most_common(14):
                if key in rows:
                    out.write(f"== {key}: {c} samples, {c / n * best:.2f} ns per view\n")
                    annotate(out, symbols, *rows[key], by_instruction[key], n)
    return 0


def _timed(loop) -> float:
    t = time.perf_counter()
    loop(20_000)
    return (time.perf_counter() - t) / 200_000 * 1e9


if __name__ == "__main__":
    sys.exit(main())
