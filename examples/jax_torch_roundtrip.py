"""A jax array into torch and back, zero-copy, on the CPU.

Shows ``interop_core.to(x, "torch")`` giving a torch tensor over a jax array's own memory (same
pointer), and ``interop_core.to(t, "jax")`` handing that memory back to jax. jax arrays are
immutable, so their views are read-only; torch has no read-only tensors, so the handoff warns
with ``ReadOnlyHandoffWarning`` (see docs/handoff.md). jax is pinned to the CPU device, so the
script behaves the same on a machine with a GPU.

Run: python examples/jax_torch_roundtrip.py    (needs jax and torch; CPU only)
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import torch

import interop_core
from interop_core.plugins import ReadOnlyHandoffWarning


def main() -> None:
    with jax.default_device(jax.devices("cpu")[0]):
        x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    x_ptr = x.unsafe_buffer_pointer()
    print("jax array on", x.devices(), "ptr", hex(x_ptr))
    print("its view is read-only (jax arrays are immutable):", interop_core.view(x).readonly)

    # torch cannot mark a tensor read-only, so to() hands the memory over writable and warns.
    # We expect that here: record the warning explicitly instead of letting it print.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ReadOnlyHandoffWarning)
        t = interop_core.to(x, "torch")
    assert any(issubclass(w.category, ReadOnlyHandoffWarning) for w in caught)
    print("warned:", next(w.category.__name__ for w in caught
                          if issubclass(w.category, ReadOnlyHandoffWarning)))

    print("torch tensor ptr", hex(t.data_ptr()), "same memory:", t.data_ptr() == x_ptr)
    assert t.data_ptr() == x_ptr
    assert torch.equal(t, torch.arange(12, dtype=torch.float32).reshape(3, 4))
    print("torch sees jax's values:\n", t)

    # Back to jax: jax.dlpack.from_dlpack over the same memory, no copy.
    y = interop_core.to(t, "jax")
    print("back in jax, ptr", hex(y.unsafe_buffer_pointer()),
          "same memory:", y.unsafe_buffer_pointer() == x_ptr)
    assert y.unsafe_buffer_pointer() == x_ptr
    assert bool((y == x).all())
    print("jax sees the same values:", bool((y == x).all()))


if __name__ == "__main__":
    main()
