# PLACEHOLDER (being replaced): minimal bodies so the package compiles.
from ._record cimport ViewRecord

cdef object read_dlpack(object obj, object stream, ViewRecord* rec):
    raise NotImplementedError
cdef object read_dlpack_capsule(object capsule, ViewRecord* rec):
    raise NotImplementedError
cdef object read_dlpack_exchange_api(object obj, object stream, ViewRecord* rec):
    raise NotImplementedError
cdef bint has_exchange_api(type t) except -1:
    return False
cdef void register_view_type(type view_type, record_of_t record_of, view_from_record_t make_view):
    pass
cdef object export_dlpack(object keepalive, ViewRecord* rec, object stream, object max_version,
                          object dl_device, object copy):
    raise NotImplementedError
cdef tuple export_dlpack_device(ViewRecord* rec):
    return (rec.device_type, rec.device_id)
cdef object exchange_api_capsule():
    return None
