"""view() and to() of cupy and numba device arrays against their own protocols (GPU machine).

Run with ``PYTHONPATH=$PWD:$PWD/plugins python3 benchmarks/bench_cupy_numba.py``; prints the
reader modes the plugins chose and ns per call (best of several batches).
"""

from __future__ import annotations

import time


def best_ns(fn, batches=30, calls=2000):
    """Best batch average of ``fn()`` in ns."""
    best = float("inf")
    for _ in range(batches):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / calls)
    return best


def main():
    import cupy
    from numba import cuda

    import interop_core
    from interop_core import _cupy_reader, _numba_reader
    from interop_core._view import StridedMemoryView

    rows = []
    a = cupy.arange(24, dtype=cupy.float32).reshape(4, 6)
    interop_core.view(a)
    print("cupy reader mode:", _cupy_reader.mode(), _cupy_reader.failure())
    print("cupy exchange api:", hasattr(type(a), "__dlpack_c_exchange_api__"))
    rows.append(("view(cupy)", best_ns(lambda: interop_core.view(a))))
    rows.append(("cupy __cuda_array_interface__", best_ns(lambda: a.__cuda_array_interface__)))
    rows.append(("StridedMemoryView.from_cuda_array_interface(cupy)",
                 best_ns(lambda: StridedMemoryView.from_cuda_array_interface(a))))
    rows.append(("view(cupy) via dlpack", best_ns(lambda: StridedMemoryView.from_dlpack(a))))
    s = cupy.cuda.Stream()
    rows.append(("view(cupy, stream=cupy Stream)", best_ns(lambda: interop_core.view(a, s))))
    v = interop_core.view(a)
    import interop_cupy
    for path in ("memory", "dlpack"):
        interop_cupy.EXPORT_PATH = path
        rows.append((f"export cupy ({path})", best_ns(lambda: interop_cupy.export_cupy(v),
                                                      batches=10, calls=500)))
    interop_cupy.EXPORT_PATH = "memory"
    rows.append(("to(cupy, 'cupy')", best_ns(lambda: interop_core.to(a, "cupy"), 10, 500)))
    rows.append(("cupy.from_dlpack(cupy)", best_ns(lambda: cupy.from_dlpack(a), 10, 500)))

    d = cuda.to_device(a.get())
    print("numba type:", type(d).__module__, type(d).__qualname__)
    print("numba gpu_data:", type(d.gpu_data), type(d.device_ctypes_pointer),
          type(d[1:].gpu_data))
    print("numba stream type:", type(cuda.stream()).__module__)
    interop_core.view(d)
    print("numba reader mode:", _numba_reader.mode(), _numba_reader.failure())
    print("numba reader entry:", interop_core.plugins.reader_for(type(d)))
    rows.append(("view(numba)", best_ns(lambda: interop_core.view(d))))
    rows.append(("numba __cuda_array_interface__", best_ns(lambda: d.__cuda_array_interface__)))
    rows.append(("StridedMemoryView.from_cuda_array_interface(numba)",
                 best_ns(lambda: StridedMemoryView.from_cuda_array_interface(d))))
    ds = d[1:, ::2]
    rows.append(("view(numba sliced)", best_ns(lambda: interop_core.view(ds))))
    rows.append(("to(cupy, 'numba')", best_ns(lambda: interop_core.to(a, "numba"), 10, 500)))
    rows.append(("to(numba, 'cupy')", best_ns(lambda: interop_core.to(d, "cupy"), 10, 500)))
    for name, ns in rows:
        print(f"{name:55s} {ns:10.0f} ns")


if __name__ == "__main__":
    main()
