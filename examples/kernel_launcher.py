"""A kernel launcher built on ``interop_core.launch_args``, taking tensors from any framework.

``AxpyLauncher`` computes ``out = a * x + y`` (float32).  On every call it makes one
``launch_args`` record of its arguments, looks its compiled kernel up by the record's ``.key``
(compiling on a miss: a new dtype, shape, layout or device) and launches it with the record's
pointer array:

- on a CUDA GPU: the PTX kernel in ``axpy.ptx`` (written for this project), loaded with
  ``interop_core.load_module`` and launched with ``Kernel.launch(grid, block, record)``: one
  compiled call that checks the record against the kernel's declared signature and device and
  calls ``cuLaunchKernel`` on ``record.stream``, after every producer's stream was ordered
  before it; inputs from torch, cupy, jax and numba;
- on the CPU: the same kernel in C (``axpy.c``), built with the system's C compiler and called
  through ctypes with ``record.address`` (one ``void*`` per argument); inputs from numpy, torch
  and jax.

``@interop_core.viewable(..., launch="record")`` does the same from a decorator; its view mode
hands the function ``StridedMemoryView`` objects instead.

Run: python examples/kernel_launcher.py   (CPU: numpy, torch, jax and a C compiler; GPU parts
run where a CUDA device and the frameworks are present)
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from interop_core import launch_args, load_module
from interop_core.cuda import _cuda

HERE = Path(__file__).resolve().parent
KDLCPU, KDLCUDA = 1, 2
FLOAT32 = (2, 32, 1)
# out, x, y are tensors; a is stored as a C float, n as int64 (axpy.c / axpy.ptx's signature).
SCALAR_TYPES = (None, None, None, "float32", "int64")
AXPY_SIGNATURE = ("pointer", "pointer", "pointer", "float32", "int64")


def build_c_kernels(folder: Path) -> ctypes.CDLL | None:
    """Compile ``axpy.c`` with the system's C compiler; None when there is none."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    library = folder / "libaxpy.so"
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(library),
                    str(HERE / "axpy.c")], check=True)
    lib = ctypes.CDLL(str(library))
    for name in ("axpy_pointers", "axpy_params"):
        getattr(lib, name).argtypes = [ctypes.c_void_p]
        getattr(lib, name).restype = None
    return lib


class AxpyLauncher:
    """``launcher(out, x, y, a, n, stream=None)``: ``out[:n] = a * x[:n] + y[:n]``.

    Compiled kernels are cached by the arguments' static key (dtype, shape, strides, device,
    read-only flag of every tensor, C type of every scalar): what a kernel was checked for once
    holds for every later call with an equal key.
    """

    def __init__(self, c_library: ctypes.CDLL | None = None):
        self.c_library = c_library
        self.kernels: dict = {}      # LaunchKey -> (launch function, elements every tensor has)
        self.compiled = 0

    def __call__(self, out, x, y, a, n, stream=None):
        record = launch_args((out, x, y, a, n), stream, writable=(0,), same_device=True,
                             scalar_types=SCALAR_TYPES)
        entry = self.kernels.get(record.key)
        if entry is None:
            entry = self.kernels[record.key] = self._compile(record)
        run, limit = entry
        if not 0 <= n <= limit:
            raise ValueError(f"n={n} but the tensors have {limit} elements")
        run(record, n)
        return out

    def _compile(self, record):
        # Once per key: the views say what the kernel can assume (read lazily, only here).
        views = record.views[:3]
        for name, v in zip(("out", "x", "y"), views, strict=True):
            if v.dlpack_dtype != FLOAT32 or not v.layout.is_contiguous_c:
                raise TypeError(f"axpy: {name} must be a contiguous float32 tensor")
        limit = min(v.size for v in views)
        self.compiled += 1
        device = views[0]
        if device.device_type == KDLCUDA:
            kernel = load_module(HERE / "axpy.ptx", device.device_id).kernel("axpy_f32",
                                                                              AXPY_SIGNATURE)

            def run(record, n):
                if record.stream is None:
                    # Without a stream the legacy default stream (0) runs it.
                    record = launch_args(record.args, 0, scalar_types=SCALAR_TYPES)
                kernel.launch(max((n + 255) // 256, 1), 256, record)

            return run, limit
        if device.device_type != KDLCPU or self.c_library is None:
            raise TypeError("axpy: no kernel for this device here")
        function = self.c_library.axpy_pointers

        def run(record, n):
            function(record.address)

        return run, limit


def cpu_demo(launcher: AxpyLauncher) -> None:
    import jax
    import jax.numpy as jnp
    import torch

    n = 10
    x = np.arange(n, dtype=np.float32)
    with jax.default_device(jax.devices("cpu")[0]):
        y = jnp.full(n, 0.5, dtype=jnp.float32)       # read-only input: fine
    out = torch.zeros(n)
    launcher(out, x, y, 2.0, n)
    print("CPU: out (torch) = 2 * x (numpy) + y (jax):", out.tolist())
    assert torch.equal(out, torch.from_numpy(2.0 * x + 0.5))
    out2 = np.zeros(n, dtype=np.float32)
    # Another framework in each slot, same layouts (y: numpy over jax's read-only memory).
    launcher(out2, torch.from_numpy(x), np.asarray(y), -1.0, n)
    assert np.array_equal(out2, -x + 0.5)
    print(f"CPU: 2 launches, {launcher.compiled} kernel(s) compiled (equal keys share one)")
    assert launcher.compiled == 1

    record = launch_args((out, x, y, 2.0, n), scalar_types=SCALAR_TYPES)
    print("record:", record)
    print("  key:", record.key, "- the same for torch, numpy or jax arguments of equal layout")
    print("  pointers (data pointers, scalar value addresses):",
          [hex(p) for p in record.pointers])
    print("  kernel_params (a pointer to each value):", [hex(p) for p in record.kernel_params])

    try:
        launcher(y, x, x, 1.0, n)
    except BufferError as exc:
        print("a read-only out is refused:", exc)


def gpu_demo() -> None:
    import torch

    if not torch.cuda.is_available():
        print("GPU: skipped (torch has no CUDA here)")
        return
    launcher = AxpyLauncher()
    n = 1 << 16
    stream = torch.cuda.Stream()
    inputs = {"torch": lambda a: torch.from_numpy(a).cuda()}
    try:
        import cupy

        inputs["cupy"] = cupy.asarray
    except ImportError:
        pass
    try:
        import jax

        gpu = jax.devices("gpu")[0]
        inputs["jax"] = lambda a: jax.device_put(a, gpu)
    except Exception:
        pass
    try:
        from numba import cuda

        inputs["numba"] = cuda.to_device
    except Exception:
        pass
    x = np.linspace(0, 1, n, dtype=np.float32)
    y = np.full(n, 3.0, dtype=np.float32)
    for name, make in inputs.items():
        out = torch.zeros(n, device="cuda")
        launcher(out, make(x), make(y), 2.0, n, stream=stream)
        stream.synchronize()
        assert torch.allclose(out.cpu(), torch.from_numpy(2.0 * x + y)), name
        print(f"GPU: axpy over {name} inputs on a torch stream: ok")
    # Equal keys across torch, cupy and numba; jax arrays are read-only, and the read-only flag
    # is part of a static key: a kernel of their own.
    expected = 1 + ("jax" in inputs)
    print(f"GPU: {len(inputs)} launches, {launcher.compiled} kernels compiled (one per key: "
          "torch, cupy and numba inputs share one; read-only jax inputs have their own)")
    assert launcher.compiled == expected


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        lib = build_c_kernels(Path(folder))
        if lib is None:
            print("CPU: skipped (no C compiler, cc or gcc, to build axpy.c)")
        else:
            cpu_demo(AxpyLauncher(lib))
    if _cuda.device_count() > 0:
        gpu_demo()
    else:
        print("GPU: skipped (no CUDA device)")


if __name__ == "__main__":
    sys.exit(main())
