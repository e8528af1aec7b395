"""CUDA without a CUDA package: the driver loaded lazily from libcuda (``_cuda``) and the one
resolver of ``stream=`` arguments (``_streams``).
"""
