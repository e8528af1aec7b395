"""scripts/sanitizers/attribute.py: sanitizer reports sorted into this project's and the
frameworks' own (the verdict scripts/sanitize.sh and scripts/gpu_check.sh memcheck fail on)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "sanitizers" / "attribute.py"


@pytest.fixture(scope="module")
def attribute():
    spec = importlib.util.spec_from_file_location("attribute", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["attribute"] = module       # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    del sys.modules["attribute"]


SITE = "/home/u/interop_core/.venv/lib/python3.11/site-packages"

ASAN_OURS = """\
=================================================================
==4242==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x60f0001b80a0 at pc 0x7f26 bp 0x7ffc sp 0x7ffc
READ of size 8 at 0x60f0001b80a0 thread T0
    #0 0x7f2633922726 in __pyx_f_13interop_torch_7_reader__word plugins/interop_torch/_reader.c:16350
    #1 0x7f26339b83e2 in __pyx_f_13interop_torch_7_reader__find_keyset plugins/interop_torch/_reader.c:17162
    #2 0x7f263eba75a1 in cfunction_vectorcall_NOARGS Objects/methodobject.c:486

0x60f0001b80a0 is located 0 bytes to the right of 176-byte region [0x60f0001b7ff0,0x60f0001b80a0)
allocated by thread T0 here:
    #0 0x7f263f8b94c8 in operator new(unsigned long) ../../../../src/libsanitizer/asan/asan_new_delete.cpp:95
    #1 0x7f261e8db0f1 in at::TensorBase at::detail::make_tensor_base ({site}/torch/lib/libtorch_cpu.so+0x18db0f1)

SUMMARY: AddressSanitizer: heap-buffer-overflow plugins/interop_torch/_reader.c:16350 in __pyx_f_13interop_torch_7_reader__word
""".replace("{site}", SITE)

ASAN_TORCH = """\
==777==ERROR: AddressSanitizer: heap-use-after-free on address 0x6020 at pc 0x7f00 bp 0x7ffc sp 0x7ffc
READ of size 4 at 0x6020 thread T3
    #0 0x7f00 in __interceptor_memcpy ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:827
    #1 0x7f01 in c10::impl::something ({site}/torch/lib/libc10.so+0x1234)
    #2 0x7f02 in _PyEval_EvalFrameDefault Python/ceval.c:4769

freed by thread T3 here:
    #0 0x7f03 in free ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:52
    #1 0x7f04 in __pyx_f_12interop_core_4core_5_view_dealloc interop_core/core/_view.c:100

SUMMARY: AddressSanitizer: heap-use-after-free
""".replace("{site}", SITE)

UBSAN_OURS = """\
interop_core/core/_layout.c:5120:31: runtime error: signed integer overflow: 4611686018427387904 * 4 cannot be represented in type 'long int'
    #0 0x7f11 in __pyx_f_12interop_core_4core_7_layout_volume interop_core/core/_layout.c:5120
    #1 0x7f12 in _PyEval_EvalFrameDefault Python/ceval.c:4769

SUMMARY: UndefinedBehaviorSanitizer: undefined-behavior interop_core/core/_layout.c:5120:31 in
"""

LEAKS = """\
==99==ERROR: LeakSanitizer: detected memory leaks

Direct leak of 48 byte(s) in 1 object(s) allocated from:
    #0 0x7f20 in malloc ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:69
    #1 0x7f21 in __pyx_f_12interop_core_6shards_7_shards_make_plan interop_core/shards/_shards.c:900
    #2 0x7f22 in _PyEval_EvalFrameDefault Python/ceval.c:4769

Direct leak of 64 byte(s) in 2 object(s) allocated from:
    #0 0x7f20 in malloc ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:69
    #1 0x7f23 in _PyObject_Malloc Objects/obmalloc.c:1966
    #2 0x7f24 in PyType_GenericAlloc Objects/typeobject.c:1310
    #3 0x7f25 in dict_new Objects/dictobject.c:3400

Direct leak of 56 byte(s) in 1 object(s) allocated from:
    #0 0x7f20 in malloc ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:69
    #1 0x7f26 in gc_alloc Modules/gcmodule.c:2283
    #2 0x7f27 in PyTuple_Pack Objects/tupleobject.c:166
    #3 0x7f28 in init_string_ufuncs ({site}/numpy/_core/_multiarray_umath.so+0x2f8915)
    #4 0x7f29 in PyModule_ExecDef Objects/moduleobject.c:419

SUMMARY: AddressSanitizer: 168 byte(s) leaked in 4 allocation(s).
""".replace("{site}", SITE)

# compute-sanitizer of CUDA 12.4+: one line per host frame.
MEMCHECK_JAX = """\
========= COMPUTE-SANITIZER
========= Program hit CUDA_ERROR_INVALID_HANDLE (error 400) due to "invalid resource handle" on CUDA API call to cuStreamWaitEvent.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: cuStreamWaitEvent [0x2a1c3] in /usr/lib/x86_64-linux-gnu/libcuda.so.1
=========         Host Frame: stream_executor::gpu::CudaExecutor::WaitForEventOnExternalStream(long, stream_executor::Event*) [0x5e1f0a] in {site}/jax_plugins/xla_cuda12/xla_cuda_plugin.so
=========         Host Frame: xla::BufferToDLPackManagedTensor(nanobind::handle, std::optional<long>) [0x18ab2] in {site}/jaxlib/_jax.so
=========         Host Frame: _PyEval_EvalFrameDefault [0x1f2c1] in /usr/bin/python3.12
=========         Host Frame: [0x3c51] in /work/repo/interop_core/protocols/_dlpack.cpython-312-x86_64-linux-gnu.so
=========         Host Frame: [0x9a11] in /work/repo/interop_core/registry/_registry.cpython-312-x86_64-linux-gnu.so
=========
========= ERROR SUMMARY: 1 error
""".replace("{site}", SITE)

# Older releases: the module on a line of its own; a framework's error with no frame of ours.
MEMCHECK_TORCH_OLD = """\
========= COMPUTE-SANITIZER
========= Program hit cudaErrorInvalidValue (error 1) due to "invalid argument" on CUDA API call to cudaFuncSetAttribute.
=========     Saved host backtrace up to driver entry point at error
=========     Host Frame: [0x480aa6]
=========                in /usr/lib64/libcuda.so.1
=========     Host Frame:cudaFuncSetAttribute [0x54d01]
=========                in {site}/torch/lib/libcudart-1a2b.so.12
=========     Host Frame:at::native::launch_kernel [0xceb78a]
=========                in {site}/torch/lib/libtorch_cuda.so
=========
========= ERROR SUMMARY: 1 error
""".replace("{site}", SITE)

MEMCHECK_KERNEL = """\
========= Invalid __global__ write of size 4 bytes
=========     at ic_copy_rows_w4+0x1f0
=========     by thread (3,0,0) in block (0,0,0)
=========     Address 0x7f4c00000400 is out of bounds
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: cuLaunchKernel [0x2c4f1] in /usr/lib/x86_64-linux-gnu/libcuda.so.1
=========         Host Frame: [0x51c2] in /work/repo/interop_core/cuda/_module.cpython-312-x86_64-linux-gnu.so
=========
"""


def _owners(attribute, text):
    return [(r.tool, r.owner) for r in attribute.parse(text)]


def test_asan_report_in_our_reader_is_ours(attribute):
    [report] = attribute.parse(ASAN_OURS)
    assert (report.tool, report.owner, report.headline) == ("asan", "ours", "heap-buffer-overflow")
    # Only the faulting stack counts, not where the memory was allocated.
    assert all("make_tensor_base" not in frame for frame in report.frames)


def test_asan_report_in_torch_is_torchs_even_when_we_freed_the_memory(attribute):
    # The first stack (the access) decides; the interceptor frame is skipped.
    assert _owners(attribute, ASAN_TORCH) == [("asan", "torch")]


def test_ubsan_runtime_error_in_our_module_is_ours(attribute):
    [report] = attribute.parse(UBSAN_OURS)
    assert (report.tool, report.owner) == ("ubsan", "ours")
    assert report.headline.startswith("signed integer overflow")


def test_leaks_belong_to_the_extension_that_called_cpythons_allocators(attribute):
    assert _owners(attribute, LEAKS) == [("leak", "ours"), ("leak", "python"), ("leak", "numpy")]


def test_driver_error_from_jax_called_by_us_is_ours_inside_jax(attribute):
    [report] = attribute.parse(MEMCHECK_JAX)
    assert report.tool == "compute-sanitizer"
    assert report.owner == "ours (inside jax)"
    assert "cuStreamWaitEvent" in report.headline


MEMCHECK_PARAM_PROBE = """\
========= COMPUTE-SANITIZER
========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to "invalid argument" on CUDA API call to cuFuncGetParamInfo.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: __pyx_f_12interop_core_4cuda_7_module_function_param_sizes in _module.c:7033 [0x133cf] in _module.cpython-312-x86_64-linux-gnu.so
=========         Host Frame: __pyx_pw_12interop_core_4cuda_7_module_7_function_param_sizes in _module.c:17332 [0x16136] in _module.cpython-312-x86_64-linux-gnu.so
=========
"""


def test_the_parameter_count_probe_past_the_last_parameter_is_expected(attribute):
    [report] = attribute.parse(MEMCHECK_PARAM_PROBE)
    assert report.owner == "expected" and not report.is_ours
    other_call = MEMCHECK_PARAM_PROBE.replace("cuFuncGetParamInfo", "cuLaunchKernel")
    assert attribute.parse(other_call)[0].owner == "ours"


def test_old_compute_sanitizer_layout_and_a_frameworks_own_error(attribute):
    [report] = attribute.parse(MEMCHECK_TORCH_OLD)
    assert report.owner == "torch"
    assert any("libtorch_cuda.so" in frame for frame in report.frames)


def test_device_error_in_our_copy_kernel_is_ours(attribute):
    assert _owners(attribute, MEMCHECK_KERNEL) == [("compute-sanitizer", "ours")]


def test_a_framework_inside_a_checkout_named_like_the_project_is_not_ours(attribute):
    frame = f"#1 0x7f01 in foo ({SITE}/numpy/_core/_multiarray_umath.so+0x10)"
    assert attribute.owner_of_frame(frame) == "numpy"
    assert attribute.owner_of_frame(f"#1 0x7f in bar ({SITE}/interop_core/core/_view.so+0x1)") \
        == "ours"


@pytest.mark.parametrize("logs, status, summary", [
    ([ASAN_TORCH, MEMCHECK_TORCH_OLD], 0, "0 ours, 2 the frameworks' own"),
    ([ASAN_OURS, ASAN_OURS, ASAN_TORCH], 1, "3 (2 distinct): 1 ours, 1 the frameworks' own"),
    ([], 0, "sanitizer reports: 0 (0 distinct)"),
], ids=["frameworks-only", "ours-twice", "no-logs"])
def test_exit_status_fails_only_on_our_reports(tmp_path, logs, status, summary):
    paths = []
    for number, text in enumerate(logs):
        paths.append(tmp_path / f"asan.{100 + number}")
        paths[-1].write_text(text)
    run = subprocess.run([sys.executable, str(SCRIPT), *map(str, paths),
                          str(tmp_path / "missing.log")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == status, run.stdout + run.stderr
    assert summary in run.stdout.splitlines()[0]
