"""Two-process runs for the sharded-array tests: torch.distributed (DTensor) and jax.distributed.

The tests call :func:`launch`, which starts ``world`` copies of this file on the loopback
interface (one per rank), waits for them with a time limit, and returns what each rank saw:
``{scenario: {"ok": True, ...facts}}`` or ``{"ok": False, "error": type, "message": text}``.
Each scenario runs inside the worker and records facts (shapes, indices, pointer equalities,
value checks); the tests assert on them, so a failing scenario names itself.

    python dist_workers.py SUITE RANK WORLD PORT OUT.json DEVICE
    SUITE: dtensor | jax;  DEVICE: cpu | cuda
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import traceback
from datetime import timedelta
from pathlib import Path

__all__ = ["launch"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(suite: str, device: str, tmp_path: Path, world: int = 2,
           timeout: float = 240.0, env: dict | None = None) -> list[dict]:
    """Run ``suite`` on ``world`` local processes; one result dict per rank.

    Raises
    ------
    RuntimeError
        If a worker exits non-zero or runs past ``timeout`` (with its output).
    """
    port = _free_port()
    # No worker takes most of a GPU's memory up front (two share each machine), and NVLink
    # multicast stays off in NCCL, PyTorch and NVSHMEM (shared GPUs; see the device notes).
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(port), XLA_PYTHON_CLIENT_PREALLOCATE="false",
                    **(env or {}), NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
                    NVSHMEM_DISABLE_NVLS="1")
    outs = [tmp_path / f"{suite}-{device}-rank{r}.json" for r in range(world)]
    logs = [tmp_path / f"{suite}-{device}-rank{r}.log" for r in range(world)]
    procs = []
    for rank in range(world):
        with open(logs[rank], "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, __file__, suite, str(rank), str(world), str(port),
                 str(outs[rank]), device], stdout=log, stderr=subprocess.STDOUT, env=full_env))
    failures = []
    for rank, proc in enumerate(procs):
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            code = "timed out"
        if code != 0:
            failures.append(f"rank {rank}: {code}\n{logs[rank].read_text()[-3000:]}")
    if failures:
        raise RuntimeError(f"{suite} workers failed:\n" + "\n".join(failures))
    return [json.loads(out.read_text()) for out in outs]


# --- inside a worker ----------------------------------------------------------------------------

def _record(results: dict, name: str, fn) -> None:
    try:
        results[name] = {"ok": True, **fn()}
    except Exception as exc:  # a scenario's failure is a result the test reports
        results[name] = {"ok": False, "error": type(exc).__name__, "message": str(exc),
                         "traceback": traceback.format_exc()[-2000:]}


def _index(shard) -> list:
    return [[s.start, s.stop] for s in shard.index]


def dtensor_suite(rank: int, world: int, port: int, device: str) -> dict:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    import interop_core

    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=120))
    mesh = init_device_mesh(device, (world,))
    # Five rows over two ranks: an uneven split (3 + 2), as torch makes it.
    whole = torch.arange(5 * 4, dtype=torch.float32).reshape(5, 4).to(device)
    results: dict = {}

    def describe(dtensor, stream=None):
        found = interop_core.shards(dtensor, stream=stream)
        facts = {"count": len(found), "shape": list(found.shape), "complete": found.complete,
                 "dtype": str(found.dtype)}
        if len(found):
            shard = found[0]
            data = torch.from_dlpack(shard.view)
            facts.update(index=_index(shard), replica=shard.replica, device=list(shard.device),
                         same_memory=shard.view.ptr == dtensor.to_local().data_ptr(),
                         values=bool(torch.equal(data, whole[shard.index])))
        return facts

    _record(results, "shard_rows",
            lambda: describe(distribute_tensor(whole, mesh, [Shard(0)])))
    _record(results, "shard_columns",
            lambda: describe(distribute_tensor(whole, mesh, [Shard(1)])))
    _record(results, "replicate",
            lambda: describe(distribute_tensor(whole, mesh, [Replicate()])))
    mesh_2d = init_device_mesh(device, (1, world), mesh_dim_names=("dp", "tp"))
    _record(results, "mesh_2d_replicate_and_shard",
            lambda: describe(distribute_tensor(whole, mesh_2d, [Replicate(), Shard(0)])))
    if device == "cuda":
        stream = torch.cuda.Stream()
        _record(results, "per_device_stream",
                lambda: describe(distribute_tensor(whole, mesh, [Shard(0)]), {rank: stream}))

    def partial():
        interop_core.shards(DTensor.from_local(torch.ones(5, 4, device=device), mesh,
                                               [Partial()]))
        return {}

    _record(results, "partial_is_an_error", partial)

    def view_refuses():
        interop_core.view(distribute_tensor(whole, mesh, [Shard(0)]))
        return {}

    _record(results, "view_is_an_error", view_refuses)

    def round_trip():
        dtensor = distribute_tensor(whole, mesh, [Shard(0)])
        back = interop_core.to(interop_core.shards(dtensor), "torch")
        return {"type": type(back).__name__, "placements": str(back.placements),
                "same_memory": back.to_local().data_ptr() == dtensor.to_local().data_ptr(),
                "values": bool(torch.equal(back.full_tensor(), whole))}

    _record(results, "round_trip_to_dtensor", round_trip)

    rows = (slice(0, 3), slice(3, 5))[rank] if world == 2 else None

    def from_pieces(placements):
        # This rank's rows as a tensor of its own, assembled into a DTensor on the mesh.
        local = whole[rows].clone()
        pieces = interop_core.Shards.from_pieces(whole.shape, [(local, (rows, slice(None)))])
        built = interop_core.to(pieces, "torch", device_mesh=mesh, placements=placements)
        return {"type": type(built).__name__,
                "same_memory": built.to_local().data_ptr() == local.data_ptr(),
                "values": bool(torch.equal(built.full_tensor(), whole))}

    if rows is not None:
        _record(results, "assemble_dtensor_from_local_pieces", lambda: from_pieces([Shard(0)]))
        _record(results, "assemble_with_other_placements_is_an_error",
                lambda: from_pieces([Shard(1)]))
        _record(results, "assemble_with_placements_that_are_not_placements",
                lambda: from_pieces(["Shard(0)"]))
    dist.barrier()
    dist.destroy_process_group()
    return results


def jax_suite(rank: int, world: int, port: int, device: str) -> dict:
    import jax

    if device == "cpu":
        jax.config.update("jax_platforms", "cpu")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=world, process_id=rank,
                               local_device_ids=[rank] if device == "cuda" else None)
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    import interop_core

    devices = jax.devices()
    mesh = Mesh(np.array(devices), ("x",))
    whole = np.arange(len(devices) * 4 * 3, dtype=np.float32).reshape(len(devices) * 4, 3)
    array = jax.make_array_from_callback(whole.shape, NamedSharding(mesh, PartitionSpec("x")),
                                         lambda index: whole[index])
    results: dict = {}

    def local_shards():
        from interop_core.registry import _validation

        found = interop_core.shards(array)
        mine = array.addressable_shards
        # Which path served them: the compiled one, validated in this process, or jax's public.
        served_by = interop_core.plugins._shards.sharded_entry_for(type(array)).shards
        return {"path": served_by.__name__,
                "validation": [r.reason for r in _validation.results() if r.kind == "shards"],
                "global_devices": len(devices), "count": len(found),
                "shape": list(found.shape), "complete": found.complete,
                "indices": [_index(s) for s in found],
                "jax_indices": [[list(s.index[0].indices(whole.shape[0])[:2]),
                                 list(s.index[1].indices(whole.shape[1])[:2])] for s in mine],
                "devices": [list(s.device) for s in found],
                "same_memory": [s.view.ptr == j.data.unsafe_buffer_pointer()
                                for s, j in zip(found, mine, strict=True)],
                "values": [bool((np.asarray(interop_core.to(s.view, "jax")) ==
                                 whole[s.index]).all()) for s in found]}

    _record(results, "local_shards", local_shards)

    def round_trip():
        back = interop_core.to(interop_core.shards(array), "jax")
        return {"same_sharding": back.sharding == array.sharding,
                "fully_addressable": back.is_fully_addressable,
                "same_memory": [a.data.unsafe_buffer_pointer() == b.data.unsafe_buffer_pointer()
                                for a, b in zip(back.addressable_shards,
                                                array.addressable_shards, strict=True)]}

    _record(results, "round_trip_to_jax", round_trip)
    jax.distributed.shutdown()
    return results


def _main(argv: list[str]) -> int:
    suite, rank, world, port, out, device = argv
    run = {"dtensor": dtensor_suite, "jax": jax_suite}[suite]
    results = run(int(rank), int(world), int(port), device)
    Path(out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
