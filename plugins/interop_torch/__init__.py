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
  read-only source gives a writable tensor (``to()`` warns with ``ReadOnlyHandoffWarning``);
- ``torch.distributed.tensor.DTensor`` as a sharded type: ``interop_core.shards(dtensor)``
  views this rank's shard and locates it in the global tensor, ``view(dtensor)`` refuses, and
  ``to(shards, "torch")`` gives per-device tensors or a ``DTensor`` (``_sharded.py``).
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
    """Reader for ``FakeTensor``: it has metadata but no memory, so it cannot be viewed.

    Raises
    ------
    BufferError
        Always.
    """
    raise BufferError(
        f"cannot view a {type(tensor).__name__}: fake tensors (torch._subclasses.fake_tensor) "
        "carry shapes and dtypes but no memory")


@interop_core.hookimpl
def interop_core_register(registry):
    """Declare torch's tensor types, stream types, the ``"torch"`` exporter, and ``DTensor``
    as a sharded type with its assembler."""
    from interop_core import _torch_reader  # registers the "torch" core reader on import

    for path in _TENSOR_TYPES:
        registry.add_type(path, reader="torch", producer_stream=producer_stream)
    registry.add_type("torch._subclasses.fake_tensor:FakeTensor", reader=refuse_fake_tensor)
    for path in ("torch.cuda:Stream", "torch.cuda.streams:Stream",
                 "torch.cuda:ExternalStream", "torch.cuda.streams:ExternalStream"):
        # torch's stream objects name pooled streams they do not own: keeping one holds nothing.
        registry.add_stream_type(path, handle=stream_handle, keep_last=True)
    # The compiled exporter itself, so that a handoff runs no Python of this plugin.
    registry.add_exporter("torch", _torch_reader.to_torch, types=("torch:Tensor",),
                          preserves_readonly=False)
    from ._sharded import DTENSOR_TYPES, assemble_torch, dtensor_shards, refuse_dtensor

    for path in DTENSOR_TYPES:
        registry.add_type(path, reader=refuse_dtensor)
        registry.add_sharded_type(path, dtensor_shards)
    registry.add_shard_assembler("torch", assemble_torch)
