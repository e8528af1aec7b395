"""``to(x, "numpy")`` against ``np.asarray(x)`` for jax CPU arrays each handed over once.

The bench's ``to`` section hands the same array over again and again (the reader's per-array
cache answers); a program that hands each new jitted output to numpy meets every array once.
Then the reader reads every accessor and, the array being host memory, asks jax whether it is
computed (``is_ready()``) before handing it over, as ``np.asarray`` (jaxlib's buffer protocol)
waits too.  Each round makes fresh, computed arrays and times both sides on halves of them, in
alternating order; the ratio is the median of the rounds' ours / np.asarray.

    python benchmarks/jax_first_reads.py [--arrays 2048] [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time


def _per_call_ns(fn, arrays) -> float:
    start = time.perf_counter()
    for x in arrays:
        fn(x)
    return (time.perf_counter() - start) / len(arrays) * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrays", type=int, default=2048, help="fresh arrays per round")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    import warnings

    import jax.numpy as jnp
    import numpy as np

    import interop_core

    warnings.simplefilter("ignore", interop_core.plugins.ReadOnlyHandoffWarning)
    interop_core.to(jnp.zeros(1), "numpy")          # the reader's validation, before timing

    def to_numpy(x):
        return interop_core.to(x, "numpy")

    ours, theirs = [], []
    half = args.arrays // 2
    for r in range(args.rounds):
        fresh = [jnp.full((4, 4), r, jnp.float32) + i for i in range(args.arrays)]
        for x in fresh:
            x.block_until_ready()
        if r % 2:
            o = _per_call_ns(to_numpy, fresh[:half])
            t = _per_call_ns(np.asarray, fresh[half:])
        else:
            t = _per_call_ns(np.asarray, fresh[:half])
            o = _per_call_ns(to_numpy, fresh[half:])
        ours.append(o)
        theirs.append(t)
    ratio = statistics.median([o / t for o, t in zip(ours, theirs, strict=True)])
    print(f"jax cpu arrays each handed over once ({args.rounds} rounds of {args.arrays}): "
          f"to(x, 'numpy') {statistics.median(ours):.0f} ns, np.asarray {statistics.median(theirs):.0f}"
          f" ns, ours / np.asarray {ratio:.2f}")


if __name__ == "__main__":
    main()
