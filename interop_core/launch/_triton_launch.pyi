from collections.abc import Callable
from typing import Any, final

from ..core._key import LaunchKey

__all__ = ["CompiledLaunch", "TritonKernel"]

@final
class CompiledLaunch:
    kernel: Any
    device: int
    layout: tuple[str, ...]

@final
class _Grid:
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

@final
class TritonKernel:
    fn: Any
    name: str
    names: tuple[str, ...]
    runtime_names: tuple[str, ...]
    writable_names: tuple[str, ...]
    reasons: dict[LaunchKey, str]
    always_own: bool
    def __getitem__(self, grid: tuple[int, ...] | Callable[[dict[str, Any]], tuple[int, ...]]
                    ) -> _Grid: ...
    def run(self, *args: Any, grid: Any, stream: Any = None, **kwargs: Any) -> Any: ...
    def key(self, *args: Any, **kwargs: Any) -> LaunchKey: ...
    @property
    def parameter_flags(self) -> tuple[int, ...]: ...
    @property
    def cache_size(self) -> int: ...

def _set_process_mode(mode: int) -> None: ...
def _process_mode_value() -> int: ...
def _own_marker() -> object: ...
def _new_compiled(kernel: Any, function: int, device: int, num_warps: int, num_ctas: int,
                  shared: int, cooperative: bool, programmatic: bool,
                  storage_types: tuple[str, ...], layout: tuple[str, ...],
                  global_scratch_size: int, global_scratch_align: int,
                  profile_scratch_size: int, profile_scratch_align: int) -> CompiledLaunch: ...
def _storage_sizes(storage_types: tuple[str, ...]) -> tuple[int, ...]: ...
def _new_kernel(fn: Any, name: str, names: tuple[str, ...], modes: bytes, flags: bytes,
                defaults: tuple[Any, ...], writable_names: tuple[str, ...],
                option_names: frozenset[str], prepare_hook: Callable[..., Any],
                compile_hook: Callable[..., Any], own_launch: Callable[..., Any],
                runtime_knobs: Any, compilation_knobs: Any, always_own: bool) -> TritonKernel: ...
def _set_device_functions(k: TritonKernel, get_device: Callable[[], int],
                          get_stream: Callable[[int], int]) -> None: ...
def _entries(k: TritonKernel) -> dict[LaunchKey, Any]: ...
def _check_globals(used: dict[Any, Any]) -> None: ...
