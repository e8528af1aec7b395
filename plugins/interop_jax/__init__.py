"""interop-core plugin for jax: a compiled reader for ``jax.Array`` and a ``"jax"`` exporter.

Reading
-------
jax's array implementation (``ArrayImpl``; ``jaxlib._jax`` on jax 0.10, other module paths on
other versions, all declared: resolution is lazy) is read by the core's compiled reader
``"jax"`` (``interop_core/_jax_reader.pyx``) from the array's own accessors: its sharding's
device, ``aval`` (shape and dtype), its device layout, and ``unsafe_buffer_pointer()``.  The
reader checks these once per process against jax's DLPack export on canary arrays and falls
back to ``__dlpack__`` if anything differs.

* Views are always **read-only**: jax arrays are immutable and jax may share or reuse buffers.
* **Readiness**: the reader calls ``block_until_ready()`` before it reads the pointer, on every
  call, so a view never exposes a buffer jax is still writing.  Cost: a few hundred ns for a
  ready array; otherwise the host waits for the computation producing it.  We chose this over
  DLPack's ``stream`` argument because it behaves the same on every backend and jax version
  (jax 0.11 on CUDA rejects ``stream=-1``), needs no consumer stream, and leaves nothing
  pending: the view reports no producer stream.
* Arrays sharded over several devices raise ``BufferError`` naming ``interop_core.shards()``,
  which views them shard by shard (see ``_sharded.py``).  An array whose sharding spans one
  device is read normally.
* Do not donate or ``delete()`` an array while a view of it is in use: jax then frees the
  buffer regardless of references.

Sharded arrays
--------------
``interop_core.shards(x)`` yields one view per addressable shard from jax's own
``addressable_shards``; ``interop_core.to(shards, "jax", sharding=...)`` assembles a global
array from per-device pieces of any framework with ``jax.make_array_from_single_device_arrays``
(``_sharded.py``).

Exporting
---------
``interop_core.to(x, "jax")`` calls ``jax.dlpack.from_dlpack`` on the view.  jax accepts only
compact layouts (a permutation of a dense row-major layout): anything else raises
``BufferError``.  jax on CPU **copies** host memory that is not aligned to 64 bytes; the
exporter detects that by pointer and warns with :class:`JaxCopyWarning` (the result is then a
copy; jax arrays are immutable, so this changes only cost and aliasing).  The result is
read-only, as every jax array is; read-only views are handed over too (jax takes only legacy
capsules, which cannot say read-only, so the exporter passes a writable-flagged twin view: jax
never writes into an imported buffer -- but do not donate the result to a jitted function).
Without ``jax_enable_x64``, jax converts 64-bit types to 32-bit ones: a copy, reported by the
same warning.

Loading this module imports neither jax nor numpy.
"""

import warnings

import interop_core

__all__ = ["interop_core_register", "export_jax", "JaxCopyWarning", "ARRAY_TYPES"]

# Every spelling of jax's array implementation across jax versions: 0.4.x up to 0.4.3x
# (jaxlib.xla_extension), and jaxlib._jax (0.6+).  Lazy resolution ignores those not imported.
#: The "module:QualName" spellings of jax's array type across jax versions (resolved lazily).
ARRAY_TYPES = (
    "jaxlib._jax:ArrayImpl",
    "jaxlib.xla_extension:ArrayImpl",
    "jax.jaxlib._jax:ArrayImpl",
    "jax._src.lib:ArrayImpl",
)


class JaxCopyWarning(UserWarning):
    """``to(x, "jax")`` could not share memory: jax copied it (unaligned host memory)."""


def _is_compact(shape, strides):
    """Whether strides are a permutation of a dense layout (what jax's DLPack import takes)."""
    if 0 in shape:
        return True
    dims = sorted((s, n) for s, n in zip(strides, shape, strict=True) if n != 1)
    expected = 1
    for stride, n in dims:
        if stride != expected:
            return False
        expected *= n
    return True


def export_jax(view, stream=None):
    """A jax array over the memory of ``view`` (zero-copy where jax allows it).

    Parameters
    ----------
    view : interop_core.StridedMemoryView
    stream : None, int or stream object, optional
        Unused: jax orders device imports on its own stream through ``__dlpack__``.

    Returns
    -------
    jax.Array
        On the view's device; read-only, as every jax array is.

    Raises
    ------
    BufferError
        If the layout is not compact (jax cannot import it).

    Warns
    -----
    JaxCopyWarning
        If jax copied the memory (host memory not aligned to 64 bytes).
    """
    import jax.dlpack

    if not _is_compact(view.shape, view.strides):
        raise BufferError(
            f"jax imports only compact layouts (a transposition of a dense array); this view "
            f"has shape {view.shape} and strides {view.strides}: make it contiguous first")
    # jax's from_dlpack passes its own consumer stream to the view's __dlpack__ for device
    # memory (the view orders it after the producer); it takes no stream argument of ours.
    source = view
    if view.readonly:
        # jax imports only legacy (unversioned) capsules, which cannot carry DLPack's READ_ONLY
        # flag, and our views refuse to export read-only memory that way.  jax arrays are
        # immutable, so jax is a read-only consumer: hand it a writable-flagged twin over the
        # same memory that keeps `view` alive.
        source = interop_core.StridedMemoryView.from_pointer(
            view.ptr, view.shape, view.strides, dtype=view.dlpack_dtype,
            device=(view.device_type, view.device_id), readonly=False, owner=view)
    result = jax.dlpack.from_dlpack(source)
    if view.size and result.unsafe_buffer_pointer() != view.ptr:
        warnings.warn(
            f"jax copied the memory at {view.ptr:#x} instead of sharing it (jax requires "
            "64-byte aligned host memory, and converts 64-bit types unless jax_enable_x64 is "
            "set); the result is a copy", JaxCopyWarning, stacklevel=3)
    return result


@interop_core.hookimpl
def interop_core_register(registry):
    """Declare jax's array types (core reader ``"jax"``, sharded through ``addressable_shards``),
    the ``"jax"`` exporter and its shard assembler."""
    from interop_core import _jax_reader  # noqa: F401  (compiled; registers "jax"; no jax import)

    for path in ARRAY_TYPES:
        registry.add_type(path, reader="jax")
    registry.add_exporter("jax", export_jax, types=(*ARRAY_TYPES, "jax:Array"),
                          preserves_readonly=True)
    from ._sharded import assemble_jax, jax_shards

    for path in ARRAY_TYPES:
        registry.add_sharded_type(path, jax_shards)
    registry.add_shard_assembler("jax", assemble_jax)
