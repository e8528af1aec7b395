"""interop-core plugin for torch (being written: this placeholder registers nothing yet)."""

import interop_core


@interop_core.hookimpl
def interop_core_register(registry):
    """Declare nothing yet."""
