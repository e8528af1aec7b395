"""Sharded arrays on two GPUs in one process: jax sharded over cuda:0 and cuda:1, per-device
views, torch tensors on each device, and back.  (Across processes: test_shards_distributed.py.)

Run on a two-GPU machine through scripts/gpu_check_2gpu.sh; skipped elsewhere.
"""

from __future__ import annotations

import warnings

import pytest

import interop_core
from interop_core import Shards
from interop_core.plugins import ReadOnlyHandoffWarning

pytestmark = [pytest.mark.gpu, pytest.mark.multi_gpu]

np = pytest.importorskip("numpy")


@pytest.fixture(scope="module")
def jax_gpus():
    jax = pytest.importorskip("jax")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        pytest.skip("this jax has no CUDA backend")
    if len(gpus) < 2:
        pytest.skip(f"needs two CUDA GPUs visible to jax (it sees {len(gpus)})")
    return jax, gpus[:2]


@pytest.fixture(scope="module")
def torch_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs two CUDA GPUs visible to torch (it sees {torch.cuda.device_count()})")
    return torch


def _rows(jax, gpus, whole):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    sharding = NamedSharding(Mesh(np.array(gpus), ("x",)), PartitionSpec("x"))
    return sharding, jax.device_put(whole, sharding)


@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
def test_jax_over_two_gpus_gives_one_view_per_gpu(jax_gpus, dtype):
    jax, gpus = jax_gpus
    whole = np.arange(8 * 6).reshape(8, 6).astype(dtype)
    _, x = _rows(jax, gpus, whole)
    found = interop_core.shards(x)
    assert [s.device for s in found] == [(2, g.local_hardware_id) for g in gpus]
    assert [s.view.ptr for s in found] == [s.data.unsafe_buffer_pointer()
                                          for s in x.addressable_shards]
    assert [[(i.start, i.stop) for i in s.index] for s in found] == [[(0, 4), (0, 6)],
                                                                     [(4, 8), (0, 6)]]
    for shard in found:
        np.testing.assert_array_equal(np.asarray(interop_core.to(shard.view, "jax")),
                                      whole[shard.index])


def test_jax_shards_become_torch_tensors_on_cuda0_and_cuda1(jax_gpus, torch_cuda):
    jax, gpus = jax_gpus
    torch = torch_cuda
    whole = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    _, x = _rows(jax, gpus, whole)
    found = interop_core.shards(x)
    with pytest.warns(ReadOnlyHandoffWarning):
        tensors = interop_core.to(found, "torch")
    assert [t.device for t in tensors] == [torch.device("cuda", g.local_hardware_id)
                                           for g in gpus]
    assert [t.data_ptr() for t in tensors] == [s.data.unsafe_buffer_pointer()
                                               for s in x.addressable_shards]
    for tensor, shard in zip(tensors, found, strict=True):
        np.testing.assert_array_equal(tensor.cpu().numpy(), whole[shard.index])


def test_torch_tensors_on_two_gpus_assemble_into_a_jax_array(jax_gpus, torch_cuda):
    jax, gpus = jax_gpus
    torch = torch_cuda
    whole = torch.arange(8 * 6, dtype=torch.float32).reshape(8, 6)
    top = whole[:4].to(f"cuda:{gpus[0].local_hardware_id}")
    bottom = whole[4:].to(f"cuda:{gpus[1].local_hardware_id}")
    torch.cuda.synchronize()
    found = Shards.from_pieces((8, 6), [(top, (slice(0, 4), slice(None))),
                                        (bottom, (slice(4, 8), slice(None)))], complete=True)
    sharding, _ = _rows(jax, gpus, np.zeros((8, 6), np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = interop_core.to(found, "jax", sharding=sharding)
    assert [s.data.unsafe_buffer_pointer() for s in x.addressable_shards] == [
        top.data_ptr(), bottom.data_ptr()]
    np.testing.assert_array_equal(np.asarray(x), whole.numpy())


def test_shards_on_the_wrong_gpus_do_not_match_the_sharding(jax_gpus, torch_cuda):
    jax, gpus = jax_gpus
    torch = torch_cuda
    # Both halves on the first GPU: the sharding wants the second half on the second.
    first = f"cuda:{gpus[0].local_hardware_id}"
    top, bottom = torch.zeros(4, 6, device=first), torch.ones(4, 6, device=first)
    found = Shards.from_pieces((8, 6), [(top, (slice(0, 4), slice(None))),
                                        (bottom, (slice(4, 8), slice(None)))])
    sharding, _ = _rows(jax, gpus, np.zeros((8, 6), np.float32))
    with pytest.raises(ValueError, match="needs each block already on its device"):
        interop_core.to(found, "jax", sharding=sharding)


def test_per_device_streams_order_each_gpus_shard(torch_cuda):
    torch = torch_cuda
    streams = {0: torch.cuda.Stream(device=0), 1: torch.cuda.Stream(device=1)}
    for trial in range(1, 6):
        blocks = []
        for device in (0, 1):
            with torch.cuda.device(device):
                # Slow producer work on each device's current stream, then the values.
                torch.cuda._sleep(20_000_000)
                blocks.append(torch.full((4, 6), float(trial), device=f"cuda:{device}"))
        found = Shards.from_pieces((8, 6), [(blocks[0], (slice(0, 4), slice(None))),
                                            (blocks[1], (slice(4, 8), slice(None)))],
                                   stream=streams)
        copies = []
        for shard in found:
            device = shard.device[1]
            # to() without a stream adds no ordering of its own: only shards(stream=) did.
            tensor = interop_core.to(shard.view, "torch")
            with torch.cuda.device(device), torch.cuda.stream(streams[device]):
                copies.append(tensor.clone())
        for device, copy in enumerate(copies):
            streams[device].synchronize()
            assert float(copy.min()) == float(trial)


def test_a_stream_dict_without_a_gpus_entry_is_a_value_error(torch_cuda):
    torch = torch_cuda
    block = torch.zeros(2, 3, device="cuda:1")
    with pytest.raises(ValueError, match="no entry for CUDA device 1"):
        interop_core.shards(block, stream={0: torch.cuda.Stream(device=0)})


def test_the_compiled_sharded_path_validates_on_the_gpus_and_splits_as_jax_does(jax_gpus):
    from conftest import validation_result
    from interop_jax import _reader
    from interop_jax._sharded import jax_shards

    jax, gpus = jax_gpus
    t = type(jax.device_put(np.zeros(1, np.float32), gpus[0]))
    result = validation_result(f"{t.__module__}:{t.__qualname__}", "shards")
    assert result.validated and result.details["devices"] >= 2, result.reason
    assert interop_core.plugins._shards.sharded_entry_for(t).shards is _reader.read_shards
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    whole = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    sharding, x = _rows(jax, gpus, whole)
    replicated = jax.device_put(whole, NamedSharding(Mesh(np.array(gpus), ("x",)),
                                                     PartitionSpec()))
    for y in (x, replicated, jax.jit(jax.numpy.negative)(x)):
        fast, public = _reader.read_shards(y), jax_shards(y)
        assert [(s.view.ptr, s.view.shape, s.device, [(i.start, i.stop) for i in s.index],
                 s.replica) for s in fast] == [
            (s.view.ptr, s.view.shape, s.device, [(i.start, i.stop) for i in s.index],
             s.replica) for s in public]
        assert [s.view.ptr for s in fast] == [s.data.unsafe_buffer_pointer()
                                             for s in y.addressable_shards]


def test_jax_shards_over_two_gpus_order_on_each_gpus_stream(jax_gpus, torch_cuda):
    jax, gpus = jax_gpus
    torch = torch_cuda
    whole = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    _, x = _rows(jax, gpus, whole)
    streams = {g.local_hardware_id: torch.cuda.Stream(device=g.local_hardware_id) for g in gpus}
    found = interop_core.shards(x, stream=streams)
    assert [s.view.ptr for s in found] == [s.view.ptr for s in interop_core.shards(x)]
    for shard in found:
        device = shard.device[1]
        with torch.cuda.device(device), torch.cuda.stream(streams[device]):
            with pytest.warns(ReadOnlyHandoffWarning):     # jax memory is read-only
                tensor = interop_core.to(shard.view, "torch")
            copy = tensor.clone()
        streams[device].synchronize()
        np.testing.assert_array_equal(copy.cpu().numpy(), whole[shard.index])
