"""jax's handles and the core's helper table, looked up once (C-level only: see _handles.pxd)."""

__all__: list[str] = []
