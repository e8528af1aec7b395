"""Sharded arrays across processes: torch DTensor (torch.distributed) and jax.distributed.

Each suite starts two processes on the loopback interface (tests/dist_workers.py) once per
device kind: on the CPU (gloo; jax's CPU backend with two devices per process) everywhere, and
on two GPUs (NCCL; one GPU per process) where a machine has them.  The workers record what
each rank saw; the tests below check it rank by rank.
"""

from __future__ import annotations

import pytest
from dist_workers import launch

RANKS = [0, 1]


def _devices(suite: str) -> list:
    """Each suite on the CPU, and on two GPUs (ids name the suite, so -k can pick one)."""
    return [pytest.param("cpu", id=f"{suite}-cpu"),
            pytest.param("cuda", id=f"{suite}-cuda",
                         marks=[pytest.mark.gpu, pytest.mark.multi_gpu])]


def _device(device: str, rank: int) -> list:
    return [1, 0] if device == "cpu" else [2, rank]


@pytest.fixture(scope="module", params=_devices("dtensor"))
def dtensor_ranks(request, tmp_path_factory):
    pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    device = request.param
    if not dist.is_available():
        pytest.skip("this torch was built without torch.distributed")
    if device == "cpu" and not dist.is_gloo_available():
        pytest.skip("this torch has no gloo backend")
    if device == "cuda" and not dist.is_nccl_available():
        pytest.skip("this torch has no NCCL backend")
    return device, launch("dtensor", device, tmp_path_factory.mktemp(f"dtensor-{device}"))


# Five rows over two ranks: torch splits them 3 + 2.
BLOCKS = {
    "shard_rows": ([[[0, 3], [0, 4]], [[3, 5], [0, 4]]], [0, 0]),
    "shard_columns": ([[[0, 5], [0, 2]], [[0, 5], [2, 4]]], [0, 0]),
    "replicate": ([[[0, 5], [0, 4]], [[0, 5], [0, 4]]], [0, 1]),
    "mesh_2d_replicate_and_shard": ([[[0, 3], [0, 4]], [[3, 5], [0, 4]]], [0, 0]),
}


@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("placement", list(BLOCKS))
def test_each_rank_gets_its_block_of_a_dtensor(dtensor_ranks, placement, rank):
    device, ranks = dtensor_ranks
    seen = ranks[rank][placement]
    assert seen["ok"], seen
    indices, replicas = BLOCKS[placement]
    assert seen["count"] == 1 and seen["shape"] == [5, 4] and seen["dtype"] == "float32"
    assert seen["index"] == indices[rank] and seen["replica"] == replicas[rank]
    assert seen["device"] == _device(device, rank)
    assert seen["same_memory"] and seen["values"]
    assert not seen["complete"]   # the other rank holds the rest


@pytest.mark.parametrize("rank", RANKS)
def test_per_device_streams_order_each_ranks_shard(dtensor_ranks, rank):
    device, ranks = dtensor_ranks
    if device == "cpu":
        pytest.skip("needs a CUDA GPU: host memory has no streams to order")
    seen = ranks[rank]["per_device_stream"]
    assert seen["ok"], seen
    assert seen["same_memory"] and seen["values"]


@pytest.mark.parametrize("rank", RANKS)
def test_partial_placements_are_a_value_error(dtensor_ranks, rank):
    seen = dtensor_ranks[1][rank]["partial_is_an_error"]
    assert not seen["ok"] and seen["error"] == "ValueError"
    assert "partial value" in seen["message"] and "redistribute" in seen["message"]


@pytest.mark.parametrize("rank", RANKS)
def test_view_of_a_dtensor_is_a_buffer_error_naming_shards(dtensor_ranks, rank):
    seen = dtensor_ranks[1][rank]["view_is_an_error"]
    assert not seen["ok"] and seen["error"] == "BufferError"
    assert "interop_core.shards(dtensor)" in seen["message"]


@pytest.mark.parametrize("rank", RANKS)
def test_dtensor_shards_go_back_to_a_dtensor_over_the_same_memory(dtensor_ranks, rank):
    seen = dtensor_ranks[1][rank]["round_trip_to_dtensor"]
    assert seen["ok"], seen
    assert seen["type"] == "DTensor" and seen["placements"] == "(Shard(dim=0),)"
    assert seen["same_memory"] and seen["values"]


@pytest.mark.parametrize("rank", RANKS)
def test_local_pieces_assemble_into_a_dtensor(dtensor_ranks, rank):
    seen = dtensor_ranks[1][rank]["assemble_dtensor_from_local_pieces"]
    assert seen["ok"], seen
    assert seen["type"] == "DTensor" and seen["same_memory"] and seen["values"]


@pytest.mark.parametrize("rank", RANKS)
def test_placements_that_do_not_match_the_shards_are_a_value_error(dtensor_ranks, rank):
    seen = dtensor_ranks[1][rank]["assemble_with_other_placements_is_an_error"]
    assert not seen["ok"] and seen["error"] == "ValueError"
    assert "do not match the shards given" in seen["message"]


@pytest.mark.parametrize("rank", RANKS)
def test_placements_that_are_not_torch_placements_are_a_type_error(dtensor_ranks, rank):
    seen = dtensor_ranks[1][rank]["assemble_with_placements_that_are_not_placements"]
    assert not seen["ok"] and seen["error"] == "TypeError"
    assert "placements[0] must be a torch Placement" in seen["message"]
    assert "'Shard(0)'" in seen["message"]


@pytest.fixture(scope="module", params=_devices("jax"))
def jax_processes(request, tmp_path_factory):
    jax = pytest.importorskip("jax")
    device = request.param
    env = {}
    if device == "cpu":
        env = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    elif not any(d.platform in ("gpu", "cuda") for d in _jax_devices(jax)):
        pytest.skip("this jax has no CUDA backend")
    return device, launch("jax", device, tmp_path_factory.mktemp(f"jax-{device}"), env=env)


def _jax_devices(jax):
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


@pytest.mark.parametrize("rank", RANKS)
def test_each_jax_process_sees_only_its_addressable_shards(jax_processes, rank):
    device, ranks = jax_processes
    seen = ranks[rank]["local_shards"]
    assert seen["ok"], seen
    assert seen["path"] == "read_shards", seen["validation"]   # the compiled path validated
    per_process = 2 if device == "cpu" else 1
    assert seen["global_devices"] == 2 * per_process
    assert seen["count"] == per_process and not seen["complete"]
    assert seen["indices"] == seen["jax_indices"]
    rows = seen["shape"][0] // seen["global_devices"]
    first = rank * per_process
    assert seen["indices"] == [[[rows * k, rows * (k + 1)], [0, seen["shape"][1]]]
                               for k in range(first, first + per_process)]
    expected = _device(device, rank)
    assert seen["devices"] == [expected] * per_process
    assert all(seen["same_memory"]) and all(seen["values"])


@pytest.mark.parametrize("rank", RANKS)
def test_each_jax_process_assembles_its_part_of_the_global_array(jax_processes, rank):
    seen = jax_processes[1][rank]["round_trip_to_jax"]
    assert seen["ok"], seen
    assert seen["same_sharding"] and not seen["fully_addressable"]
    assert all(seen["same_memory"])
