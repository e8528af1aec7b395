"""Where a jax array lives: DLPack devices and jax's streams (C-level only: see _devices.pxd)."""

__all__: list[str] = []
