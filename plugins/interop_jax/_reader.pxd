# The jax plugin's exporter, to(view, "jax") (_reader.pyx); it also re-exports the reader's
# public functions by their old names.  Nothing here is cimported by other modules: the reader
# is in _read.pxd, the shared handles in _handles.pxd.
