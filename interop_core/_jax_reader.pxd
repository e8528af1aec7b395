# The compiled reader for jax.Array implementations (ArrayImpl): single-device arrays through
# jax's own cheap accessors, validated once per process against jax's DLPack export.

from .core._record cimport ViewRecord

# The core reader registered as "jax".  Returns the array as the keep-alive (jax frees the
# buffer only when the array dies, or when the user donates/deletes it).  Waits for readiness
# (block_until_ready) so the view never exposes a buffer jax is still writing.  Falls back to
# __dlpack__ if validation failed.  Multi-device arrays: BufferError naming interop_core.shards().
cdef object read_jax(object obj, object stream, ViewRecord* rec)
