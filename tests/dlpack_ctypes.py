"""DLPack structures in ctypes, for tests that build or inspect capsules by hand.

Declared from the DLPack 1.3 specification.  `make_capsule` builds a DLPack capsule over
caller-provided memory with a deleter that counts its calls, so tests can check that a
consumer deletes each tensor exactly once.
"""

import ctypes

__all__ = [
    "DLManagedTensor",
    "DLManagedTensorVersioned",
    "DLPackExchangeAPI",
    "DLTensor",
    "FakeTensor",
    "capsule_name",
    "capsule_pointer",
    "exchange_api",
    "make_capsule",
]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


class DLPackExchangeAPIHeader(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("prev_api", ctypes.c_void_p)]


class DLPackExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("header", DLPackExchangeAPIHeader),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


def capi(name, restype, *argtypes):
    """A private ctypes function object for a CPython C-API function.

    ``ctypes.pythonapi.X`` is one object shared by the whole process: setting its argtypes in
    one test module silently changes them for every other.  ``pythonapi[name]`` is a new one.
    """
    function = ctypes.pythonapi[name]
    function.restype = restype
    function.argtypes = list(argtypes)
    return function


class _CApi:
    PyCapsule_New = capi("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                         ctypes.c_void_p)
    PyCapsule_GetName = capi("PyCapsule_GetName", ctypes.c_char_p, ctypes.py_object)
    PyCapsule_GetPointer = capi("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object,
                                ctypes.c_char_p)
    PyCapsule_IsValid = capi("PyCapsule_IsValid", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)


_api = _CApi

# Capsule names must outlive the capsules (the capsule keeps the char pointer).
_NAMES = {
    name: ctypes.create_string_buffer(name)
    for name in (b"dltensor", b"dltensor_versioned", b"dlpack_exchange_api", b"not_a_tensor",
                 b"used_dltensor", b"used_dltensor_versioned")
}


def capsule_name(capsule):
    """The capsule's name as bytes."""
    return _api.PyCapsule_GetName(capsule)


def capsule_pointer(capsule):
    """The capsule's pointer (whatever its name)."""
    return _api.PyCapsule_GetPointer(capsule, capsule_name(capsule))


def exchange_api(tp):
    """The DLPackExchangeAPI table a type publishes (a ctypes struct over the real memory)."""
    capsule = tp.__dlpack_c_exchange_api__
    return DLPackExchangeAPI.from_address(_api.PyCapsule_GetPointer(capsule,
                                                                   b"dlpack_exchange_api"))


# Every FakeTensor, for the rest of the process.  A real producer's deleter and managed struct
# outlive every consumer; a fake's are ctypes objects in a reference cycle with the fake (the
# callbacks hold its bound methods), so when a consumer's view becomes garbage together with the
# fake (a test that skips or fails while both are alive), the collector may free the callback
# before the view releases the tensor and calls it (seen on Python 3.12: a segfault in the next
# test's gc.collect()).  Kept here, they are never garbage.
_PRODUCERS = []


class FakeTensor:
    """A hand-made DLPack producer over `buffer` (an object with ``ctypes.data``, e.g. numpy).

    ``deleted`` counts deleter calls; the managed struct and its arrays live as long as this
    object, so a test holding it can check the count after the consumer is gone.
    """

    def __init__(self, buffer, shape, strides, dtype, *, versioned=True, version=(1, 3),
                 flags=0, byte_offset=0, device=(1, 0), data=None):
        self.buffer = buffer          # keeps the memory alive for the whole test
        self.deleted = 0
        self.versioned = versioned
        ndim = len(shape)
        self._shape = (ctypes.c_int64 * max(ndim, 1))(*shape)
        self._strides = None if strides is None else (ctypes.c_int64 * max(ndim, 1))(*strides)
        self.managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
        t = self.managed.dl_tensor
        t.data = buffer.ctypes.data if data is None else data
        t.device = DLDevice(*device)
        t.ndim = ndim
        t.dtype = DLDataType(*dtype)
        t.shape = self._shape
        if self._strides is not None:
            t.strides = self._strides
        t.byte_offset = byte_offset
        if versioned:
            self.managed.version = DLPackVersion(*version)
            self.managed.flags = flags
        self._deleter = DELETER(self._delete)
        self.managed.deleter = self._deleter
        self.name = b"dltensor_versioned" if versioned else b"dltensor"
        self._destructor = _DESTRUCTOR(self._destroy)
        _PRODUCERS.append(self)

    def _delete(self, _ptr):
        self.deleted += 1

    def _destroy(self, capsule_ptr):
        # The producer's capsule destructor: delete only if nobody consumed the capsule.
        if _api.PyCapsule_IsValid(capsule_ptr, self.name):
            self._delete(None)

    def capsule(self, name=None):
        """A new capsule over the tensor (named `name` if given)."""
        name = self.name if name is None else name
        return _api.PyCapsule_New(ctypes.addressof(self.managed), _NAMES[name],
                                  ctypes.cast(self._destructor, ctypes.c_void_p))


_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def make_capsule(buffer, **kwargs):
    """(capsule, FakeTensor) over a C-contiguous numpy array `buffer`, described faithfully."""
    import numpy as np

    kinds = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}
    dtype = (kinds[buffer.dtype.kind], buffer.dtype.itemsize * 8, 1)
    strides = tuple(s // buffer.itemsize for s in buffer.strides)
    kwargs.setdefault("dtype", dtype)
    kwargs.setdefault("shape", buffer.shape)
    kwargs.setdefault("strides", strides)
    assert isinstance(buffer, np.ndarray)
    fake = FakeTensor(buffer, **kwargs)
    return fake.capsule(), fake
