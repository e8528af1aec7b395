"""interop-core plugin for torch.

Registers, without importing torch:

- ``torch.Tensor`` and ``torch.nn.Parameter`` (exact types; subclasses such as FakeTensor are
  not) with the core's compiled reader ``"torch"`` (the PyTorch AOTI stable C ABI, validated
  once per process, falling back to torch's DLPack C exchange API, then ``__dlpack__``);
- the producer stream of a tensor: torch's current CUDA stream on the tensor's device
  (``None`` for CPU tensors);
- torch's CUDA stream objects (``torch.cuda.Stream``, ``torch.cuda.ExternalStream``) as
  consumer streams, through their ``.cuda_stream`` handle;
- the exporter ``"torch"``: ``interop_core.to(x, "torch")`` returns a ``torch.Tensor`` over the
  same memory through torch's DLPack C exchange API.  torch tensors cannot be read-only: a
  read-only source gives a writable tensor (``to()`` warns with ``ReadOnlyHandoffWarning``).
"""

from __future__ import annotations

import operator
import sys

import interop_core

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
    from interop_core import _torch_reader

    index = tensor.device.index
    handle = _torch_reader.aoti_producer_stream(index)
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
    """Declare torch's tensor types, stream types and the ``"torch"`` exporter."""
    from interop_core import _torch_reader  # registers the "torch" core reader on import

    for path in _TENSOR_TYPES:
        registry.add_type(path, reader="torch", producer_stream=producer_stream)
    registry.add_type("torch._subclasses.fake_tensor:FakeTensor", reader=refuse_fake_tensor)
    registry.add_type("torch._subclasses.functional_tensor:FunctionalTensor",
                      reader=refuse_fake_tensor)
    for path in ("torch.cuda:Stream", "torch.cuda.streams:Stream",
                 "torch.cuda:ExternalStream", "torch.cuda.streams:ExternalStream"):
        # torch's stream objects name pooled streams they do not own: keeping one holds nothing.
        registry.add_stream_type(path, handle=stream_handle, keep_last=True)
    # The compiled exporter itself, so that a handoff runs no Python of this plugin.
    registry.add_exporter("torch", _torch_reader.to_torch, types=("torch:Tensor",),
                          preserves_readonly=False)
