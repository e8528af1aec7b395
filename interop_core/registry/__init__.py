"""The dispatch table behind ``view()``: exact type -> reader, in C.

What plugins declare is collected by :mod:`interop_core.plugins` (pluggy, entry points) and
installed here; the per-object path never touches pluggy.
"""
