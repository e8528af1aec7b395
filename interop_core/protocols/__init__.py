"""The exchange protocols, in and out: DLPack (capsules and the C exchange API), the CUDA Array
Interface, NumPy's ``__array_interface__`` and the buffer protocol.

Each reader fills a ``ViewRecord``; each writer exports one.
"""
