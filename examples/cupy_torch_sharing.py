"""cupy and torch sharing CUDA memory both ways, ordered on streams, zero-copy.

Shows ``interop_core.to(t, "cupy", stream=s)`` and ``interop_core.to(c, "torch", stream=s)``:
the result has the same device pointer as the source, writes made through either framework are
seen by the other, and passing the consumer's stream makes it wait (on the GPU, without blocking
the host) for the producer stream's pending writes before the consumer touches the memory
(docs/streams.md). The producer stream is the framework's current stream when ``to()`` is
called, so each handoff is made inside the producer's stream context.

Run: python examples/cupy_torch_sharing.py    (needs a CUDA GPU, torch and cupy; prints
"skipped: needs a CUDA GPU" and exits 0 elsewhere)
"""

from __future__ import annotations

import sys

import torch

import interop_core


def gpu_ready() -> bool:
    if not torch.cuda.is_available():
        return False
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # cupy missing, or no usable driver
        return False


def main() -> int:
    if not gpu_ready():
        print("skipped: needs a CUDA GPU (with torch and cupy)")
        return 0
    import cupy

    n = 1 << 22
    # torch -> cupy: torch produces on its stream, cupy consumes on another.
    torch_stream = torch.cuda.Stream()
    cupy_stream = cupy.cuda.Stream(non_blocking=True)
    with torch.cuda.stream(torch_stream):
        t = torch.arange(n, dtype=torch.float32, device="cuda")
        t.mul_(2)                                     # pending work on torch_stream
        c = interop_core.to(t, "cupy", stream=cupy_stream)   # cupy_stream waits for it
    print("torch -> cupy: ptr", hex(t.data_ptr()), hex(c.data.ptr),
          "same:", c.data.ptr == t.data_ptr())
    assert c.data.ptr == t.data_ptr() and c.shape == tuple(t.shape)
    with cupy_stream:
        c += 1                                        # cupy writes into torch's memory
    cupy_stream.synchronize()
    print("torch sees cupy's write:", t[:4].tolist())
    assert t[:4].tolist() == [1.0, 3.0, 5.0, 7.0]

    # cupy -> torch: cupy produces on its stream, torch consumes on another.
    consumer = torch.cuda.Stream()
    with cupy_stream:
        c2 = cupy.full((1024, 1024), 3.0, dtype=cupy.float32)
        c2 *= 2                                       # pending work on cupy_stream
        t2 = interop_core.to(c2, "torch", stream=consumer)   # consumer waits for it
    print("cupy -> torch: ptr", hex(c2.data.ptr), hex(t2.data_ptr()),
          "same:", t2.data_ptr() == c2.data.ptr)
    assert t2.data_ptr() == c2.data.ptr and tuple(t2.shape) == c2.shape
    with torch.cuda.stream(consumer):
        t2[0, :3] = torch.tensor([-1.0, -2.0, -3.0], device="cuda")   # torch writes
        total = float(t2.sum())                       # and reads cupy's 6.0s
    consumer.synchronize()
    print("torch summed cupy's values:", total, "; cupy sees torch's write:", c2[0, :4].tolist())
    assert c2[0, :4].tolist() == [-1.0, -2.0, -3.0, 6.0]
    assert total == 6.0 * (1024 * 1024 - 3) - 6.0
    return 0


if __name__ == "__main__":
    sys.exit(main())
