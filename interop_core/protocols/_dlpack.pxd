# DLPack: the Python protocol (__dlpack__ / capsules) and the C exchange API, in both directions.

from ..core._dlpack_abi cimport DLManagedTensorVersioned, DLTensor
from ..core._record cimport ViewRecord

# --- in ---------------------------------------------------------------------------------------
# Each reader fills `rec` and returns the keep-alive object that owns the DLPack tensor (its
# deleter runs exactly once, when that object dies).  TypeError if `obj` lacks the protocol,
# BufferError for unusable tensors.

# Call obj.__dlpack__ (max_version negotiation, stream mapped per DLPack rules).
cdef object read_dlpack(object obj, object stream, ViewRecord* rec)

# Consume a DLPack capsule ("dltensor" or "dltensor_versioned"), renaming it "used_*".
cdef object read_dlpack_capsule(object capsule, ViewRecord* rec)

# Through type(obj).__dlpack_c_exchange_api__ (no Python-level __dlpack__ call).
cdef object read_dlpack_exchange_api(object obj, object stream, ViewRecord* rec)

# True when type(obj) publishes a usable __dlpack_c_exchange_api__ capsule (cached per type).
cdef bint has_exchange_api(type t) except -1

# --- out --------------------------------------------------------------------------------------
# The view type registers itself at import so that the exchange API (which receives bare
# PyObject*) can reach a view's record and build views, without _dlpack importing _view.
ctypedef ViewRecord* (*record_of_t)(object obj) except NULL
ctypedef object (*view_from_record_t)(ViewRecord* rec, object keepalive, object owner)
cdef void register_view_type(type view_type, record_of_t record_of, view_from_record_t make_view)

# A capsule for `rec` whose manager context keeps `keepalive` (the view) alive until the consumer
# calls the deleter.  Versioned when max_version allows it, legacy otherwise; READ_ONLY flag set
# for read-only views, IS_COPIED when `is_copied` (the caller made `rec` a copy for this export;
# copy=True is refused otherwise).  `stream`, `dl_device` follow the array-API __dlpack__ rules.
cdef object export_dlpack(object keepalive, ViewRecord* rec, object stream, object max_version,
                          object dl_device, object copy, bint is_copied)

# A legacy ("dltensor") capsule for `rec` even when it is read-only, for a consumer that never
# writes into what it imports and takes only legacy capsules (jax: its arrays are immutable).
# BufferError for padded sub-byte types, which a legacy capsule cannot describe.
cdef object legacy_capsule_for_immutable_consumer(object keepalive, ViewRecord* rec)

# The DLTensor inside an unconsumed "dltensor" / "dltensor_versioned" capsule, left unconsumed
# (the capsule still owns it), and whether it is read-only; BufferError for anything else.
cdef DLTensor* unconsumed_tensor(object capsule, bint* readonly) except NULL

# (device_type, device_id) for __dlpack_device__.
cdef tuple export_dlpack_device(ViewRecord* rec)

# The capsule named "dlpack_exchange_api" that StridedMemoryView publishes on its type.
cdef object exchange_api_capsule()
