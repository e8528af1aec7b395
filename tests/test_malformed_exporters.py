"""Objects that describe memory badly, or none at all, are refused before anything reads it.

A buffer exporter may hand out any Py_buffer (tests/odd_buffer.c hands out exactly what it is
given); a view object can be asked for through ``__new__``; a Buffer can be given address 0; an
exchange-API table can chain to itself.  Each was once read as memory (a copy then read address
0, a volume wrapped to -1) or hung: each case runs in a worker process
(tests/_subprocess_pool.py), so a regression fails the case, not the run.
"""

from __future__ import annotations

import copy
import ctypes
import subprocess
import sys
import sysconfig

import numpy as np
import pytest
from _subprocess_pool import SubprocessPool, TaskError, WorkerDied, WorkerTimeout
from fake_driver import compiler

import interop_core
from interop_core import Buffer, StridedLayout, StridedMemoryView

SOURCE = __import__("pathlib").Path(__file__).with_name("odd_buffer.c")


@pytest.fixture(scope="module")
def workers():
    with SubprocessPool(size=1, timeout=60) as pool:
        yield pool


@pytest.fixture(scope="module")
def odd_buffer_folder(tmp_path_factory):
    """tests/odd_buffer.c built as an extension module; the folder to import it from."""
    if compiler() is None:
        pytest.skip("no C compiler (cc / gcc) on this machine to build tests/odd_buffer.c")
    folder = tmp_path_factory.mktemp("odd_buffer")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    subprocess.run([compiler(), "-shared", "-fPIC", "-O1", f"-I{sysconfig.get_paths()['include']}",
                    "-o", str(folder / f"odd_buffer{suffix}"), str(SOURCE)], check=True)
    return str(folder)


def _outcome(function, *args, timeout=None, pool):
    """The worker's answer: ("ok", value) or ("raised", type name, message)."""
    try:
        return ("ok", pool.run(function, *args, timeout=timeout))
    except TaskError as exc:
        return ("raised", exc.type_name, exc.message)
    except (WorkerDied, WorkerTimeout) as exc:
        pytest.fail(f"{function.__name__}{args}: {exc}")


# --- buffer exporters -------------------------------------------------------------------------

ENTRY_POINTS = ("view", "from_any", "from_buffer_protocol")

MALFORMED = {
    "ndim -1": (dict(length=4, itemsize=1, ndim=-1, shape=(4,)), "ndim -1"),
    "ndim 65": (dict(length=4, itemsize=1, ndim=65, shape=(1,) * 65), "ndim 65"),
    "no shape for 2-d": (dict(length=4, itemsize=1, ndim=2), "2-d buffer without a shape"),
    "null address for elements": (dict(buf=0, length=16, itemsize=4, format="i", shape=(4,)),
                                  "null pointer for a non-empty buffer"),
    "volume beyond int64": (dict(length=16, itemsize=1, shape=(2**40, 2**40)), "overflows int64"),
    "strides beyond int64": (dict(length=16, itemsize=1, shape=(3, 2), strides=(2**62, 1)),
                             "outside the int64 range"),
}


def read_odd_buffer(folder, entry, fields):
    sys.path.insert(0, folder)
    import odd_buffer

    fields = dict(fields)
    fields.setdefault("buf", np.zeros(64, np.uint8).ctypes.data)
    exporter = odd_buffer.OddBuffer(**fields)
    read = {"view": interop_core.view, "from_any": StridedMemoryView.from_any,
            "from_buffer_protocol": StridedMemoryView.from_buffer_protocol}[entry]
    v = read(exporter)
    return (v.shape, v.size, v.nbytes)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_buffer_is_refused_naming_the_exporter(workers, odd_buffer_folder, case,
                                                           entry):
    fields, words = MALFORMED[case]
    outcome = _outcome(read_odd_buffer, odd_buffer_folder, entry, fields, pool=workers)
    assert outcome[:2] == ("raised", "ValueError"), outcome
    assert "OddBuffer" in outcome[2] and words in outcome[2], outcome


# --- views no constructor made ----------------------------------------------------------------

def test_a_view_is_never_made_by___new__():
    with pytest.raises(TypeError, match="from_\\* constructors"):
        StridedMemoryView.__new__(StridedMemoryView)
    with pytest.raises(TypeError):
        copy.copy(interop_core.view(np.arange(3.0)))

    class Sub(StridedMemoryView):
        pass

    with pytest.raises(TypeError):
        Sub.__new__(Sub)


def copy_of_an_empty_compat_view():
    from interop_core.compat.cuda_core import StridedMemoryView as CompatView

    return CompatView().__dlpack__(max_version=(1, 0), copy=True)


def test_a_view_that_describes_no_memory_is_never_copied(workers):
    # cuda.core's no-argument StridedMemoryView(): no element type, no address.
    outcome = _outcome(copy_of_an_empty_compat_view, pool=workers)
    assert outcome[:2] == ("raised", "ValueError") and "no element type" in outcome[2], outcome


# --- external memory ---------------------------------------------------------------------------

@pytest.mark.parametrize("ptr, size, device, words", [
    (0, 16, "cpu", "null pointer"),
    (2**64 - 8, 16, "cpu", "past the end of the address space"),
    (4096, 2**63, "cpu", "fit in int64"),
    (4096, 16, "cuda:-1", "not a non-negative integer"),
    (4096, 16, (2, -1), "ordinal must be >= 0"),
    (4096, 16, "cpu:1", "host memory is one device"),
    (4096, 16, (99, 0), "not a DLPack device type"),
    (4096, 16, (-1, 0), "not a DLPack device type"),
    (4096, 16, (2, 2**40), "fit in int32"),
])
def test_external_memory_that_cannot_be_described_is_refused(ptr, size, device, words):
    with pytest.raises(ValueError, match=words):
        Buffer.from_handle(ptr, size, device=device)


def bytes_of_a_view_of_address_0():
    v = StridedMemoryView.from_pointer(0, (4,), dtype="float32")
    return bytes(v)


def test_a_view_of_elements_at_address_0_is_never_made(workers):
    outcome = _outcome(bytes_of_a_view_of_address_0, pool=workers)
    assert outcome[:2] == ("raised", "ValueError") and "null address" in outcome[2], outcome
    # An empty view may have address 0 (nothing is read); dtype probes make such views.
    assert StridedMemoryView.from_pointer(0, (0, 3), dtype="float32").shape == (0, 3)


def test_from_pointer_refuses_offsets_beyond_int64():
    with pytest.raises(ValueError, match="outside the int64 range"):
        StridedMemoryView.from_pointer(4096, (3,), strides=(2**62,), dtype="float32")


def export_of_an_empty_compat_view(how):
    import numpy

    from interop_core.compat.cuda_core import StridedMemoryView as CompatView

    v = CompatView()
    return {"__dlpack__": lambda: v.__dlpack__(),
            "__dlpack__(max_version)": lambda: v.__dlpack__(max_version=(1, 0)),
            "__array_interface__": lambda: v.__array_interface__,
            "memoryview": lambda: memoryview(v),
            "numpy.from_dlpack": lambda: numpy.from_dlpack(v),
            "to(numpy)": lambda: interop_core.to(v, "numpy"),
            "view": lambda: interop_core.view(v),
            "copy_to": lambda: v.copy_to(numpy.zeros(1, numpy.uint8)),
            "launch_args": lambda: interop_core.launch_args([v])}[how]()


@pytest.mark.parametrize("how", ["__dlpack__", "__dlpack__(max_version)", "__array_interface__",
                                 "memoryview", "numpy.from_dlpack", "to(numpy)", "view",
                                 "copy_to", "launch_args"])
def test_every_export_of_a_view_that_describes_no_memory_is_a_value_error(workers, how):
    # cuda.core's no-argument StridedMemoryView(), as the migration page says.
    outcome = _outcome(export_of_an_empty_compat_view, how, pool=workers)
    assert outcome[:2] == ("raised", "ValueError") and "no element type" in outcome[2], outcome


def test_no_stride_in_bytes_overflows():
    with pytest.raises(ValueError, match="outside the int64 range"):
        StridedLayout((1,), (2**62,), 4)
    one = interop_core.view(np.zeros(12))[:: 2**63]
    assert one.shape == (1,) and one.strides_in_bytes == (8,)


# --- exchange-API tables -----------------------------------------------------------------------

def view_through_a_table_that_chains_to_itself():
    from dlpack_ctypes import _NAMES, DLPackExchangeAPI, _api

    table = DLPackExchangeAPI()
    table.header.version.major = 99
    table.header.prev_api = ctypes.addressof(table)
    capsule = _api.PyCapsule_New(ctypes.addressof(table), _NAMES[b"dlpack_exchange_api"], None)
    data = np.arange(4.0)

    class Looped:
        __dlpack_c_exchange_api__ = capsule
        _keep = table

        def __dlpack__(self, **kwargs):
            return data.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return data.__dlpack_device__()

    return StridedMemoryView.from_dlpack(Looped()).ptr == data.ctypes.data


def test_an_exchange_api_chain_that_loops_is_not_followed_forever(workers):
    assert _outcome(view_through_a_table_that_chains_to_itself, timeout=30,
                    pool=workers) == ("ok", True)


# --- types made on the fly ---------------------------------------------------------------------

def test_classes_made_on_the_fly_and_viewed_are_not_kept_alive_forever():
    # The per-type caches keep their types alive (no stale entry for a reused address), but
    # only so many: a program that makes classes as it goes does not keep every one.
    import gc
    import weakref

    data = np.zeros(3)
    made = []
    for i in range(5000):
        cls = type(f"Made{i}", (), {"__array_interface__": property(
            lambda self: data.__array_interface__)})
        interop_core.view(cls())
        StridedMemoryView.from_any(cls())
        made.append(weakref.ref(cls))
        del cls
    gc.collect()
    assert sum(ref() is not None for ref in made) <= 4097


def test_classes_made_on_the_fly_and_handed_on_read_only_are_not_kept_alive_forever():
    # to() remembers its read-only warning per source type: as boundedly as every cache.
    import gc
    import warnings
    import weakref

    pytest.importorskip("torch")
    data = np.zeros(3)
    data.flags.writeable = False
    made = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", interop_core.plugins.ReadOnlyHandoffWarning)
        for i in range(5000):
            cls = type(f"ReadOnly{i}", (), {"__array_interface__": property(
                lambda self: data.__array_interface__)})
            interop_core.to(cls(), "torch")
            made.append(weakref.ref(cls))
            del cls
    gc.collect()
    assert sum(ref() is not None for ref in made) <= 4097
