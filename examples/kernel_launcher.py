"""A kernel launcher that takes tensors from numpy, torch and jax alike.

Shows ``@interop_core.viewable("out", "a", "b", stream="stream")``: the launcher's tensor
arguments arrive as ``StridedMemoryView``s (pointer, shape, strides, dtype, read-only flag)
whatever framework the caller used. The "kernel" here computes ``out = a * b + 1`` with numpy
over the views (``np.asarray(view)``, zero-copy), writing straight into ``out``, a torch tensor.
The jax input arrives read-only: jax arrays are immutable. Host memory needs no stream ordering,
so ``stream=None`` is fine; on a GPU the same ``stream`` argument would order the views.

Run: python examples/kernel_launcher.py    (needs numpy, torch and jax; CPU only)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch

import interop_core


@interop_core.viewable("out", "a", "b", stream="stream")
def launch_fma(out, a, b, *, stream=None):
    """Launch ``out = a * b + 1``: every tensor argument arrives as a view."""
    for name, v in (("out", out), ("a", a), ("b", b)):
        print(f"  {name:>3}: ptr={v.ptr:#x} shape={v.shape} strides={v.strides} "
              f"dtype={v.dtype} readonly={v.readonly}")
    if out.readonly:
        raise ValueError("out must be writable")
    # The "kernel": numpy over the views' memory. np.asarray(view) copies nothing.
    np.multiply(np.asarray(a), np.asarray(b), out=np.asarray(out))
    np.asarray(out)[...] += 1


def main() -> None:
    out = torch.empty(2, 3, dtype=torch.float32)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    with jax.default_device(jax.devices("cpu")[0]):
        b = jnp.full((2, 3), 2.0, dtype=jnp.float32)

    print("launch_fma(out=torch, a=numpy, b=jax)   (strides in elements):")
    print(f"  caller's pointers: out={out.data_ptr():#x} a={a.ctypes.data:#x} "
          f"b={b.unsafe_buffer_pointer():#x}")
    launch_fma(out, a, b)
    print("out, written in place (torch):\n", out)
    assert torch.equal(out, torch.from_numpy(a * 2 + 1))
    assert interop_core.view(out).ptr == out.data_ptr()

    # Any framework in any slot: a transposed torch input, numpy output.
    out2 = np.zeros((3, 2), dtype=np.float32)
    print("launch_fma(out=numpy, a=torch.T, b=numpy):")
    launch_fma(out2, torch.from_numpy(a).T, np.ones((3, 2), dtype=np.float32))
    print("out2:\n", out2)
    assert np.array_equal(out2, a.T + 1)


if __name__ == "__main__":
    main()
