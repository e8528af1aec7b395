/*
 * interop_bytetensor._creader: a compiled interop-core reader for bytetensor.CTensor, written
 * against the public C ABI (interop_core.h, version 2) and nothing else of interop-core.
 *
 * The reader copies pointers out of CTensor's struct (bytetensor/ctensor.h, shipped in the same
 * distribution, so its layout cannot drift from the one compiled here).  interop-core calls it
 * only for objects of exactly that type (the dispatch table is keyed by exact type), and copies
 * shape and strides before CTensor could change them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "interop_core.h"
#include "../bytetensor/ctensor.h"

static int read_ctensor(PyObject *obj, PyObject *stream, interop_core_tensor_info *out) {
    const CTensorObject *t = (const CTensorObject *)obj;
    (void)stream; /* host memory: nothing to order */
    out->data = t->data;
    out->ndim = t->ndim;
    out->shape = t->shape;
    out->strides = t->strides;
    out->strides_in_bytes = 1;
    out->dtype_code = t->dtype_code;
    out->dtype_bits = t->dtype_bits;
    out->dtype_lanes = 1;
    out->device_type = 1; /* kDLCPU */
    out->device_id = 0;
    out->readonly = t->readonly;
    /* keepalive NULL: the view holds the CTensor, which holds its buffer's exporter. */
    return INTEROP_CORE_READ_OK;
}

static PyObject *reader_capsule(PyObject *self, PyObject *unused) {
    return PyCapsule_New((void *)(interop_core_reader_v2)read_ctensor,
                         INTEROP_CORE_READER_V2_CAPSULE, NULL);
}

static PyMethodDef methods[] = {
    {"reader_capsule", reader_capsule, METH_NOARGS,
     "The CTensor reader in the capsule registry.add_type(reader=...) takes (ABI v2)."},
    {NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "interop_bytetensor._creader",
                                    "A compiled interop-core reader for bytetensor.CTensor.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__creader(void) { return PyModule_Create(&module); }
