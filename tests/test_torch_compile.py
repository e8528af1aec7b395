"""Launchers under torch.compile: the custom-op route works; traced tensors are refused clearly."""

from __future__ import annotations

import pytest

import interop_core
from interop_core import launch_args, view

torch = pytest.importorskip("torch")

CUSTOM_OP = "torch.library.custom_op with a fake implementation"


@pytest.fixture(scope="module")
def axpy_op(c_library):
    """A launcher (launch_args + the C axpy through ctypes) registered as a custom op."""
    compiled = []

    @torch.library.custom_op("interop_core_tests::axpy", mutates_args=())
    def axpy(x: torch.Tensor, y: torch.Tensor, a: float) -> torch.Tensor:
        out = torch.empty_like(x)
        record = launch_args((out, x, y, a, x.numel()), writable=(0,),
                             scalar_types=(None, None, None, "float32", None))
        compiled.append(record.key)
        c_library.axpy_params(record.kernel_params_address)
        return out

    @axpy.register_fake
    def _(x, y, a):
        return torch.empty_like(x)

    axpy.calls = compiled
    return axpy


def test_a_launcher_registered_as_a_custom_op_runs_inside_torch_compile(axpy_op):
    @torch.compile(fullgraph=True)
    def model(x, y):
        return torch.relu(axpy_op(x * 2, y, 0.5)) + 1

    x, y = torch.linspace(-3, 3, 50), torch.full((50,), 0.25)
    before = len(axpy_op.calls)
    torch.testing.assert_close(model(x, y), torch.relu(x + 0.25) + 1)
    torch.testing.assert_close(model(y, x), torch.relu(y + x) + 1)
    # The compiled graph called the launcher with real tensors, once per model call.
    assert len(axpy_op.calls) == before + 2 and len(set(axpy_op.calls)) == 1


def test_launch_args_of_a_fake_tensor_names_the_custom_op_route():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(8)
    with pytest.raises(BufferError, match=r"argument 1 \(torch._subclasses.fake_tensor."
                                          r"FakeTensor\) cannot be viewed: .*" + CUSTOM_OP):
        launch_args([torch.zeros(8), fake])
    with pytest.raises(BufferError, match=CUSTOM_OP):
        view(fake)


def test_tracing_a_launcher_with_fake_tensors_is_refused_not_given_a_pointer():
    from torch.fx.experimental.proxy_tensor import make_fx

    seen = []

    def launcher(x):
        seen.append(launch_args([x]))
        return x + 1

    make_fx(launcher)(torch.ones(3))                       # real tensors: fine
    assert list(seen[0].pointers) != [0]
    with pytest.raises(BufferError, match=CUSTOM_OP):
        make_fx(launcher, tracing_mode="fake")(torch.ones(3))


def test_functional_and_meta_tensors_are_refused_naming_the_route():
    def functionalized(x):
        launch_args([x])

    with pytest.raises(BufferError, match="functional tensor wrapper.*" + CUSTOM_OP):
        torch.func.functionalize(functionalized)(torch.ones(3))
    with pytest.raises(BufferError, match="meta device.*" + CUSTOM_OP):
        launch_args([torch.empty(3, device="meta")])


def test_a_launcher_dynamo_cannot_trace_runs_eagerly_with_real_pointers():
    def step(x, y):
        record = interop_core.launch_args([x, y, 2.0])
        return x + y, record

    x, y = torch.ones(4), torch.zeros(4)
    _, record = torch.compile(step)(x, y)     # Dynamo breaks the graph around the call
    assert list(record.pointers)[:2] == [x.data_ptr(), y.data_ptr()]

    def whole(x, y):        # a code object of its own: Dynamo caches per code object
        return x + y, interop_core.launch_args([x, y])

    # fullgraph forbids the break: torch's own error then points at custom operators.
    with pytest.raises(Exception, match="custom operator"):
        torch.compile(whole, fullgraph=True)(x, y)
