# The torch reader: torch.Tensor through the PyTorch AOTI stable C ABI (aoti_torch_get_*),
# resolved at run time from torch's already-loaded libraries, validated once per process against
# torch's Python API, with the DLPack C exchange API (then __dlpack__) as its fallback.

from .core._record cimport ViewRecord

# A core reader (see _registry.pxd: core_reader_t), registered as "torch" at import.
cdef object read_torch(object obj, object stream, ViewRecord* rec)
