"""A numba CUDA kernel writing into torch tensors, ordered after torch's producer stream.

Shows ``interop_core.to(tensor, "numba", stream=s)`` and ``interop_core.view(tensor, stream=s)``
handing torch CUDA memory to a ``numba.cuda.jit`` kernel without a copy (same device pointer),
with the consumer stream ``s`` (a numba stream wrapping a torch stream) made to wait for the
torch stream that produced the inputs, without blocking the host (docs/streams.md). The kernel
is launched on ``s``; torch then reads the kernel's results on the same stream.

Run: python examples/numba_kernel_on_torch.py    (needs a CUDA GPU, torch and numba-cuda;
prints "skipped: needs a CUDA GPU" and exits 0 elsewhere)
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import interop_core


def load_numba_cuda():
    """numba.cuda when a GPU is usable, else None."""
    if not torch.cuda.is_available():
        return None
    # Compatibility shim: numba-cuda 0.30 refers to np.row_stack when compiling kernels, and
    # numpy 2.5 removed that alias of np.vstack (AttributeError: module 'numpy' has no attribute
    # 'row_stack'). Restore the alias before numba is imported; a no-op on older numpy.
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    try:
        from numba import cuda
        return cuda if cuda.is_available() else None
    except Exception:  # numba missing, or no usable driver
        return None


def main() -> int:
    cuda = load_numba_cuda()
    if cuda is None:
        print("skipped: needs a CUDA GPU (with torch and numba-cuda)")
        return 0

    @cuda.jit
    def axpb(out, x, a, b):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a * x[i] + b

    n = 1 << 20
    producer = torch.cuda.Stream()
    consumer = torch.cuda.Stream()
    stream = cuda.external_stream(consumer.cuda_stream)   # numba's handle on the same stream
    with torch.cuda.stream(producer):
        x = torch.arange(n, dtype=torch.float32, device="cuda").mul_(0.5)  # pending on producer
        out = torch.zeros(n, dtype=torch.float32, device="cuda")
        # Both order `stream` after `producer` (torch's current stream here), then hand over.
        x_view = interop_core.view(x, stream=stream)            # a StridedMemoryView
        out_nb = interop_core.to(out, "numba", stream=stream)   # a numba device array
    x_nb = interop_core.to(x_view, "numba")                     # a view passes through
    print("x:   torch ptr", hex(x.data_ptr()), "view ptr", hex(x_view.ptr),
          "numba ptr", hex(x_nb.device_ctypes_pointer.value))
    print("out: torch ptr", hex(out.data_ptr()),
          "numba ptr", hex(out_nb.device_ctypes_pointer.value))
    assert x_nb.device_ctypes_pointer.value == x.data_ptr() == x_view.ptr
    assert out_nb.device_ctypes_pointer.value == out.data_ptr()

    threads = 256
    axpb[(n + threads - 1) // threads, threads, stream](out_nb, x_nb, 4.0, 1.0)
    with torch.cuda.stream(consumer):                 # torch reads after the kernel, same stream
        first = out[:4].tolist()
        ok = bool(torch.equal(out, x * 4 + 1))
    print("torch sees the kernel's writes:", first, "all correct:", ok)
    assert first == [1.0, 3.0, 5.0, 7.0] and ok
    return 0


if __name__ == "__main__":
    sys.exit(main())
