"""interop-core plugin for jax: a compiled reader for ``jax.Array`` and a ``"jax"`` exporter.

Reading
-------
jax's array implementation (``ArrayImpl``; ``jaxlib._jax`` on jax 0.10 to 0.12, other module
paths on other versions, all declared: resolution is lazy) is read by this package's compiled
reader (``_read.pyx``), registered through the public C ABI (``interop_core.h``, version 2)
exactly as a third party's would be.  Every read **holds the buffer**: it takes jaxlib's DLPack
capsule of the array (``buffer_to_dlpack_managed_tensor``, what ``__dlpack__`` calls: jax's
external reference on the buffer), keeps it unconsumed in a ``BufferHold`` that the view,
export, ``LaunchArgs`` slot or shard view keeps alive, and reads the pointer, shape, strides and
dtype from it; the device and memory kind come from the array's sharding.  Reads of an array
whose hold is alive share it, confirmed by ``unsafe_buffer_pointer()`` (which raises for a
deleted or donated array) and the identity of the array's ``aval``.
Those are jax internals, so the core validates the reader once per process, before its first
use: ``prepare`` checks the sharding type and shared reads, and the core reads canary arrays
with it and with the fallback (jax's own ``__dlpack__``, ``_read.read_with_dlpack``) and
compares them.  If anything differs, the fallback serves the rest of the process
(``python -m interop_core doctor`` says why).

The compiled modules, each a ``.pyx`` with its ``.pxd`` and ``.pyi``: ``_handles`` (jax's
handles and the core's helper table, looked up once), ``_devices`` (DLPack devices from
shardings, jax's streams), ``_hold`` (``BufferHold``), ``_read`` (the reader, its fallback, the
producer strategy), ``_validation`` (canaries and ``prepare``), ``_shards_read``
(``shards()``), ``_reader`` (the exporter).

* ``StridedMemoryView.from_dlpack(x)`` and ``from_any(x)`` take this reader too: it is
  declared equivalent to DLPack (plain host and device memory; other memory kinds go to jax's
  ``__dlpack__``), and, told that a read stands in for DLPack (the ABI's ``protocol`` input), it
  gives what jax's ``__dlpack__`` gives: the buffer held at once and, without a consumer stream,
  the host waiting until the array is computed (the same jaxlib call, without jax's Python
  wrappers).
* ``StridedMemoryView.from_cuda_array_interface(x)`` takes it too, for device memory in
  row-major order with an element type jax's interface exports: jax's
  ``__cuda_array_interface__`` (version 2, no ``stream``) neither waits for the array nor holds
  its buffer past the call, which is what ``view()`` gives (with the hold deferred to first use).
  The rest (bfloat16, float8, 4-bit types, pinned host memory, empty arrays) goes to jax's own
  interface.
* Views are always **read-only**: jax arrays are immutable and jax may share or reuse buffers.
  The type is declared immutable, so ``StridedMemoryView.from_any`` / ``from_dlpack`` of a jax
  array say read-only too (jax's legacy DLPack capsules cannot).
* **Ordering, never a host wait on device work** (the stream contract):

  - Device memory, ``view(x)`` / ``stream=None`` / ``-1``: no host wait.  The hold is taken on
    jax's stream for external ready events (PJRT orders it after the computation, enqueued);
    the address is defined, the contents may still be being computed.
  - Device memory, ``view(x, stream=s)``, ``to(x, ..., stream=s)``, ``view(x).sync(s)``: PJRT
    makes ``s`` wait for jax's pending work on ``x`` (what ``x.__dlpack__(stream=s)`` does);
    the host does not wait.
  - Host memory (the CPU backend), any stream or none: jax's CPU work is not stream-ordered
    and host consumers read at once, so the read waits until ``x`` is computed
    (jaxlib waits as the hold is taken), as jax's own DLPack export does.
  - The producer strategy (``producer_stream``), asked when a view made without a stream is
    ordered later, orders jax's pending work onto jax's own stream for external ready events
    and reports that stream.

* Arrays sharded over several devices (``interop_core.shards()`` views those, see below),
  deleted or donated arrays, and arrays on a device of another process raise ``BufferError``
  naming the problem.
* **Lifetime.**  While a view or export of ``x`` lives, ``x.delete()`` marks ``x`` deleted and
  leaves the memory, and jax declines to donate the buffer (as after ``torch.from_dlpack(x)``);
  once the last one is gone the buffer is jax's again.  Arrays jax's DLPack export refuses
  (``int4``, ``uint4``, tiled layouts: nothing could hold them) raise ``BufferError``.

Sharded arrays
--------------
``interop_core.shards(x)`` yields one view per addressable shard, with the indices and replica
ids of jax's own ``addressable_shards``.  The compiled path (``_shards_read.read_shards``) asks
jax's public answer once per (sharding, global shape) and keeps it as a plan (an
``interop_core.ShardLayout`` and each slot's device); per call it confirms each per-device
array's device and shape, describes each per-device array as ``view()`` describes a
single-device one, and makes the views in one loop.  Each shard view holds its buffer from the
first use of its memory on, as a view does.
Those are jax internals: the core validates the path once per process, on the first
``shards()`` of a jax array (``prepare_shards``, and ``shard_canaries`` split both ways), against
the public path (``_sharded.jax_shards``: ``addressable_shards``), which replaces it if anything
differs and serves any array whose per-device arrays do not match their plan.
``interop_core.to(shards, "jax", sharding=...)`` assembles a global array from per-device pieces
of any framework with ``jax.make_array_from_single_device_arrays`` (``_sharded.py``).

Exporting
---------
``interop_core.to(x, "jax")`` (the compiled ``_reader.to_jax``) imports the view with one jaxlib call
(``dlpack_managed_tensor_to_buffer``, told never to copy), the device and jax's stream cached
per device and the result checked once per platform against ``jax.dlpack.from_dlpack``; device
memory is ordered before jax's stream first, as ``jax.dlpack.from_dlpack`` does.  What jax
could take only as a copy or a conversion is declared in the exporter's ``ImportLimits``
(``_reader.import_limits``), which ``to()`` checks first:

* a layout that is not compact (a permutation of a dense row-major layout), and host memory
  not aligned to 64 bytes (jax's CPU backend copies it), are handed over as a dense, aligned
  copy with ``copy=None`` or ``True`` and refused with ``BufferError`` with ``copy=False``;
* without ``jax_enable_x64``, 64-bit types are refused with ``BufferError`` whatever ``copy``
  says: jax would turn them into 32-bit ones, a different array (``_reader.x64_refusal``).

``device=`` takes jax devices (and single-device shardings), ``"cpu:N"`` (the N-th of jax's
host devices: several with ``XLA_FLAGS=--xla_force_host_platform_device_count``), ``"cuda:N"``
and DLPack pairs (``_reader.resolve_device``); host memory goes onto any of jax's CPU devices
without a copy.  The result is read-only, as every jax array is; read-only views are handed
over too (jax takes only legacy capsules, which cannot say read-only: jax never writes into an
imported buffer -- but do not donate the result to a jitted function).

Handing jax arrays to other frameworks
--------------------------------------
The other plugins' exporters read jax arrays with this plugin's reader, so the rules above hold
(host memory read once computed, device memory without a host wait; read-only; the buffer
held).  ``to(x, "numpy")`` of a CPU array is a non-writeable ndarray whose ``base`` is the
``BufferHold`` of ``x``'s buffer (``base.array is x``): the numpy plugin's compiled exporter gets
this reader's record and builds the array with numpy's C API, no view in between (0.5x the time
of ``np.asarray(x)`` on the development VM; ``np.asarray`` goes through jaxlib's buffer protocol,
which takes an external reference too and waits for the array).  ``to(x, "cupy")`` of a CUDA
array: cupy's ``UnownedMemory`` keeps the ``BufferHold`` (and so ``x``).  cupy,
torch and numba arrays cannot be read-only, so those handoffs warn with
``interop_core.plugins.ReadOnlyHandoffWarning``, at no cost when the warning filters ignore it.

Loading this module imports neither jax nor numpy.
"""

import interop_core

__all__ = ["interop_core_register", "export_jax", "export_jax_slow", "producer_stream",
           "JaxCopyWarning", "ARRAY_TYPES"]

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
    """jax copies memory it was handed instead of sharing it (shards assembled from host
    memory jax cannot alias: ``to(shards, "jax", sharding=...)``)."""


def export_jax(view, stream=None):
    """A jax array over the memory of ``view`` (zero-copy where jax allows it).

    Parameters
    ----------
    view : interop_core.StridedMemoryView
    stream : None, int or stream object, optional
        Accepted for the exporter protocol: ``to()`` has already ordered the view on it; jax
        imports device memory on its own stream, ordered after the view's producer.

    Returns
    -------
    jax.Array
        On the view's device; read-only, as every jax array is.

    Raises
    ------
    BufferError
        If jax could take the view only as a copy or a conversion (a layout that is not
        compact, host memory not aligned to 64 bytes, 64-bit types without
        ``jax_enable_x64``): ``interop_core.to(view, "jax")`` copies where a copy helps.
    """
    from . import _reader  # compiled; imports jax only when called

    return _reader.to_jax(view, stream)


def export_jax_slow(view, stream=None):
    """:func:`export_jax` through ``jax.dlpack.from_dlpack`` (what ``to_jax`` falls back to).

    For views the direct import does not take: devices whose once-per-platform check failed,
    memory kinds jax's direct import does not know.  Never a copy (``copy=False``): what jax
    could take only as one raises ``BufferError``.
    """
    import jax.dlpack

    source = view
    if view.readonly:
        # jax imports only legacy (unversioned) capsules, which cannot carry DLPack's READ_ONLY
        # flag, and our views refuse to export read-only memory that way.  jax arrays are
        # immutable, so jax is a read-only consumer: hand it a writable-flagged twin over the
        # same memory that keeps `view` alive.
        source = interop_core.StridedMemoryView.from_pointer(
            view.ptr, view.shape, view.strides, dtype=view.dlpack_dtype,
            device=(view.device_type, view.device_id), readonly=False, owner=view)
    try:
        result = jax.dlpack.from_dlpack(source, copy=False)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise BufferError(f"jax cannot import this view without a copy: {exc}") from exc
    if view.size and result.unsafe_buffer_pointer() != view.ptr:
        raise BufferError(f"jax copied the memory at {view.ptr:#x} although asked not to")
    return result


def producer_stream(array):
    """Order jax's pending work on ``array`` onto jax's stream and return it (see the module).

    Parameters
    ----------
    array : jax.Array

    Returns
    -------
    int or None
        jax's stream for external ready events on the array's device, now ordered after the
        computation producing ``array`` (the host does not wait); ``None`` for host memory,
        after the host waited for jax's CPU work on it.
    """
    from . import _read  # compiled; imports no jax

    return _read.producer_stream(array)


@interop_core.hookimpl
def interop_core_register(registry):
    """Declare jax's array types (the compiled accessor reader and sharded path, each validated
    once, read-only), the ``"jax"`` exporter and its shard assembler (imports no jax)."""
    from . import _read, _reader, _shards_read, _validation  # compiled; import no jax

    reader = _read.reader_capsule()
    # StridedMemoryView.from_dlpack / from_any / from_cuda_array_interface take the reader
    # too: told so (the `protocol` input, ABI v5), it holds and waits as jax's own __dlpack__
    # does, or, for the interface, reads as view() does (jax's interface neither waits nor
    # holds); the check sends what jax's own export refuses or says otherwise to it.
    check = _read.equivalence_check_capsule()
    checks = {"dlpack": check, "cuda_array_interface": check}
    for path in ARRAY_TYPES:
        registry.add_type(path, reader=reader, fallback=_read.read_with_dlpack,
                          prepare=_validation.prepare, canaries=_validation.canaries,
                          producer_stream=_read.producer_stream, readonly=True,
                          equivalent_to=("dlpack", "cuda_array_interface"),
                          equivalence_check=checks)
    # The compiled exporter itself, so that a handoff runs no Python of this plugin; to()
    # checks what jax cannot take as it is (its import limits) before calling it.
    registry.add_exporter("jax", _reader.to_jax, types=(*ARRAY_TYPES, "jax:Array"),
                          preserves_readonly=True, limits=_reader.import_limits())
    from ._sharded import assemble_jax, jax_shards

    for path in ARRAY_TYPES:
        # The compiled path (jax internals, validated once) and jax's public one behind it.
        registry.add_sharded_type(path, _shards_read.read_shards, fallback=jax_shards,
                                  prepare=_shards_read.prepare_shards,
                                  canaries=_shards_read.shard_canaries)
    registry.add_shard_assembler("jax", assemble_jax)
