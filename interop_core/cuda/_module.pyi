from typing import Any

__all__ = ["Kernel", "Module", "launch", "load_ptx"]

class Module:
    device_id: int
    @property
    def handle(self) -> int: ...
    def kernel(self, name: str) -> Kernel: ...

class Kernel:
    module: Module
    name: str
    @property
    def handle(self) -> int: ...

def load_ptx(ptx: str | bytes, device_id: int = 0) -> Module: ...
def launch(
    kernel: Kernel,
    grid: int | tuple[int, ...],
    block: int | tuple[int, ...],
    params_address: int,
    stream: Any,
    shared_mem: int = 0,
) -> None: ...
