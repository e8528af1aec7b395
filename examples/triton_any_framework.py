"""One ``@triton.jit`` kernel on torch, cupy, jax and numba arrays, with Triton's call syntax.

``interop_core.triton_kernel(kernel)`` wraps the kernel; ``fast[grid](x, y, out, n, alpha,
BLOCK=1024)`` then takes arrays of any framework (Triton's own launch takes torch tensors only).
The first call is compiled by Triton itself; every later call with the same specialisation is
``launch_args`` plus one ``cuLaunchKernel`` on the compiled kernel.  The example runs the kernel
on each framework's arrays, checks the result against Triton's own launch on torch copies of the
same data, and shows that all four frameworks share one compiled kernel (Triton specialises on
dtype, alignment and integer values, never on the framework).

Run: python examples/triton_any_framework.py   (needs a CUDA GPU, torch and Triton; cupy, jax and
numba where installed; prints ``skipped: ...`` and exits 0 elsewhere)
"""

from __future__ import annotations

import sys

import numpy as np

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None

if triton is not None:
    @triton.jit
    def scale_add(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, alpha * x + y, mask=mask)


def frameworks(torch):
    """name -> (make an array from numpy, make a writable float32 output, read back to numpy)."""
    found = {"torch": (lambda a: torch.from_numpy(a).cuda(),
                       lambda n: torch.zeros(n, device="cuda"),
                       lambda a: a.cpu().numpy())}
    try:
        import cupy

        found["cupy"] = (cupy.asarray, lambda n: cupy.zeros(n, np.float32), cupy.asnumpy)
    except ImportError:
        pass
    try:
        import jax

        gpu = jax.devices("gpu")[0]
        # jax arrays are read-only: the output is a torch tensor.
        found["jax"] = (lambda a: jax.device_put(a, gpu), lambda n: torch.zeros(n, device="cuda"),
                        lambda a: a.cpu().numpy())
    except Exception:
        pass
    try:
        from numba import cuda

        if cuda.is_available():
            found["numba"] = (cuda.to_device, lambda n: cuda.device_array(n, np.float32),
                              lambda a: a.copy_to_host())
    except ImportError:
        pass
    return found


def main() -> int:
    if triton is None:
        print("skipped: needs Triton (pip install triton)")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("skipped: needs a CUDA GPU")
        return 0
    import interop_core
    from interop_core.launch import _triton

    fast = interop_core.triton_kernel(scale_add, writable=("out_ptr",))
    n = 100_000
    x_host = np.linspace(-1, 1, n, dtype=np.float32)
    y_host = np.full(n, 0.5, dtype=np.float32)
    grid = (triton.cdiv(n, 1024),)

    expected = torch.zeros(n, device="cuda")
    scale_add[grid](torch.from_numpy(x_host).cuda(), torch.from_numpy(y_host).cuda(), expected,
                    n, 2.0, BLOCK=1024)
    expected = expected.cpu().numpy()

    for name, (make, output, back) in frameworks(torch).items():
        x, y, out = make(x_host), make(y_host), output(n)
        fast[grid](x, y, out, n, 2.0, BLOCK=1024)
        torch.cuda.synchronize()
        result = back(out)
        assert np.array_equal(result, expected), name
        print(f"{name:>5}: out = 2 * x + y on {type(x).__module__}.{type(x).__name__} arrays: "
              "equal to Triton's own launch on torch")
    print(f"{fast.cache_size} compiled kernel for every framework (Triton specialises on dtype, "
          "alignment and integer values, not on the framework)")
    assert fast.cache_size == 1
    print("Triton wrapper:", _triton.status()["reason"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
