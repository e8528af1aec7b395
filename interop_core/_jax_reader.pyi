"""Stub for the compiled jax reader (core reader ``"jax"``)."""

__all__ = ["validation_status", "set_validation_result", "revalidate"]

def validation_status() -> tuple[bool, str]:
    """Whether the direct reader is in use, and why (validating first if needed)."""

def set_validation_result(ok: bool | None, reason: str = ...) -> None:
    """Pin the validation result (for tests of the fallback); ``ok=None`` re-validates."""

def revalidate() -> bool:
    """Forget any pinned or cached result and validate again now."""
