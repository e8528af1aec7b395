# PLACEHOLDER (being replaced): minimal bodies so the package compiles.
from ._dlpack_abi cimport DLDataType
from ._record cimport ViewRecord

cdef int record_set_dtype(ViewRecord* rec, DLDataType dtype, bint subbyte_padded) except -1:
    rec.dtype = dtype
    rec.itemsize = dtype.bits * dtype.lanes // 8
    return 0
cdef Py_ssize_t dtype_itemsize(DLDataType dtype, bint subbyte_padded) except -1:
    return dtype.bits * dtype.lanes // 8
cdef int dtype_from_typestr(object typestr, DLDataType* out) except -1:
    raise NotImplementedError
cdef int dtype_from_buffer_format(object fmt, Py_ssize_t itemsize, DLDataType* out) except -1:
    raise NotImplementedError
cdef int dtype_from_object(object dtype, DLDataType* out) except -1:
    out.code, out.bits, out.lanes = dtype
    return 0
cdef object dtype_to_numpy(DLDataType dtype):
    raise NotImplementedError
cdef str dtype_name(DLDataType dtype):
    return f"({dtype.code}, {dtype.bits}, {dtype.lanes})"
cdef str dtype_to_typestr(DLDataType dtype):
    raise NotImplementedError
cdef str dtype_to_buffer_format(DLDataType dtype):
    raise NotImplementedError
