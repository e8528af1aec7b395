import os
from collections.abc import Sequence
from typing import Any

from typing_extensions import disjoint_base

from ..launch._launch import LaunchArgs

__all__ = ["Kernel", "Module", "launch", "load_module", "load_ptx"]

@disjoint_base
class Module:
    device_id: int
    kind: str
    @property
    def handle(self) -> int: ...
    def kernel(self, name: str, signature: Sequence[str] | None = None) -> Kernel: ...

@disjoint_base
class Kernel:
    module: Module
    name: str
    @property
    def handle(self) -> int: ...
    @property
    def device_id(self) -> int: ...
    @property
    def signature(self) -> tuple[str, ...] | None: ...
    @property
    def param_sizes(self) -> tuple[int, ...] | None: ...
    def launch(
        self,
        grid: int | tuple[int, ...],
        block: int | tuple[int, ...],
        args: LaunchArgs,
        *,
        shared_mem: int = 0,
        cluster: int | tuple[int, ...] | None = None,
    ) -> None: ...

def load_module(image: str | bytes | bytearray | memoryview | os.PathLike[str],
                device: int = 0) -> Module: ...
def load_ptx(ptx: str | bytes, device_id: int = 0) -> Module: ...
def launch(
    kernel: Kernel,
    grid: int | tuple[int, ...],
    block: int | tuple[int, ...],
    params_address: int,
    stream: Any,
    shared_mem: int = 0,
) -> None: ...
def _function_param_sizes(handle: int, device_id: int) -> tuple[int, ...] | None: ...
def _device_limits(device_id: int) -> dict[str, Any]: ...
