"""``@interop_core.viewable``: designated arguments reach the function as StridedMemoryViews."""

from __future__ import annotations

import functools
import inspect
import pickle

import pytest

import interop_core
from interop_core import StridedMemoryView, viewable

np = pytest.importorskip("numpy")

KDLCUDA = 2


def _array(n=6, dtype="float32"):
    return np.arange(n, dtype=dtype)


class CudaStream:
    """A consumer stream object as frameworks spell it (``__cuda_stream__`` -> (0, handle))."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


class RecordingProducer:
    """A DLPack producer that claims CUDA memory and records the stream each export was asked for.

    The capsule itself comes from a host numpy array, so the view is readable on a CPU machine.
    """

    def __init__(self, array):
        self.array = array
        self.streams = []

    def __dlpack_device__(self):
        return (KDLCUDA, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.streams.append(stream)
        return self.array.__dlpack__(max_version=max_version)


# -- which arguments are viewed ---------------------------------------------------------------


@viewable("x", "y")
def _two(x, y, scale=1.0):
    return x, y, scale


@pytest.mark.parametrize("call", [
    lambda a, b: _two(a, b),
    lambda a, b: _two(a, y=b),
    lambda a, b: _two(x=a, y=b),
    lambda a, b: _two(y=b, x=a, scale=2.0),
    lambda a, b: _two(a, b, 3.0),
], ids=["positional", "mixed", "keywords", "keywords-reordered", "with-extra"])
def test_named_arguments_arrive_as_views_however_they_are_passed(call):
    a, b = _array(), _array(4, "int64")
    x, y, scale = call(a, b)
    assert isinstance(x, StridedMemoryView) and isinstance(y, StridedMemoryView)
    assert (x.ptr, x.shape, x.owner) == (a.ctypes.data, (6,), a)
    assert (y.ptr, y.shape, y.owner) == (b.ctypes.data, (4,), b)
    assert not isinstance(scale, StridedMemoryView)


@pytest.mark.parametrize("spec", [(0, 2), ("a", "c"), (0, "c"), ("a", 2)],
                         ids=["indices", "names", "index-and-name", "name-and-index"])
def test_indices_and_names_designate_the_same_parameters(spec):
    @viewable(*spec)
    def f(a, b, c):
        return a, b, c

    arrays = [_array(), _array(), _array()]
    a, b, c = f(*arrays)
    assert isinstance(a, StridedMemoryView) and isinstance(c, StridedMemoryView)
    assert b is arrays[1]
    assert c.ptr == arrays[2].ctypes.data


def test_keyword_only_and_positional_only_parameters():
    @viewable("a", "k")
    def f(a, /, b, *, k):
        return a, b, k

    arrays = [_array(), _array(), _array()]
    a, b, k = f(arrays[0], arrays[1], k=arrays[2])
    assert isinstance(a, StridedMemoryView) and isinstance(k, StridedMemoryView)
    assert b is arrays[1]
    assert k.ptr == arrays[2].ctypes.data


def test_positional_only_name_given_as_keyword_goes_to_kwargs_untouched():
    @viewable("a")
    def f(a=None, /, **kwargs):
        return a, kwargs

    array = _array()
    a, kwargs = f(a=array)
    assert a is None
    assert kwargs["a"] is array


def test_extra_positional_arguments_are_left_alone():
    @viewable(0)
    def f(a, *rest):
        return a, rest

    arrays = [_array(), _array(), _array()]
    a, rest = f(*arrays)
    assert isinstance(a, StridedMemoryView)
    assert rest == (arrays[1], arrays[2])


# -- defaults and None ------------------------------------------------------------------------


def test_none_stays_none_where_the_default_is_none():
    @viewable("x", "out")
    def f(x, out=None):
        return x, out

    array = _array()
    assert f(array)[1] is None
    assert f(array, None)[1] is None
    assert f(array, out=None)[1] is None
    assert isinstance(f(array, out=array)[1], StridedMemoryView)


def test_none_is_refused_where_the_default_is_not_none():
    @viewable("x")
    def f(x):
        return x

    with pytest.raises(TypeError, match=r"f\(\): argument 'x' \(NoneType\)"):
        f(None)


def test_a_left_out_argument_gets_the_functions_default_unconverted():
    default = _array()

    @viewable("x", "y")
    def f(x, y=default):
        return y

    assert f(_array()) is default


# -- views pass through -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [None, -1], ids=["no-stream", "stream-minus-one"])
def test_views_pass_through_unchanged(stream):
    @viewable("x", stream="s")
    def f(x, s=None):
        return x

    view = interop_core.view(_array())
    assert f(view, stream) is view


def test_view_is_called_once_per_designated_argument_only():
    calls = []

    @viewable("x")
    def f(x, y):
        calls.append((type(x), type(y)))

    f(_array(), _array())
    f(_array(), y=_array())
    assert calls == [(StridedMemoryView, np.ndarray)] * 2


# -- streams ----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["positional", "keyword"])
def test_stream_argument_is_forwarded_to_the_producer(how):
    @viewable("x", stream="stream")
    def launch(x, stream=None):
        return x

    producer = RecordingProducer(_array())
    consumer = CudaStream(0xBEEF)
    view = launch(producer, consumer) if how == "positional" else launch(producer, stream=consumer)
    assert isinstance(view, StridedMemoryView)
    assert producer.streams == [0xBEEF]


def test_stream_argument_left_out_means_no_synchronisation():
    @viewable("x", stream="stream")
    def launch(x, stream=None):
        return x

    producer = RecordingProducer(_array())
    launch(producer)
    launch(producer, None)
    # DLPack's "no synchronisation" for CUDA producers is -1.
    assert producer.streams == [-1, -1]


def test_stream_default_of_the_function_is_used_when_left_out():
    default_stream = CudaStream(0x1234)

    @viewable("x", stream="stream")
    def launch(x, *, stream=default_stream):
        return x

    producer = RecordingProducer(_array())
    launch(producer)
    launch(producer, stream=CudaStream(0x5678))
    assert producer.streams == [0x1234, 0x5678]


def test_stream_is_forwarded_for_every_designated_argument():
    @viewable("a", "b", stream="s")
    def launch(a, b, s):
        return a, b

    first, second = RecordingProducer(_array()), RecordingProducer(_array())
    launch(first, second, CudaStream(0x7700))
    assert first.streams == [0x7700] and second.streams == [0x7700]


# -- methods ----------------------------------------------------------------------------------


class Kernel:
    def __init__(self):
        self.seen = None

    @viewable("x", "out", stream="stream")
    def __call__(self, x, out, stream=None):
        self.seen = (x, out)
        return self

    @viewable(1)
    def by_index(self, x):
        """Index 1: ``self`` is index 0."""
        return x

    @classmethod
    @viewable("x")
    def klass(cls, x):
        return cls, x

    @staticmethod
    @viewable("x")
    def static(x):
        return x


def test_methods_bind_like_functions():
    kernel = Kernel()
    a, b = _array(), _array()
    assert kernel(a, out=b) is kernel
    assert [v.ptr for v in kernel.seen] == [a.ctypes.data, b.ctypes.data]
    assert kernel.by_index(a).ptr == a.ctypes.data
    assert Kernel.by_index(kernel, a).ptr == a.ctypes.data
    assert inspect.ismethod(kernel.by_index) and kernel.by_index.__self__ is kernel


@pytest.mark.parametrize("through", ["class", "instance"])
def test_classmethod_and_staticmethod_over_viewable(through):
    owner = Kernel if through == "class" else Kernel()
    cls, x = owner.klass(_array())
    assert cls is Kernel and isinstance(x, StridedMemoryView)
    assert isinstance(owner.static(_array()), StridedMemoryView)


# -- metadata ---------------------------------------------------------------------------------


def _documented(x, y=None):
    """Adds things."""


_documented.custom = "kept"


def test_metadata_is_preserved():
    wrapped = viewable("x")(_documented)
    assert wrapped.__name__ == "_documented"
    assert wrapped.__qualname__ == "_documented"
    assert wrapped.__doc__ == "Adds things."
    assert wrapped.__module__ == __name__
    assert wrapped.__wrapped__ is _documented
    assert wrapped.custom == "kept"
    assert inspect.signature(wrapped) == inspect.signature(_documented)
    assert Kernel.by_index.__doc__ == "Index 1: ``self`` is index 0."
    assert Kernel.__call__.__qualname__ == "Kernel.__call__"
    assert "_documented" in repr(wrapped)


def test_module_level_wrapper_pickles_by_reference():
    assert pickle.loads(pickle.dumps(_two)) is _two


def test_wraps_other_wrappers_through_their_signature():
    def outer(func):
        @functools.wraps(func)
        def inner(*args, **kwargs):
            return func(*args, **kwargs)
        return inner

    @viewable("y")
    @outer
    def f(x, y):
        return x, y

    x, y = f(1, _array())
    assert x == 1 and isinstance(y, StridedMemoryView)


def test_signature_is_read_on_first_call_not_at_decoration():
    class Lazy:
        """A callable whose signature cannot be read cheaply: it is read on the first call."""

        reads = 0

        @property
        def __signature__(self):
            Lazy.reads += 1
            return inspect.Signature([inspect.Parameter("x", inspect.Parameter.POSITIONAL_ONLY)])

        def __call__(self, x):
            return x

    wrapped = viewable("x")(Lazy())
    assert Lazy.reads == 0
    for _ in range(3):
        assert isinstance(wrapped(_array()), StridedMemoryView)
    assert Lazy.reads == 1


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("args, kwargs, exc, match", [
    ((), {}, TypeError, "needs the names or positional indices"),
    ((1.5,), {}, TypeError, r"names \(str\) or positional indices \(int\), got float"),
    ((True,), {}, TypeError, "got bool"),
    (("not a name",), {}, TypeError, "is not a parameter name"),
    ((-1,), {}, ValueError, "negative"),
    (("x", "x"), {}, ValueError, "named twice"),
    (("x",), {"stream": 3}, TypeError, "stream parameter"),
    (("x",), {"stream": "x"}, ValueError, "both the stream and a viewed argument"),
], ids=["empty", "float", "bool", "bad-name", "negative", "duplicate", "stream-not-str",
        "stream-is-viewed"])
def test_malformed_decorator_arguments_are_refused(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        viewable(*args, **kwargs)


def test_bare_decorator_use_is_explained():
    with pytest.raises(TypeError, match=r"@viewable\('x'\) rather than @viewable"):
        viewable(_documented)


def test_decorating_a_non_callable_is_refused():
    with pytest.raises(TypeError, match="decorates a callable, got int"):
        viewable("x")(3)


@pytest.mark.parametrize("spec, kwargs, match", [
    (("z",), {}, "has no parameter named 'z'"),
    ((5,), {}, "index 5 is out of range"),
    (("x",), {"stream": "s"}, r"no parameter named 's' \(the stream\)"),
], ids=["unknown-name", "index-out-of-range", "unknown-stream"])
def test_unknown_parameters_are_refused_at_decoration_for_plain_functions(spec, kwargs, match):
    with pytest.raises(TypeError, match=r"_documented\(\) .*" + match):
        viewable(*spec, **kwargs)(_documented)


@pytest.mark.parametrize("spec, kwargs, match", [
    (("z",), {}, "has no parameter named 'z'"),
    ((1,), {}, "index 1 is out of range"),
    (("x",), {"stream": "s"}, r"no parameter named 's' \(the stream\)"),
], ids=["unknown-name", "index-out-of-range", "unknown-stream"])
def test_unknown_parameters_of_other_callables_are_refused_at_first_call(spec, kwargs, match):
    class Callable:
        def __call__(self, x):
            return x

    wrapped = viewable(*spec, **kwargs)(Callable())   # no error yet: no cheap signature
    with pytest.raises(TypeError, match=match):
        wrapped(_array())


@pytest.mark.parametrize("spec", [("args",), ("kwargs",)])
def test_variadic_parameters_cannot_be_viewed(spec):
    @viewable(*spec)
    def f(*args, **kwargs):
        pass

    with pytest.raises(TypeError, match=r"f\(\): cannot view the variadic parameter"):
        f(_array())


def test_same_parameter_by_name_and_index_is_refused():
    @viewable("x", 0)
    def f(x):
        pass

    with pytest.raises(ValueError, match="'x' is designated twice"):
        f(_array())


@pytest.mark.parametrize("bad, type_name", [
    ("text", "str"), (3.5, "float"), (object(), "object"), ([1, 2], "list"),
])
def test_unviewable_argument_error_names_function_parameter_and_type(bad, type_name):
    @viewable("x", "y")
    def kernel(x, y):
        pass

    with pytest.raises(TypeError) as info:
        kernel(_array(), bad)
    message = str(info.value)
    assert "kernel()" in message
    assert "argument 'y'" in message
    assert f"({type_name})" in message
    assert info.value.__cause__ is not None


def test_unviewable_argument_type_is_qualified_with_its_module():
    class Opaque:
        pass

    @viewable("x")
    def kernel(x):
        pass

    with pytest.raises(TypeError, match=rf"\({__name__}\..*Opaque\)"):
        kernel(Opaque())


def test_errors_raised_inside_the_function_are_not_rewritten():
    @viewable("x")
    def kernel(x):
        raise TypeError("from the body")

    with pytest.raises(TypeError, match="^from the body$"):
        kernel(_array())


# -- frameworks -------------------------------------------------------------------------------


def _numpy_samples():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    return {"contiguous": base, "transposed": base.T, "sliced": base[::2, 1:5],
            "zero-d": np.array(3.0), "empty": np.empty((0, 3), dtype=np.int8)}


@pytest.mark.parametrize("name", list(_numpy_samples()))
def test_numpy_inputs_match_the_arrays_metadata(name):
    array = _numpy_samples()[name]

    @viewable("x")
    def f(x):
        return x

    view = f(array)
    assert view.ptr == array.__array_interface__["data"][0]
    assert view.shape == array.shape
    assert view.strides_in_bytes == array.strides or array.size == 0
    assert view.dtype == array.dtype
    assert view.owner is array


@pytest.mark.parametrize("dtype", ["float32", "int64", "bfloat16", "bool"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_torch_inputs_match_the_tensors_metadata(dtype, layout):
    torch = pytest.importorskip("torch")
    base = torch.zeros((4, 6), dtype=getattr(torch, dtype))
    tensor = {"contiguous": base, "transposed": base.t(), "sliced": base[1:, ::2]}[layout]

    @viewable("x")
    def f(x):
        return x

    view = f(tensor)
    assert view.ptr == tensor.data_ptr()
    assert view.shape == tuple(tensor.shape)
    assert view.strides == tensor.stride()
    assert view.itemsize == tensor.element_size()
    assert view.device_type == 1


def test_mixed_frameworks_in_one_call():
    torch = pytest.importorskip("torch")

    @viewable("a", "b")
    def add_into(a, b):
        return a, b

    t, n = torch.ones(3), np.ones(3)
    a, b = add_into(t, n)
    assert (a.ptr, b.ptr) == (t.data_ptr(), n.ctypes.data)


@pytest.mark.parametrize("call", ["direct", "dunder_call", "c_dict"])
def test_converted_keyword_arguments_leave_the_callers_dict_untouched(call):
    @viewable("x", "out")
    def kernel(x, out=None):
        return type(x), type(out)

    a, b = _array(), _array()
    kwargs = {"out": b}
    if call == "direct":
        result = kernel(a, **kwargs)
    elif call == "dunder_call":
        result = kernel.__call__(a, **kwargs)
    else:
        # A C caller passing its own dict (as PyObject_Call does): the dict must survive as is.
        import ctypes

        api = ctypes.pythonapi
        api.PyObject_Call.restype = ctypes.py_object
        api.PyObject_Call.argtypes = [ctypes.py_object] * 3
        result = api.PyObject_Call(kernel, (a,), kwargs)
    assert result == (StridedMemoryView, StridedMemoryView)
    assert kwargs == {"out": b} and kwargs["out"] is b


def test_positional_arguments_not_designated_are_passed_through_as_the_same_objects():
    marker = object()

    @viewable(1)
    def kernel(first, x, last):
        return first, x, last

    first, x, last = kernel(marker, _array(), marker)
    assert first is marker and last is marker and type(x) is StridedMemoryView


# -- launch mode: one LaunchArgs record of the designated arguments ------------------------------


@viewable("out", "x", "factor", stream="stream", launch="record", writable=("out",),
          scalar_types={"factor": "float32"})
def _scale_launcher(out, x, factor, *, stream=None, record=None):
    return record


def test_launch_mode_hands_the_function_one_record_of_the_designated_arguments():
    out, x = _array(), _array()
    record = _scale_launcher(out, x, 2.0)
    assert isinstance(record, interop_core.LaunchArgs)
    assert record.args == (out, x, 2.0)
    assert list(record.pointers)[:2] == [out.ctypes.data, x.ctypes.data]
    assert record.scalar_type(2) == "float32"
    assert record.key == interop_core.launch_args(
        [out, x, 2.0], scalar_types=(None, None, "float32")).key
    assert record.stream is None
    assert _scale_launcher(out, x=x, factor=1.0, stream=0).stream == 0


def test_launch_mode_errors_name_the_parameter():
    read_only = _array()
    read_only.flags.writeable = False
    with pytest.raises(BufferError, match=r"_scale_launcher\(\): argument 'out' \(numpy.ndarray\) "
                                          "is read-only"):
        _scale_launcher(read_only, _array(), 2.0)
    with pytest.raises(TypeError, match=r"_scale_launcher\(\): argument 'x' \(str\) is not a "
                                        "scalar"):
        _scale_launcher(_array(), "text", 2.0)
    with pytest.raises(TypeError, match="'record' receives the LaunchArgs record"):
        _scale_launcher(_array(), _array(), 2.0, record=1)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'factor'"):
        _scale_launcher(_array(), _array())


def test_launch_mode_defaults_and_none_reach_the_record():
    @viewable("x", "bias", launch="record", key="dynamic")
    def f(x, bias=None, *, record):
        return record

    record = f(_array())
    assert record.views[1] is None and record.key.policy == "dynamic"
    assert list(record.pointers)[1] == 0


@pytest.mark.parametrize(("decorate", "error", "match"), [
    (lambda: viewable("x", launch="x"), ValueError, "cannot also be designated"),
    (lambda: viewable("x", launch="no such"), TypeError, "takes the name of the parameter"),
    (lambda: viewable("x", key="dynamic"), TypeError, "apply to launch mode only"),
    (lambda: viewable("x", launch="r", key="fast"), ValueError, "key must be"),
], ids=["designated", "not-identifier", "options-without-launch", "bad-key"])
def test_launch_mode_is_checked_at_decoration(decorate, error, match):
    with pytest.raises(error, match=match):
        decorate()


def test_launch_mode_needs_an_existing_keyword_parameter():
    with pytest.raises(TypeError, match="no parameter named 'record'"):
        @viewable("x", launch="record")
        def f(x):
            pass

    @viewable("x", launch="record")
    def g(x, record, /):
        pass

    with pytest.raises(TypeError, match="passed by keyword"):
        g(_array(), None)


def test_many_designated_arguments_by_position_and_keyword():
    names = [f"a{i}" for i in range(30)]
    namespace = {}
    exec(f"def f({', '.join(names)}):\n    return ({', '.join(names)},)", namespace)
    f = viewable(*names)(namespace["f"])
    arrays = [_array(i + 1) for i in range(30)]
    got = f(*arrays[:20], **{n: a for n, a in zip(names[20:], arrays[20:], strict=True)})
    assert [v.shape for v in got] == [(i + 1,) for i in range(30)]
    assert all(v.owner is a for v, a in zip(got, arrays, strict=True))


def test_calls_that_fail_midway_leak_no_references():
    import sys

    @viewable("x", "y", "z")
    def f(x, y, z):
        return x

    a = _array()
    before = sys.getrefcount(a)
    for _ in range(100):
        with pytest.raises(TypeError, match="argument 'z'"):
            f(a, y=a, z="not viewable")
        f(a, a, z=a)
    assert sys.getrefcount(a) == before
