"""interop-core plugin for torch: a compiled AOTI reader for ``torch.Tensor``, streams, an exporter.

Reading
-------
``torch.Tensor`` and ``torch.nn.Parameter`` objects, and those of every other subclass of
``torch.Tensor`` (``as_subclass``, your own; fake, functional and distributed tensors have
registrations of their own, which refuse) are read by this package's compiled reader (``_reader.pyx``), registered through the public C
ABI (``interop_core.h``, version 2) exactly as a third party's would be.  It reads the tensor
through the PyTorch AOTI stable C ABI (``aoti_torch_get_*``, looked up in torch's loaded
libraries: no build-time dependency on torch), or, for plain tensors, reads the same fields
straight from the TensorImpl once ``prepare`` has found where they sit by comparing canary
tensors with the AOTI shims' answers and checked them on a second set (``doctor`` says which,
``fields``).  The core validates it once per process
(``prepare`` finds where the at::Tensor sits in the Python object and the DispatchKeySet bits of
unusable tensors, and checks the reader against torch's Python API; the core then compares
every canary read with the fallback's); if anything differs, the fallback serves the rest of the
process.  The fallback, ``_reader.read_checked``, also reads every tensor the compiled reader
declines: it refuses with a ``BufferError`` naming why tensors whose memory does not mean what
their metadata says (conjugate or negative bit, nested, sparse and other non-strided layouts,
quantized, meta, efficient zero tensors), and reads the rest through torch's DLPack (its C
exchange API, else ``__dlpack__``).  Those refusals stand for ``StridedMemoryView.from_dlpack``
and ``from_any`` too: torch's own DLPack export would hand on a conjugate or negative tensor's
memory without the bit.

Streams
-------
The producer stream of a CUDA tensor is torch's current CUDA stream on the tensor's device,
read through AOTI as the view is made (checked against ``torch.cuda.current_stream()`` once),
else through torch's Python API when ordering needs it; ``None`` for CPU tensors.  torch's CUDA
stream objects (``torch.cuda.Stream``, ``torch.cuda.ExternalStream``) are accepted as consumer
streams through their ``.cuda_stream`` handle.

Exporting
---------
``interop_core.to(x, "torch")`` returns a ``torch.Tensor`` over the same memory, made through
the DLPack C exchange API of both sides (``_reader.to_torch``).  torch tensors cannot be
read-only: a read-only source gives a writable tensor (``to()`` warns with
``ReadOnlyHandoffWarning``).  torch's import aborts the process on negative strides: the
exporter's ``ImportLimits`` (``_reader.import_limits``) make ``to()`` hand torch a dense copy
instead (``copy=None``) or raise ``BufferError`` (``copy=False``).  Pinned host memory becomes
a CPU tensor, managed memory a CUDA tensor.

Tensors that require grad
-------------------------
``to(t, ...)`` of a tensor (of any ``torch.Tensor`` subclass too) that requires grad raises
``BufferError`` naming ``.detach()``, for every target: torch's own rule (``Tensor.__dlpack__``,
``.numpy()``), declared with ``registry.add_export_rule``.  ``view(t)`` and ``launch_args`` read such tensors as they are.

Sharded tensors
---------------
``torch.distributed.tensor.DTensor`` is a sharded type: ``interop_core.shards(dtensor)`` views
this rank's shard and locates it in the global tensor, ``view(dtensor)`` refuses, and
``to(shards, "torch")`` gives per-device tensors or a ``DTensor`` (``_sharded.py``).

Loading this module imports no framework.
"""

from __future__ import annotations

import operator
import sys

import interop_core

from . import _reader  # compiled; imports no framework

__all__ = ["interop_core_register", "producer_stream", "stream_handle",
           "refuse_fake_tensor"]

_TENSOR_TYPES = ("torch:Tensor", "torch.nn.parameter:Parameter")


def producer_stream(tensor):
    """torch's current CUDA stream on ``tensor``'s device, or None for non-CUDA tensors.

    Parameters
    ----------
    tensor : torch.Tensor

    Returns
    -------
    int or None
        The ``cudaStream_t`` handle torch would run the next kernel on for that device.
    """
    if not tensor.is_cuda:
        return None
    handle = _reader.aoti_producer_stream(tensor.device.index)
    if handle is not None:
        return handle
    return sys.modules["torch"].cuda.current_stream(tensor.device).cuda_stream


#: ``stream_handle(stream) -> int``: the ``cudaStream_t`` of a ``torch.cuda.Stream`` or
#: ``ExternalStream`` (``operator.attrgetter("cuda_stream")``: a C getter, no Python frame).
stream_handle = operator.attrgetter("cuda_stream")


def refuse_fake_tensor(tensor, stream=None):
    """Reader for ``FakeTensor`` and ``FunctionalTensor``: metadata without memory.

    torch.compile, export and make_fx trace with them; a launcher that meets one is being
    traced, and the message says how to keep it out of the trace.

    Raises
    ------
    BufferError
        Always.
    """
    raise BufferError(
        f"cannot view a {type(tensor).__name__}: fake and functional tensors "
        "(torch._subclasses) carry shapes and dtypes but no memory; to call a kernel launcher "
        "from code torch.compile traces, register the launcher as a torch.library.custom_op "
        "with a fake implementation (register_fake): the compiled graph then calls it with real "
        "tensors")


@interop_core.hookimpl
def interop_core_register(registry):
    """Declare torch's tensor types (the AOTI reader, validated once), streams, exporter, and
    ``DTensor`` as a sharded type with its assembler."""
    reader = _reader.reader_capsule()
    interface_check = {"cuda_array_interface": _reader.equivalence_check_capsule()}
    for path in _TENSOR_TYPES:
        # The AOTI reader reads what torch's DLPack export describes, and orders a consumer
        # stream after torch's current stream as torch's __dlpack__(stream=) does; torch's
        # CUDA Array Interface describes the same, but for the tensors the check sends to it.
        # Subclasses (`as_subclass`, user subclasses) are read the same way: the reader reads
        # the TensorImpl whatever the Python type, and refuses what torch's own export would
        # describe wrongly (the conjugate and negative bits, which torch's DLPack C exchange
        # API drops); fake, functional and distributed tensors have registrations of their own.
        registry.add_type(path, reader=reader, fallback=_reader.read_checked,
                          subclasses=path == "torch:Tensor",
                          prepare=_reader.prepare, canaries=_reader.canaries,
                          producer_stream=producer_stream,
                          equivalent_to=("dlpack", "cuda_array_interface"),
                          equivalence_check=interface_check)
    registry.add_type("torch._subclasses.fake_tensor:FakeTensor", reader=refuse_fake_tensor)
    registry.add_type("torch._subclasses.functional_tensor:FunctionalTensor",
                      reader=refuse_fake_tensor)
    for path in ("torch.cuda:Stream", "torch.cuda.streams:Stream",
                 "torch.cuda:ExternalStream", "torch.cuda.streams:ExternalStream"):
        # torch's stream objects name pooled streams they do not own: keeping one holds nothing.
        registry.add_stream_type(path, handle=stream_handle, keep_last=True)
    # The compiled exporter itself, so that a handoff runs no Python of this plugin; to()
    # checks what torch's import cannot take (negative strides abort it) before calling it.
    registry.add_exporter("torch", _reader.to_torch, types=("torch:Tensor",),
                          preserves_readonly=False, limits=_reader.import_limits())
    for path in _TENSOR_TYPES:
        # torch's own rule: tensors that require grad are not handed on (use .detach()), nor
        # are those of subclasses (torch's exports refuse them alike).
        registry.add_export_rule(path, _reader.export_rule_capsule(),
                                 subclasses=path == "torch:Tensor")
    from ._sharded import DTENSOR_TYPES, assemble_torch, dtensor_shards, refuse_dtensor

    for path in DTENSOR_TYPES:
        registry.add_type(path, reader=refuse_dtensor)
        registry.add_sharded_type(path, dtensor_shards)
    registry.add_shard_assembler("torch", assemble_torch)
