# jax's handles, looked up once (by the validation's prepare(), else by the first read or
# export), and the core's helper table: what every other module of the plugin reads jax and the
# core through.  See _handles.pxd for what each one is.
#
# The accessors of jax's array type are called directly on exact instances: the same functions
# jax's attribute lookup finds (a property's getter, methods of the type), without the lookup
# (an ArrayImpl has a __dict__, searched first for a method).

from interop_core.abi cimport interop_core_import_api

__all__ = []

_api = interop_core_import_api(sizeof(interop_core_api))

_ready = False
_single_sharding = None
_to_capsule = None
_from_capsule = None
_accessor_type = None
_aval_getter = None
_pointer_method = None
_ready_method = None
_wait_method = None
_shard_method = None


cdef object _jaxlib_function(object array_type, str name):
    import importlib
    modules = ("jax._src.lib._jax", "jaxlib._jax", "jaxlib.xla_extension")
    if array_type is not None:
        modules = (array_type.__module__,) + modules
    for module in modules:
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    return None


cdef int _setup(object array_type) except -1:
    global _ready, _single_sharding, _to_capsule, _from_capsule
    import jax

    _single_sharding = jax.sharding.SingleDeviceSharding
    _to_capsule = _jaxlib_function(array_type, "buffer_to_dlpack_managed_tensor")
    _from_capsule = _jaxlib_function(array_type, "dlpack_managed_tensor_to_buffer")
    _bind_accessors(array_type)
    _ready = True
    return 0


cdef int _bind_accessors(object array_type) except -1:
    global _accessor_type, _aval_getter, _pointer_method, _ready_method, _wait_method
    global _shard_method
    import inspect

    _accessor_type = _aval_getter = _pointer_method = _ready_method = _wait_method = None
    _shard_method = None
    if array_type is None:      # set up before any array was read (an export to jax)
        array_type = _jaxlib_function(None, "ArrayImpl")
        if not isinstance(array_type, type):
            return 0
    aval = inspect.getattr_static(array_type, "aval", None)
    method = inspect.getattr_static(array_type, "unsafe_buffer_pointer", None)
    ready = inspect.getattr_static(array_type, "is_ready", None)
    wait = inspect.getattr_static(array_type, "block_until_ready", None)
    shard = inspect.getattr_static(array_type, "_fully_replicated_shard", None)
    if (type(aval) is property and aval.fget is not None and callable(method)
            and callable(ready) and callable(wait) and callable(shard)):
        _aval_getter = aval.fget
        _pointer_method = method
        _ready_method = ready
        _wait_method = wait
        _shard_method = shard
        _accessor_type = array_type
    return 0


cdef int _pending_error() except -1:
    return -1
