"""interop_core.shards(): per-device views of sharded arrays, and assembling them back.

jax runs here with four CPU devices (tests/conftest.py sets XLA_FLAGS before jax starts), so
its sharded arrays are real multi-device arrays on any machine.  torch DTensor and
jax.distributed across processes: test_shards_distributed.py.
"""

from __future__ import annotations

import gc
import warnings
import weakref

import pytest

import interop_core
from interop_core import Shard, Shards
from interop_core.plugins import ReadOnlyHandoffWarning

np = pytest.importorskip("numpy")


# --- helpers ------------------------------------------------------------------------------------

def _blocks(found) -> list:
    """Each shard's index as [(start, stop), ...]."""
    return [[(s.start, s.stop) for s in shard.index] for shard in found]


def _aligned(shape, dtype=np.float32, align=64):
    """A numpy array whose data starts on an `align`-byte boundary (jax shares only those)."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.zeros(n + align, np.uint8)
    offset = (-raw.ctypes.data) % align
    out = raw[offset:offset + n].view(dtype).reshape(shape)
    out[...] = np.arange(out.size).reshape(shape)
    return out


def _host_values(view):
    return np.asarray(interop_core.to(view, "numpy"))


@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    if len(jax.devices("cpu")) < 4:
        pytest.fail("these tests need jax's four CPU devices: tests/conftest.py sets XLA_FLAGS="
                    "--xla_force_host_platform_device_count=4 before jax starts, unless "
                    "XLA_FLAGS already set a device count or jax started earlier")
    return jax


def _mesh(jax, shape, names):
    from jax.sharding import Mesh

    count = int(np.prod(shape))
    return Mesh(np.array(jax.devices("cpu")[:count]).reshape(shape), names)


def _sharding(jax, kind):
    from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

    if kind == "single_device":
        return SingleDeviceSharding(jax.devices("cpu")[1])
    if kind == "rows":
        return NamedSharding(_mesh(jax, (4,), ("x",)), PartitionSpec("x"))
    if kind == "grid":
        return NamedSharding(_mesh(jax, (2, 2), ("x", "y")), PartitionSpec("x", "y"))
    if kind == "rows_replicated":
        return NamedSharding(_mesh(jax, (2, 2), ("x", "y")), PartitionSpec("x"))
    if kind == "columns_replicated":
        return NamedSharding(_mesh(jax, (2, 2), ("x", "y")), PartitionSpec(None, "y"))
    if kind == "replicated":
        return NamedSharding(_mesh(jax, (2, 2), ("x", "y")), PartitionSpec())
    if kind == "gspmd":
        named = _sharding(jax, "grid")
        return _gspmd_type(jax)(tuple(named.mesh.devices.flat), named._to_xla_hlo_sharding(2))
    if kind == "positional":
        return jax.sharding.PositionalSharding(jax.devices("cpu")[:4]).reshape(2, 2)
    raise ValueError(kind)


def _gspmd_type(jax):
    found = getattr(jax.sharding, "GSPMDSharding", None)
    if found is None:
        from jax._src import sharding_impls

        found = getattr(sharding_impls, "GSPMDSharding", None)
    return found


def _sharding_kinds():
    kinds = ["single_device", "rows", "grid", "rows_replicated", "columns_replicated",
             "replicated"]
    try:
        import jax
    except ImportError:
        return kinds
    # GSPMDSharding and PositionalSharding exist only in some jax versions: tested where they do.
    if _gspmd_type(jax) is not None:
        kinds.append("gspmd")
    if hasattr(jax.sharding, "PositionalSharding"):
        kinds.append("positional")
    return kinds


SHARDINGS = _sharding_kinds()


def _sharded(jax, kind, dtype="float32", shape=(8, 6)):
    whole = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
    return whole, jax.device_put(whole, _sharding(jax, kind))


# --- single-device objects: one shard covering everything ---------------------------------------

def _plain(framework):
    if framework == "numpy":
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        return a, a.ctypes.data
    if framework == "torch":
        torch = pytest.importorskip("torch")
        t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        return t, t.data_ptr()
    if framework == "jax":
        jax = pytest.importorskip("jax")
        x = jax.device_put(np.arange(12, dtype=np.float32).reshape(3, 4), jax.devices("cpu")[0])
        return x, x.unsafe_buffer_pointer()
    if framework == "view":
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        return interop_core.view(a), a.ctypes.data
    raise ValueError(framework)


@pytest.mark.parametrize("framework", ["numpy", "torch", "jax", "view"])
def test_single_device_array_is_one_shard_covering_it(framework):
    obj, ptr = _plain(framework)
    found = interop_core.shards(obj)
    assert isinstance(found, Shards) and len(found) == 1
    (shard,) = found
    assert isinstance(shard, Shard)
    assert found.shape == (3, 4) and found.dtype == np.float32 and found.ndim == 2
    assert found.dlpack_dtype == (2, 32, 1)
    assert found.complete and found.source is obj
    assert shard.index == (slice(0, 3), slice(0, 4)) and shard.replica == 0
    assert shard.view.ptr == ptr and shard.device == (1, 0)
    np.testing.assert_array_equal(_host_values(shard.view), np.arange(12).reshape(3, 4))


def test_shards_is_a_read_only_sequence():
    from collections.abc import Sequence

    found = interop_core.shards(np.zeros((2, 2), np.float32))
    assert isinstance(found, Sequence)
    assert list(found) == [found[0]] == list(reversed(found)) == list(found[:])
    assert found.index(found[0]) == 0 and found.count(found[0]) == 1 and found[0] in found
    with pytest.raises(TypeError):
        found[0] = None
    with pytest.raises(TypeError):
        Shards()
    with pytest.raises(TypeError):
        Shard()


# --- jax arrays under every sharding ------------------------------------------------------------

@pytest.mark.parametrize("kind", SHARDINGS)
def test_jax_shards_are_jaxs_own_addressable_shards(jax, kind):
    whole, x = _sharded(jax, kind)
    found = interop_core.shards(x)
    mine = x.addressable_shards
    assert len(found) == len(mine)
    assert found.shape == whole.shape and found.dtype == whole.dtype
    assert found.complete and found.source is x
    for shard, theirs in zip(found, mine, strict=True):
        assert shard.view.ptr == theirs.data.unsafe_buffer_pointer()
        assert [(s.start, s.stop) for s in shard.index] == [
            s.indices(n)[:2] for s, n in zip(theirs.index, whole.shape, strict=True)]
        assert shard.replica == theirs.replica_id
        assert shard.device == (1, 0) and shard.view.readonly
        np.testing.assert_array_equal(_host_values(shard.view), whole[shard.index])


@pytest.mark.parametrize("kind", ["rows_replicated", "replicated"])
def test_replicated_blocks_are_reported_once_per_copy(jax, kind):
    _, x = _sharded(jax, kind)
    found = interop_core.shards(x)
    copies: dict = {}
    for block, shard in zip(_blocks(found), found, strict=True):
        copies.setdefault(tuple(block), []).append(shard.replica)
    assert all(sorted(ids) == list(range(len(ids))) for ids in copies.values())
    assert sum(len(ids) for ids in copies.values()) == 4


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "float16", "float32",
                                   "complex64"])
def test_jax_shards_keep_the_element_type(jax, dtype):
    whole, x = _sharded(jax, "grid", dtype)
    found = interop_core.shards(x)
    assert found.dtype == np.dtype(dtype)
    for shard in found:
        np.testing.assert_array_equal(_host_values(shard.view), whole[shard.index])


def test_jax_shards_of_a_three_dimensional_array_split_in_the_middle(jax):
    from jax.sharding import NamedSharding, PartitionSpec

    whole = np.arange(2 * 8 * 3, dtype=np.float32).reshape(2, 8, 3)
    x = jax.device_put(whole, NamedSharding(_mesh(jax, (4,), ("x",)), PartitionSpec(None, "x")))
    found = interop_core.shards(x)
    assert _blocks(found) == [[(0, 2), (2 * i, 2 * i + 2), (0, 3)] for i in range(4)]
    for shard in found:
        np.testing.assert_array_equal(_host_values(shard.view), whole[shard.index])


def test_view_of_a_sharded_jax_array_names_shards(jax):
    _, x = _sharded(jax, "rows")
    with pytest.raises(BufferError, match=r"use interop_core\.shards\(\) for one view per"):
        interop_core.view(x)


# --- jax: the compiled path, checked against jax's public one ------------------------------------

def _jax_type_path(jax):
    t = type(jax.numpy.zeros(1))
    return f"{t.__module__}:{t.__qualname__}"


def _split(found) -> list:
    """Everything a shard says: its view's memory, its device, its block and replica id."""
    return [(s.view.ptr, s.view.shape, s.view.strides, s.view.dlpack_dtype, s.device,
             s.view.readonly, tuple((i.start, i.stop) for i in s.index), s.replica)
            for s in found]


def _jaxs_split(x) -> list:
    """The same, from jax's own addressable_shards."""
    return [(s.data.unsafe_buffer_pointer(), s.data.shape,
             tuple(s.indices(n)[:2] for s, n in zip(s.index, x.shape, strict=True)),
             s.replica_id) for s in x.addressable_shards]


@pytest.mark.parametrize("kind", SHARDINGS)
def test_the_compiled_path_splits_every_sharding_as_jaxs_public_path_does(jax, kind):
    from interop_jax import _reader
    from interop_jax._sharded import jax_shards

    whole, x = _sharded(jax, kind)
    assert interop_core.plugins._shards.sharded_entry_for(type(x)).shards is _reader.read_shards
    again = jax.device_put(whole + 1, x.sharding)          # the plan of this sharding, reused
    computed = jax.jit(jax.numpy.negative)(x)             # fresh per-device arrays, jax's order
    for y in (x, again, computed):
        fast, public = _reader.read_shards(y), jax_shards(y)
        assert _split(fast) == _split(public)
        assert [(p, s, b, r) for p, s, _, _, _, _, b, r in _split(fast)] == _jaxs_split(y)
        assert (fast.shape, fast.dtype, fast.complete, fast.source) == (
            public.shape, public.dtype, public.complete, y)
        np.testing.assert_array_equal(_host_values(fast[-1].view), np.asarray(y)[fast[-1].index])


def test_the_sharded_path_validates_on_this_jax(jax):
    from conftest import validation_result

    result = validation_result(_jax_type_path(jax), "shards")
    assert result.validated, result.reason
    assert result.canaries >= 12 and result.details["arrays_checked"] == result.canaries
    # Each shard view holds its per-device buffer (jax's external reference), as view() does.
    assert result.details["holds"].startswith("one per shard view")


class _Impostor:
    """A jax array whose per-device arrays are listed other than jax lists them."""

    def __init__(self, array, arrays):
        self._array, self._arrays = array, arrays

    def __getattr__(self, name):
        return getattr(self._array, name)


def test_per_device_arrays_not_where_the_plan_puts_them_take_the_public_path(jax):
    from interop_jax import _reader

    whole, x = _sharded(jax, "rows")
    _reader.read_shards(x)                                  # the plan of this sharding exists
    swapped = _Impostor(x, [x._arrays[1], x._arrays[0], *x._arrays[2:]])
    found = _reader.read_shards(swapped)
    assert [(p, s, b, r) for p, s, _, _, _, _, b, r in _split(found)] == _jaxs_split(x)


class _LyingArray:
    """A per-device array whose DLPack export is of other memory (a changed jax): the compiled
    path holds and describes what that export says."""

    def __init__(self, array):
        self._array = array
        self._other = array + 1         # the same shape, dtype and device; other memory

    def addressable_data(self, index):
        return self._other

    def __getattr__(self, name):
        return getattr(self._array, name)


def test_a_sharded_path_that_splits_a_canary_differently_is_replaced_by_jaxs_public_one(
        jax, registered):
    from conftest import validation_result
    from interop_jax import _reader
    from interop_jax._sharded import jax_shards

    whole, x = _sharded(jax, "grid")
    path = _jax_type_path(jax)
    canary = _Impostor(x, [_LyingArray(a) for a in x._arrays])
    name = registered(lambda r: r.add_sharded_type(
        path, _reader.read_shards, fallback=jax_shards,
        prepare=_reader.prepare_shards, canaries=lambda: [canary]), "jax-lying-canary")
    found = interop_core.shards(x)
    result = validation_result(path, "shards")
    assert not result.validated and "canary read differently" in result.reason
    assert interop_core.plugins._shards.sharded_entry_for(type(x)).shards is jax_shards
    assert [(p, s, b, r) for p, s, _, _, _, _, b, r in _split(found)] == _jaxs_split(x)
    interop_core.unregister_plugin(name)
    assert interop_core.plugins._shards.sharded_entry_for(type(x)).shards is _reader.read_shards


def test_a_reader_that_fell_back_takes_the_sharded_path_down_with_it(jax, force_validation):
    from interop_jax import _reader
    from interop_jax._sharded import jax_shards

    whole, x = _sharded(jax, "rows_replicated")
    force_validation(_jax_type_path(jax), False, "simulated by the test")
    assert "did not pass its validation" in _reader.prepare_shards()
    assert interop_core.plugins._shards.sharded_entry_for(type(x)).shards is jax_shards
    assert [(p, s, b, r) for p, s, _, _, _, _, b, r in _split(interop_core.shards(x))] == (
        _jaxs_split(x))


@pytest.mark.parametrize("path", ["compiled", "public"])
@pytest.mark.parametrize("how", ["deleted", "donated"])
def test_shards_of_a_deleted_or_donated_jax_array_is_a_clear_error(jax, force_validation, how,
                                                                   path):
    if path == "public":
        force_validation(_jax_type_path(jax), False, "simulated by the test")
    _, x = _sharded(jax, "grid")
    if how == "deleted":
        x.delete()
    else:
        jax.jit(lambda a: a * 2, donate_argnums=0)(x)
    assert x.is_deleted()
    with pytest.raises(BufferError, match="shards of a deleted jax array"):
        interop_core.shards(x)


def test_a_column_major_device_layout_keeps_its_strides_in_every_shard(jax):
    from jax.experimental.layout import Format, Layout

    whole, x = _sharded(jax, "rows")
    y = jax.device_put(x, Format(Layout(major_to_minor=(1, 0)), x.sharding))
    found = interop_core.shards(y)
    assert [s.view.strides for s in found] == [(1, 2)] * 4
    for shard in found:
        np.testing.assert_array_equal(_host_values(shard.view), whole[shard.index])


@pytest.mark.parametrize("kind", ["rows", "grid", "replicated"])
def test_shards_of_an_array_jax_is_still_computing_show_the_computed_values(jax, kind):
    """jax's CPU work is not stream-ordered and host consumers read at once: every shard's
    per-device array is waited for when its view's memory is first used (as for view() of a
    single-device array), on the first read (through the plan) and on reads answered from the
    caches."""
    sharding = _sharding(jax, kind)

    @jax.jit
    def slow(a):        # hundreds of ms of CPU work, dispatched asynchronously
        for _ in range(16):
            a = jax.numpy.tanh(a @ a)
        return a

    start = jax.device_put(np.full((512, 512), 0.001, np.float32), sharding)
    expected = np.asarray(slow(start))
    for _ in range(3):      # a new pending array each time: full read, admitted, cached
        x = slow(start)
        found = interop_core.shards(x)
        for shard in found:
            np.testing.assert_array_equal(_host_values(shard.view), expected[shard.index])
    for _ in range(3):      # the same array again: the per-sharded-array cache answers
        for shard in interop_core.shards(x):
            np.testing.assert_array_equal(_host_values(shard.view), expected[shard.index])


@pytest.mark.parametrize("kind", ["rows", "grid", "column_major"])
def test_shards_read_again_from_the_readers_cache_stay_right(jax, kind):
    """The per-device arrays of an array read again are answered from the reader's per-array
    cache (admitted on the second read): every read says what jax says, deleting is refused."""
    from jax.experimental.layout import Format, Layout

    whole, x = _sharded(jax, "rows" if kind == "column_major" else kind)
    if kind == "column_major":
        x = jax.device_put(x, Format(Layout(major_to_minor=(1, 0)), x.sharding))
    first = [(s.view.ptr, s.view.shape, s.view.strides) for s in interop_core.shards(x)]
    for _ in range(3):
        found = interop_core.shards(x)
        assert [(s.view.ptr, s.view.shape, s.view.strides) for s in found] == first
        for shard in found:
            np.testing.assert_array_equal(_host_values(shard.view), whole[shard.index])
    # The per-device arrays read one by one agree with the cached shard reads.
    for shard, a in zip(interop_core.shards(x), x._arrays, strict=True):
        v = interop_core.view(a)
        assert (v.ptr, v.shape, v.strides) == (shard.view.ptr, shard.view.shape,
                                              shard.view.strides)
    x.delete()
    with pytest.raises(BufferError, match="shards of a deleted jax array"):
        interop_core.shards(x)


@pytest.mark.parametrize("stream", [{}, -1])
def test_jax_shards_ordered_on_a_stream_are_read_per_piece_from_the_same_plan(jax, stream):
    whole, x = _sharded(jax, "rows_replicated")
    found = interop_core.shards(x, stream=stream)
    assert _split(found) == _split(interop_core.shards(x))


# --- the jax reader's per-sharded-array cache: an array read again is answered from what its
# last full read found, confirmed on every read by the array's and its per-device arrays'
# identities and that none is deleted; it must never describe a freed buffer, miss a change jax
# makes to the array, or keep an array alive.

def _pointers(x) -> list:
    return [s.data.unsafe_buffer_pointer() for s in x.addressable_shards]


@pytest.mark.parametrize("kind", ["rows", "grid", "rows_replicated", "replicated"])
def test_repeated_shards_of_one_array_are_equal_and_independent(jax, kind):
    whole, x = _sharded(jax, kind)
    results = [interop_core.shards(x) for _ in range(4)]    # full, admitted, then cache hits
    for found in results:
        assert _split(found) == _split(results[0])
        assert [(p, s, b, r) for p, s, _, _, _, _, b, r in _split(found)] == _jaxs_split(x)
        assert (found.shape, found.dtype, found.complete, found.source) == (
            x.shape, x.dtype, True, x)
        assert [s.view.owner for s in found] == list(x._arrays)
    # Every read is a new collection of new records over new views.
    for made in ([id(r) for r in results], [id(s) for r in results for s in r],
                 [id(s.view) for r in results for s in r]):
        assert len(set(made)) == len(made)
    del results[1:]
    gc.collect()
    for shard in results[0]:
        np.testing.assert_array_equal(_host_values(shard.view), whole[shard.index])


@pytest.mark.parametrize("read_before", [3, 0])
@pytest.mark.parametrize("how", ["deleted", "donated", "one_shard_deleted",
                                 "one_shard_donated"])
def test_a_deleted_or_donated_array_is_a_clear_error_after_cached_reads(jax, how, read_before):
    _, x = _sharded(jax, "grid")
    for _ in range(read_before):        # a full read, admitted to the cache, a hit
        assert len(interop_core.shards(x)) == 4
    if how == "deleted":
        x.delete()
    elif how == "donated":
        jax.jit(lambda a: a * 2, donate_argnums=0)(x)
    else:
        # Not the first shard: jaxlib's is_deleted() of the whole array asks only that one.
        piece = x.addressable_shards[-1].data
        if how == "one_shard_deleted":
            piece.delete()
        else:
            jax.jit(lambda a: a * 2, donate_argnums=0)(piece)
        assert piece.is_deleted()
    for _ in range(2):
        with pytest.raises(BufferError, match="shards of a deleted jax array"):
            interop_core.shards(x)


def test_cached_shards_follow_jaxs_replace_with(jax):
    """jax's mutable arrays swap a whole array's contents (``_replace_with``): the next read
    describes the new buffers, shape and dtype, not the cached ones."""
    whole, x = _sharded(jax, "rows")
    if not hasattr(x, "_replace_with"):
        pytest.skip("this jaxlib has no _replace_with")
    for _ in range(3):
        interop_core.shards(x)
    same_aval = jax.device_put(whole + 1, x.sharding)
    x._replace_with(same_aval)
    for _ in range(3):                  # read afresh, admitted again, a hit
        found = interop_core.shards(x)
        assert [s.view.ptr for s in found] == _pointers(same_aval)
        for shard in found:
            np.testing.assert_array_equal(_host_values(shard.view), (whole + 1)[shard.index])
    other_whole, other = _sharded(jax, "rows", dtype="int8", shape=(16, 2))
    try:
        x._replace_with(other)
    except jax.errors.JaxRuntimeError as exc:      # jax 0.12 replaces only like with like
        assert "Unable to replace" in str(exc)
        return
    for _ in range(3):
        found = interop_core.shards(x)
        assert (found.shape, found.dtype) == ((16, 2), np.int8)
        assert [s.view.ptr for s in found] == _pointers(other)
        assert _blocks(found) == [[(4 * k, 4 * k + 4), (0, 2)] for k in range(4)]
        for shard in found:
            np.testing.assert_array_equal(_host_values(shard.view), other_whole[shard.index])


def test_cached_shards_of_many_arrays_and_of_recycled_addresses(jax):
    """More arrays than the cache holds, read in turn, and new arrays at freed arrays'
    addresses (each round frees the last one's), read right."""
    sharding = _sharding(jax, "rows")
    dtypes = [np.float32, np.int8, np.float16]
    for _round in range(3):
        arrays = [jax.device_put(np.full((8, i % 4 + 1), i % 100, dtype=dtypes[i % 3]), sharding)
                  for i in range(150)]
        for _ in range(3):              # full reads, admitted, hits (where still cached)
            for i, a in enumerate(arrays):
                found = interop_core.shards(a)
                assert (found.shape, found.dtype) == ((8, i % 4 + 1), dtypes[i % 3])
                assert [s.view.ptr for s in found] == _pointers(a)
                assert [s.view.owner for s in found] == list(a._arrays)
                assert _host_values(found[-1].view)[0, 0] == i % 100
        del arrays, a, found


def test_the_cache_keeps_no_array_or_buffer_alive(jax):
    whole, x = _sharded(jax, "grid")
    for _ in range(4):                  # a full read, admitted, hits; every result dropped
        interop_core.shards(x)
    array = weakref.ref(x)
    pieces = [weakref.ref(a) for a in x._arrays]
    del x
    gc.collect()
    assert array() is None
    assert [p() for p in pieces] == [None] * 4


# --- assembling ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", SHARDINGS)
def test_jax_round_trip_shares_every_device_buffer(jax, kind):
    whole, x = _sharded(jax, kind)
    back = interop_core.to(interop_core.shards(x), "jax")
    assert back.sharding == x.sharding and back.shape == x.shape
    assert [s.data.unsafe_buffer_pointer() for s in back.addressable_shards] == [
        s.data.unsafe_buffer_pointer() for s in x.addressable_shards]
    np.testing.assert_array_equal(np.asarray(back), whole)


def _pieces(framework, whole, parts):
    """`whole` cut into row blocks, each a separate (64-byte aligned) object of `framework`."""
    rows = whole.shape[0] // parts
    blocks = [_aligned((rows, *whole.shape[1:])) for _ in range(parts)]
    for i, block in enumerate(blocks):
        block[...] = whole[i * rows:(i + 1) * rows]
    if framework == "torch":
        torch = pytest.importorskip("torch")
        blocks = [torch.from_numpy(b) for b in blocks]
    elif framework == "view":
        blocks = [interop_core.view(b) for b in blocks]
    return [(b, (slice(i * rows, (i + 1) * rows), slice(None))) for i, b in enumerate(blocks)]


def _ptr(obj):
    return interop_core.view(obj).ptr


@pytest.mark.parametrize("framework", ["numpy", "torch", "view"])
def test_pieces_of_any_framework_assemble_into_a_jax_array_without_copies(jax, framework):
    from jax.sharding import NamedSharding, PartitionSpec

    whole = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    pieces = _pieces(framework, whole, 4)
    found = Shards.from_pieces(whole.shape, pieces, complete=True)
    sharding = NamedSharding(_mesh(jax, (4,), ("x",)), PartitionSpec("x"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a copy would warn (JaxCopyWarning)
        x = interop_core.to(found, "jax", sharding=sharding)
    assert x.sharding == sharding
    assert [s.data.unsafe_buffer_pointer() for s in x.addressable_shards] == [
        _ptr(piece) for piece, _ in pieces]
    np.testing.assert_array_equal(np.asarray(x), whole)


def test_host_blocks_serve_every_replica_of_a_replicated_sharding(jax):
    from jax.sharding import NamedSharding, PartitionSpec

    whole = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    pieces = _pieces("numpy", whole, 2)
    found = Shards.from_pieces(whole.shape, pieces, complete=True)
    sharding = NamedSharding(_mesh(jax, (2, 2), ("x", "y")), PartitionSpec("x"))
    x = interop_core.to(found, "jax", sharding=sharding)
    np.testing.assert_array_equal(np.asarray(x), whole)
    assert {s.data.unsafe_buffer_pointer() for s in x.addressable_shards} == {
        _ptr(piece) for piece, _ in pieces}


@pytest.mark.parametrize("kind", ["rows", "grid", "replicated"])
def test_shards_hand_over_to_torch_one_tensor_each(jax, kind):
    torch = pytest.importorskip("torch")
    whole, x = _sharded(jax, kind)
    found = interop_core.shards(x)
    with pytest.warns(ReadOnlyHandoffWarning):   # jax memory is read-only; torch's cannot be
        tensors = interop_core.to(found, "torch")
    assert isinstance(tensors, tuple) and len(tensors) == len(found)
    for tensor, shard in zip(tensors, found, strict=True):
        assert isinstance(tensor, torch.Tensor) and tensor.data_ptr() == shard.view.ptr
        np.testing.assert_array_equal(tensor.numpy(), whole[shard.index])


@pytest.mark.parametrize("target", ["numpy", "torch"])
def test_a_target_without_options_gets_one_object_per_shard(target):
    if target == "torch":
        pytest.importorskip("torch")
    whole = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    pieces = _pieces("numpy", whole, 2)
    out = interop_core.to(Shards.from_pieces(whole.shape, pieces), target)
    assert [_ptr(o) for o in out] == [_ptr(p) for p, _ in pieces]


# --- the third-party plugin's sharded type (examples/third_party_plugin) ------------------------

def test_third_party_sharded_type_yields_shards_through_its_plugin():
    bytetensor = pytest.importorskip(
        "bytetensor", reason="pip install -e examples/third_party_plugin to run the example's tests")
    whole = bytetensor.ByteTensor.arange(12, "float32").reshape(6, 2)
    sharded = bytetensor.ShardedByteTensor.split(whole, 3)
    found = interop_core.shards(sharded)
    assert interop_core.plugins._shards.sharded_entry_for(type(sharded)).plugin == "bytetensor"
    assert found.shape == (6, 2) and found.complete and found.source is sharded
    assert _blocks(found) == [[(0, 2), (0, 2)], [(2, 4), (0, 2)], [(4, 6), (0, 2)]]
    assert [s.view.ptr for s in found] == [b.data_ptr for b in sharded.blocks]
    assert [_host_values(s.view).tolist() for s in found] == [b.tolist() for b in sharded.blocks]


# --- the plugin hook ----------------------------------------------------------------------------

class Halves:
    """A test framework's sharded type: an array kept as two halves along rows."""

    def __init__(self, top, bottom):
        self.top, self.bottom = top, bottom


def _halves_shards(obj, stream):
    rows = obj.top.shape[0]
    total = rows + obj.bottom.shape[0]
    return Shards.from_pieces((total, *obj.top.shape[1:]),
                              [(obj.top, (slice(0, rows), slice(None))),
                               (obj.bottom, (slice(rows, total), slice(None)))],
                              stream=stream, complete=True, source=obj)


def test_a_plugin_declares_a_sharded_type(registered):
    registered(lambda r: r.add_sharded_type(Halves, _halves_shards), "halves")
    top, bottom = np.zeros((2, 3), np.float32), np.ones((3, 3), np.float32)
    found = interop_core.shards(Halves(top, bottom))
    assert _blocks(found) == [[(0, 2), (0, 3)], [(2, 5), (0, 3)]]
    assert [s.view.ptr for s in found] == [top.ctypes.data, bottom.ctypes.data]
    assert "test_shards:Halves" in {c for i in interop_core.plugin_status()
                                    if i.name == "halves" for c in i.claims}


class SubHalves(Halves):
    pass


@pytest.mark.parametrize("subclasses", [True, False])
def test_subclasses_use_a_sharded_type_only_when_declared(registered, subclasses):
    registered(lambda r: r.add_sharded_type(Halves, _halves_shards, subclasses=subclasses),
               "halves")
    obj = SubHalves(np.zeros((2, 3), np.float32), np.ones((2, 3), np.float32))
    if subclasses:
        assert len(interop_core.shards(obj)) == 2
    else:
        with pytest.raises(TypeError, match="add_sharded_type"):
            interop_core.shards(obj)


def test_a_later_declaration_overrides_and_unregistering_restores(registered):
    def other(obj, stream):
        return Shards.from_pieces((5, 3), [(np.zeros((5, 3), np.float32), (slice(None),) * 2)])

    registered(lambda r: r.add_sharded_type(Halves, _halves_shards), "halves")
    name = registered(lambda r: r.add_sharded_type(Halves, other), "halves-override")
    obj = Halves(np.zeros((2, 3), np.float32), np.ones((3, 3), np.float32))
    assert len(interop_core.shards(obj)) == 1
    interop_core.unregister_plugin(name)
    assert len(interop_core.shards(obj)) == 2


def test_a_plugin_declares_a_shard_assembler(registered):
    seen = {}

    def assemble(found, stream, **options):
        seen.update(options, count=len(found), stream=stream)
        return "assembled"

    registered(lambda r: (r.add_exporter("halfstack", lambda v, s: v),
                          r.add_shard_assembler("halfstack", assemble)), "halfstack")
    found = interop_core.shards(np.zeros(3, np.float32))
    assert interop_core.to(found, "halfstack", None, colour="blue") == "assembled"
    assert seen == {"colour": "blue", "count": 1, "stream": None}


def _halves_off_by_one_replica(obj, stream):
    # A "fast path" that gets the replica ids wrong: what validation must catch.
    right = _halves_shards(obj, stream)
    layout = interop_core.ShardLayout(right.shape, [s.index for s in right], [1, 1],
                                      complete=True)
    return layout.shards([s.view for s in right], stream, obj)


@pytest.mark.parametrize("fault", ["canary", "prepare", "raises"])
def test_a_sharded_fast_path_that_fails_its_validation_is_replaced_by_its_fallback(
        registered, fault):
    from conftest import validation_result

    def prepare():
        if fault == "raises":
            raise RuntimeError("layout moved")
        return "refused by the test" if fault == "prepare" else {"checked": True}

    obj = Halves(np.zeros((2, 3), np.float32), np.ones((3, 3), np.float32))
    registered(lambda r: r.add_sharded_type(Halves, _halves_off_by_one_replica,
                                            fallback=_halves_shards, prepare=prepare,
                                            canaries=lambda: [obj]), "halves-fast")
    found = interop_core.shards(obj)
    assert [s.replica for s in found] == [0, 0] and found.complete
    result = validation_result("test_shards:Halves", "shards")
    assert not result.validated and result.kind == "shards"
    assert {"canary": "shard 0", "prepare": "refused by the test",
            "raises": "layout moved"}[fault] in result.reason


def test_a_sharded_fast_path_that_passes_its_validation_is_used(registered):
    from conftest import validation_result

    calls = []

    def fast(obj, stream):
        calls.append(obj)
        return _halves_shards(obj, stream)

    obj = Halves(np.zeros((2, 3), np.float32), np.ones((3, 3), np.float32))
    registered(lambda r: r.add_sharded_type(Halves, fast, fallback=_halves_shards,
                                            canaries=lambda: [obj]), "halves-fast")
    interop_core.shards(obj)
    result = validation_result("test_shards:Halves", "shards")
    assert result.validated and result.canaries == 1
    assert len(calls) == 2          # once for the canary, once for the call


def test_validation_checks_need_a_fallback_to_compare_with():
    with pytest.raises(RuntimeError, match="give fallback= too"):
        interop_core.register_plugin(
            __import__("conftest").make_plugin(
                lambda r: r.add_sharded_type(Halves, _halves_shards, canaries=list)),
            name="halves-no-fallback")


# --- layouts: blocks checked once, any data laid out so -------------------------------------------

def test_a_layout_checks_its_blocks_once_and_splits_any_data_laid_out_so():
    layout = interop_core.ShardLayout((4, 3), [(slice(0, 2), slice(None)),
                                               (slice(2, None), slice(0, 3))], complete=True)
    assert len(layout) == 2 and layout.shape == (4, 3) and layout.complete
    assert layout.indices == ((slice(0, 2), slice(0, 3)), (slice(2, 4), slice(0, 3)))
    assert layout.replicas == (0, 0)
    assert "[0:2, 0:3], [2:4, 0:3]" in repr(layout)
    for value in (0.0, 1.0):
        pieces = [np.full((2, 3), value, np.float32), np.full((2, 3), value + 1, np.float32)]
        found = layout.shards(pieces, source="mine")
        assert found.complete and found.source == "mine" and found.dtype == np.float32
        assert [s.view.ptr for s in found] == [p.ctypes.data for p in pieces]
        assert _blocks(found) == [[(0, 2), (0, 3)], [(2, 4), (0, 3)]]
    views = [interop_core.view(np.zeros((2, 3))), interop_core.view(np.zeros((2, 3)))]
    assert [s.view for s in layout.shards(views)] == views      # taken as they are


@pytest.mark.parametrize(("indices", "replicas", "message"), [
    ([(slice(0, 2),), (slice(1, 3),)], None, "overlap without being the same block"),
    ([(slice(0, 2),)], None, "cover 2 of the 4 elements"),
    ([(slice(0, 4),), (slice(0, 4),)], None, "same replica id 0"),
    ([(slice(0, 4),)], [-1], "negative"),
    ([(slice(0, 4),)], [0, 1], "2 replica ids for 1 shard indices"),
    ([(slice(0, 5),)], None, "does not lie within 0:4"),
])
def test_a_layout_whose_blocks_do_not_tile_the_shape_is_refused(indices, replicas, message):
    with pytest.raises(ValueError, match=message):
        interop_core.ShardLayout((4,), indices, replicas, complete=True)


def test_data_that_does_not_fit_a_layout_is_refused():
    layout = interop_core.ShardLayout((4,), [(slice(0, 2),), (slice(2, 4),)], complete=True)
    with pytest.raises(ValueError, match="2 shard"):
        layout.shards([np.zeros(2)])
    with pytest.raises(ValueError, match=r"spans \(2,\) but its data has shape \(3,\)"):
        layout.shards([np.zeros(2), np.zeros(3)])
    with pytest.raises(ValueError, match="differs from the global dtype"):
        layout.shards([np.zeros(2), np.zeros(2, np.float32)])
    empty = interop_core.ShardLayout((4,), [])
    assert len(empty.shards([], dtype="int8")) == 0
    with pytest.raises(ValueError, match="pass dtype="):
        empty.shards([])


# --- streams ------------------------------------------------------------------------------------

def test_host_shards_take_a_per_device_stream_dict_without_ordering():
    found = interop_core.shards(np.zeros(4, np.float32), stream={0: 0})
    assert found[0].view.ptr != 0
    pieces = _pieces("numpy", np.zeros((4, 2), np.float32), 2)
    assert len(Shards.from_pieces((4, 2), pieces, stream={})) == 2


@pytest.mark.parametrize("target", ["numpy", "jax"])
@pytest.mark.parametrize(("stream", "error"), [
    ("bad", TypeError), (1.5, TypeError), (-7, ValueError), ({0: "bad"}, TypeError),
    ({"0": 5}, TypeError), ({-1: 5}, TypeError)])
def test_a_malformed_stream_for_host_shards_is_refused_as_for_one_view(target, stream, error):
    if target == "jax":
        pytest.importorskip("jax")
    found = interop_core.shards(np.zeros((4, 2), np.float32))
    with pytest.raises(error, match="stream"):
        interop_core.to(found, target, stream=stream)


def test_stream_for_device_picks_each_cuda_devices_stream():
    from interop_core.shards import stream_for_device

    streams = {0: 11, 1: 22}
    assert stream_for_device(streams, (2, 1)) == 22
    assert stream_for_device(streams, (1, 0)) is None
    assert stream_for_device(7, (2, 3)) == 7
    with pytest.raises(ValueError, match="no entry for CUDA device 5"):
        stream_for_device(streams, (2, 5))


# --- lifetime -----------------------------------------------------------------------------------

def test_shards_keep_their_pieces_alive():
    top, bottom = _aligned((2, 3)), _aligned((2, 3))
    alive = [weakref.ref(top.base), weakref.ref(bottom.base)]
    found = Shards.from_pieces((4, 3), [(top, (slice(0, 2), slice(None))),
                                        (bottom, (slice(2, 4), slice(None)))])
    del top, bottom
    gc.collect()
    assert all(ref() is not None for ref in alive)
    assert _host_values(found[1].view)[0, 0] == 0.0
    del found
    gc.collect()
    assert all(ref() is None for ref in alive)


# --- bad input ----------------------------------------------------------------------------------

_ROW = np.zeros((2, 3), np.float32)

BAD_PIECES = {
    "overlapping blocks": ((4, 3), [(_ROW, (slice(0, 2), slice(None))),
                                    (_ROW, (slice(1, 3), slice(None)))],
                           ValueError, "overlap without being the same block"),
    "a gap": ((5, 3), [(_ROW, (slice(0, 2), slice(None))), (_ROW, (slice(3, 5), slice(None)))],
              ValueError, "cover 12 of the 15 elements"),
    "outside the shape": ((4, 3), [(_ROW, (slice(3, 5), slice(None)))],
                          ValueError, r"does not lie within 0:4"),
    "negative start": ((4, 3), [(_ROW, (slice(-2, None), slice(None)))],
                       ValueError, r"does not lie within 0:4"),
    "extent differs from the data": ((4, 3), [(_ROW, (slice(0, 3), slice(None)))],
                                     ValueError, r"spans \(3, 3\) but its data has shape \(2, 3\)"),
    "a step": ((4, 3), [(_ROW, (slice(0, 4, 2), slice(None)))], ValueError, "has a step"),
    "an int index": ((4, 3), [(_ROW, (0, slice(None)))], TypeError, "must be a slice"),
    "float bounds": ((4, 3), [(_ROW, (slice(0.0, 2.0), slice(None)))], TypeError,
                     "integer bounds"),
    "index of the wrong length": ((4, 3), [(_ROW, (slice(0, 2),))], ValueError,
                                  "has 1 entries for a 2-d"),
    "index not a tuple": ((4, 3), [(_ROW, slice(0, 2))], TypeError, "tuple of slices"),
    "data of another rank": ((4, 3, 1), [(_ROW, (slice(0, 2), slice(None), slice(None)))],
                             ValueError, "is 2-d"),
    "dtypes differ": ((4, 3), [(_ROW, (slice(0, 2), slice(None))),
                               (_ROW.astype(np.int32), (slice(2, 4), slice(None)))],
                      ValueError, "differs from the global dtype"),
    "same block, same replica": ((2, 3), [(_ROW, (slice(0, 2), slice(None)), 1),
                                          (_ROW, (slice(0, 2), slice(None)), 1)],
                                 ValueError, "same replica id 1"),
    "same empty block, same replica": ((0, 3), [(_ROW[:0], (slice(0, 0), slice(None)), 0),
                                                (_ROW[:0], (slice(0, 0), slice(None)), 0)],
                                       ValueError, "same replica id 0"),
    "bounds beyond int64": ((2, 3), [(_ROW, (slice(2**64, 2**64 + 2), slice(None)))],
                            ValueError, r"does not lie within 0:2"),
    "negative replica": ((2, 3), [(_ROW, (slice(0, 2), slice(None)), -1)], ValueError,
                         "negative"),
    "a piece of four items": ((2, 3), [(_ROW, (slice(0, 2), slice(None)), 0, 0)], TypeError,
                              "got 4 items"),
    "a piece that is no shard": ((2, 3), [object()], TypeError, "replica_id attributes"),
    "data that cannot be viewed": ((2, 3), [(object(), (slice(0, 2), slice(None)))],
                                   TypeError, "shard 0: its data cannot be viewed"),
    "no pieces and no dtype": ((2, 3), [], ValueError, "pass dtype="),
    "a negative extent": ((-1, 3), [], ValueError, "negative extent"),
}


@pytest.mark.parametrize("case", BAD_PIECES, ids=list(BAD_PIECES))
def test_pieces_that_do_not_tile_the_global_shape_are_refused(case):
    shape, pieces, error, message = BAD_PIECES[case]
    with pytest.raises(error, match=message):
        Shards.from_pieces(shape, pieces, complete=True, dtype=None)


def test_no_pieces_with_a_dtype_is_an_empty_collection():
    empty = Shards.from_pieces((4, 3), [], dtype="float32")
    assert len(empty) == 0 and empty.dtype == np.float32 and not empty.complete


class Unknown:
    """A sharded-looking type that no plugin declares and no protocol describes."""

    blocks = ()


def test_a_sharded_type_without_a_plugin_is_a_type_error():
    with pytest.raises(TypeError, match=r"no plugin declares how test_shards\.Unknown yields "
                                        r"shards \(registry\.add_sharded_type\)"):
        interop_core.shards(Unknown())


def test_a_plugin_returning_something_else_than_shards_is_a_type_error(registered):
    registered(lambda r: r.add_sharded_type(Halves, lambda obj, stream: [obj.top]), "halves")
    with pytest.raises(TypeError, match="returned list, not Shards"):
        interop_core.shards(Halves(_ROW, _ROW))


def test_a_plugin_must_give_a_callable():
    # A hook that raises is not registered; the error names what was wrong.
    with pytest.raises(RuntimeError, match="TypeError: shards must be callable"):
        interop_core.register_plugin(
            __import__("conftest").make_plugin(lambda r: r.add_sharded_type(Halves, None)),
            name="halves-bad")


def test_options_are_only_for_shards():
    with pytest.raises(TypeError, match="apply only to shards"):
        interop_core.to(np.zeros(3, np.float32), "numpy", sharding=None)


def test_options_for_a_target_without_an_assembler_are_a_type_error():
    found = interop_core.shards(np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="no plugin assembles shards for 'numpy'"):
        interop_core.to(found, "numpy", sharding=None)


def test_assembling_needs_a_sharding_unless_the_shards_came_from_jax(jax):
    found = interop_core.shards(np.zeros((4, 3), np.float32))
    with pytest.raises(TypeError, match="needs sharding="):
        interop_core.to(found, "jax")
    with pytest.raises(TypeError, match="must be a jax.sharding.Sharding"):
        interop_core.to(found, "jax", sharding="rows")


@pytest.mark.parametrize("requested", ["columns", "more_devices", "replicated"])
def test_a_sharding_that_does_not_match_the_shards_is_a_value_error(jax, requested):
    from jax.sharding import NamedSharding, PartitionSpec

    whole = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    found = Shards.from_pieces(whole.shape, _pieces("numpy", whole, 2), complete=True)
    mesh = _mesh(jax, (2,), ("x",))
    sharding = {
        "columns": NamedSharding(mesh, PartitionSpec(None, "x")),
        "more_devices": NamedSharding(_mesh(jax, (4,), ("x",)), PartitionSpec("x")),
        "replicated": NamedSharding(mesh, PartitionSpec()),
    }[requested]
    with pytest.raises(ValueError, match="the requested sharding does not match the shards"):
        interop_core.to(found, "jax", sharding=sharding)


def test_a_sharding_that_cannot_lay_out_the_shape_is_a_value_error(jax):
    from jax.sharding import NamedSharding, PartitionSpec

    found = Shards.from_pieces((6, 3), [(np.zeros((6, 3), np.float32), (slice(None),) * 2)])
    with pytest.raises(ValueError, match="cannot lay out the global shape"):
        interop_core.to(found, "jax",
                        sharding=NamedSharding(_mesh(jax, (4,), ("x",)), PartitionSpec("x")))
