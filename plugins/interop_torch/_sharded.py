"""torch ``DTensor``: ``shards()`` of its local shard, ``to(shards, "torch")`` back to tensors.

Reading: a ``DTensor`` holds one local tensor per rank of its device mesh.  ``shards(dtensor)``
views that tensor (``DTensor.to_local()``: the same memory) and locates it in the global array
from the placements with torch's own ``compute_local_shape_and_global_offset``
(``torch.distributed.tensor._utils``: the helper DTensor itself and distributed checkpointing
use; torch has no public function for the offset).  Its replica id numbers the ranks holding
the same block: the rank's coordinates along the mesh dimensions placed ``Replicate()``.
``Shard(dim)`` and ``Replicate()`` are supported; ``Partial()`` (each rank holds a summand,
not a block) is a ``ValueError``, as are other placements (``_StridedShard``), whose local
tensor is not one block of the global array.

``view(dtensor)`` is a ``BufferError``: torch's own ``DTensor.__dlpack__`` would gather the
whole tensor onto every rank (a collective and a copy), not describe memory that exists.

Assembling: ``to(shards, "torch")`` hands each shard to torch (one tensor per shard, on its
device).  With ``device_mesh=`` and ``placements=``, or for shards read from a ``DTensor``,
it builds a ``DTensor`` with ``DTensor.from_local`` over this rank's shard, after checking
that the placements put exactly that block on this rank.

Loading this module imports no torch.
"""

from __future__ import annotations

import sys

import interop_core
from interop_core import Shards
from interop_core.shards import stream_for_device

__all__ = ["assemble_torch", "dtensor_shards", "refuse_dtensor"]

#: The ``"module:QualName"`` spellings of torch's DTensor (public since torch 2.4; before, the
#: private ``torch.distributed._tensor``).
DTENSOR_TYPES = ("torch.distributed.tensor:DTensor", "torch.distributed._tensor.api:DTensor")

_DEVICE_TYPES = {"cpu": 1, "cuda": 2}


def refuse_dtensor(tensor, stream=None):
    """Reader for ``DTensor``: its memory is split over ranks, so it is not one strided view.

    Raises
    ------
    BufferError
        Always.
    """
    raise BufferError(
        f"cannot view a torch DTensor as one strided view: its memory is split over the "
        f"{tensor.device_mesh.size()} rank(s) of its device mesh; interop_core.shards(dtensor) "
        "gives this rank's shard with its index in the global tensor")


def _check_placements(placements, ndim: int) -> list:
    """Normalised placements (non-negative shard dims); ValueError for unsupported ones."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.placement_types import Placement

    if isinstance(placements, str) or not hasattr(placements, "__iter__"):
        raise TypeError(f"placements must be a sequence of torch Placement objects (Shard(dim), "
                        f"Replicate()), got {placements!r}")
    out = []
    for mesh_dim, p in enumerate(placements):
        if not isinstance(p, Placement):
            raise TypeError(f"placements[{mesh_dim}] must be a torch Placement (Shard(dim), "
                            f"Replicate()), got {p!r} ({type(p).__name__})")
        if p.is_partial():
            raise ValueError(
                f"placement {p} on mesh dimension {mesh_dim}: every rank holds a partial value "
                "(a summand), not a block of the global tensor, so there are no shards to "
                "view; redistribute first, e.g. dtensor.redistribute(placements=[Replicate()])")
        if type(p) is Shard:
            if not -ndim <= p.dim < ndim:
                raise ValueError(f"placement {p} on mesh dimension {mesh_dim} names dimension "
                                 f"{p.dim} of a {ndim}-d tensor")
            out.append(Shard(p.dim % ndim) if p.dim < 0 else p)
        elif type(p) is Replicate:
            out.append(p)
        else:
            raise ValueError(
                f"placement {p} on mesh dimension {mesh_dim} is not supported: only Shard(dim) "
                "and Replicate() place one block of the global tensor on each rank")
    return out


def _block(global_shape, mesh, placements):
    """This rank's (local shape, offset) under the placements, from torch's own helper."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    return compute_local_shape_and_global_offset(global_shape, mesh, placements)


def _replica_id(mesh, placements, coordinate) -> int:
    from torch.distributed.tensor import Replicate

    replica = 0
    for mesh_dim, p in enumerate(placements):
        if type(p) is Replicate:
            replica = replica * mesh.size(mesh_dim) + coordinate[mesh_dim]
    return replica


def dtensor_shards(tensor, stream=None):
    """This rank's shard of a ``DTensor`` (``registry.add_sharded_type`` callable).

    Parameters
    ----------
    tensor : torch.distributed.tensor.DTensor
    stream : None, int, stream object or dict, optional
        Passed on to :meth:`interop_core.Shards.from_pieces`.

    Returns
    -------
    interop_core.Shards
        One shard (none on a rank outside the mesh); ``complete`` when the mesh has one rank.

    Raises
    ------
    ValueError
        For ``Partial()`` and other placements that do not place blocks.
    """
    mesh = tensor.device_mesh
    shape = tuple(tensor.shape)
    placements = _check_placements(tensor.placements, len(shape))
    local = tensor.to_local()
    coordinate = mesh.get_coordinate()
    if coordinate is None:   # this rank is not part of the mesh: it holds nothing
        return Shards.from_pieces(shape, [], dtype=interop_core.view(local).dlpack_dtype,
                                  source=tensor)
    local_shape, offset = _block(shape, mesh, placements)
    index = tuple(slice(o, o + n) for o, n in zip(offset, local_shape, strict=True))
    return Shards.from_pieces(shape, [(local, index, _replica_id(mesh, placements, coordinate))],
                              stream=stream, complete=mesh.size() == 1, source=tensor)


def _is_dtensor(obj) -> bool:
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(obj, module.DTensor)


def assemble_torch(shards, stream=None, *, device_mesh=None, placements=None):
    """torch tensors over the shards' memory (``registry.add_shard_assembler`` callable).

    Parameters
    ----------
    shards : interop_core.Shards
    stream : None, int, stream object or dict, optional
        The consumer stream (or ``{CUDA device id: stream}``) each shard is handed over on.
    device_mesh : torch.distributed.device_mesh.DeviceMesh, optional
        Build a ``DTensor`` on this mesh from this rank's shard.
    placements : sequence of Placement, optional
        The DTensor's placements (``Shard(dim)``, ``Replicate()``); required with
        ``device_mesh``.

    Returns
    -------
    tuple of torch.Tensor or DTensor
        One tensor per shard, on its device; a ``DTensor`` when ``device_mesh`` is given or
        the shards were read from a ``DTensor`` (its mesh and placements are reused).

    Raises
    ------
    TypeError
        For ``placements`` without ``device_mesh`` or the reverse.
    ValueError
        When a DTensor is asked for and this process holds more or fewer than one shard, the
        shard is on another kind of device than the mesh, or the placements put another
        block on this rank than the shard given.
    """
    if device_mesh is None and placements is not None:
        raise TypeError("to(shards, 'torch', placements=...) also needs device_mesh=")
    if device_mesh is None and _is_dtensor(shards.source):
        device_mesh, placements = shards.source.device_mesh, shards.source.placements
    if device_mesh is None:
        return tuple(interop_core.to(s.view, "torch", stream_for_device(stream, s.device))
                     for s in shards)
    if placements is None:
        raise TypeError("to(shards, 'torch', device_mesh=...) also needs placements=")
    return _to_dtensor(shards, stream, device_mesh, placements)


def _to_dtensor(shards, stream, device_mesh, placements):
    import torch
    from torch.distributed.tensor import DTensor

    shape = shards.shape
    placements = _check_placements(placements, len(shape))
    if len(placements) != device_mesh.ndim:
        raise ValueError(f"{len(placements)} placements for a {device_mesh.ndim}-d device mesh")
    if len(shards) != 1:
        raise ValueError(
            f"a DTensor holds one local shard per rank, but this process holds {len(shards)} "
            "shards: run one process per device under torch.distributed, or leave out "
            "device_mesh= for one tensor per shard")
    shard = shards[0]
    want = _DEVICE_TYPES.get(device_mesh.device_type)
    if shard.device[0] != want:
        raise ValueError(
            f"the shard is on DLPack device {shard.device}, but the device mesh is of "
            f"{device_mesh.device_type!r} devices: DTensor.from_local would copy it")
    if device_mesh.get_coordinate() is None:
        raise ValueError("this rank is not part of the device mesh, but holds a shard")
    local_shape, offset = _block(shape, device_mesh, placements)
    expected = tuple(slice(o, o + n) for o, n in zip(offset, local_shape, strict=True))
    given = tuple(slice(s.start, s.stop) for s in shard.index)
    if expected != given:
        def text(index):
            return "[" + ", ".join(f"{s.start}:{s.stop}" for s in index) + "]"

        raise ValueError(
            f"the requested placements {placements} do not match the shards given: on this "
            f"rank (mesh coordinate {device_mesh.get_coordinate()}) they put block "
            f"{text(expected)} of the global shape {shape}, the shard given is {text(given)}")
    local = interop_core.to(shard.view, "torch", stream_for_device(stream, shard.device))
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return DTensor.from_local(local, device_mesh, placements, run_check=False,
                              shape=torch.Size(shape), stride=tuple(reversed(strides)))
