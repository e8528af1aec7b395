"""The core objects: the C view record, the dtype table, layouts, views and buffers.

Everything else in interop_core fills or reads a ``ViewRecord`` (``_record.pxd``); the
``StridedMemoryView`` (``_view``) wraps one for Python.
"""
