/*
 * bytetensor.CTensor: the same idea as ByteTensor, with its metadata in a C struct
 * (ctensor.h), the way compiled array libraries keep theirs.  It knows nothing of interop-core.
 *
 *     CTensor(buffer, shape, dtype, strides=None, offset=0)
 *
 * `buffer` is any object with the buffer protocol; strides are in bytes (None: C-contiguous);
 * every element reached must lie inside the buffer.
 */
#define PY_SSIZE_T_CLEAN
#include "ctensor.h"

static const struct { const char *name; uint8_t code, bits; } DTYPES[] = {
    {"bool", 6, 8}, {"int8", 0, 8}, {"uint8", 1, 8}, {"int16", 0, 16}, {"uint16", 1, 16},
    {"int32", 0, 32}, {"uint32", 1, 32}, {"int64", 0, 64}, {"uint64", 1, 64},
    {"float16", 2, 16}, {"float32", 2, 32}, {"float64", 2, 64},
};

static int ctensor_init(CTensorObject *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"buffer", "shape", "dtype", "strides", "offset", NULL};
    PyObject *buffer, *shape, *strides = Py_None;
    const char *dtype;
    Py_ssize_t offset = 0, i, n;
    int found = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOs|On", names, &buffer, &shape, &dtype,
                                     &strides, &offset))
        return -1;
    for (i = 0; i < (Py_ssize_t)(sizeof(DTYPES) / sizeof(DTYPES[0])); i++) {
        if (strcmp(DTYPES[i].name, dtype) == 0) {
            self->dtype_code = DTYPES[i].code;
            self->dtype_bits = DTYPES[i].bits;
            found = 1;
        }
    }
    if (!found) {
        PyErr_Format(PyExc_ValueError, "unknown dtype %R", PyTuple_GET_ITEM(args, 2));
        return -1;
    }
    shape = PySequence_Tuple(shape);
    if (shape == NULL) return -1;
    n = PyTuple_GET_SIZE(shape);
    if (n > CTENSOR_MAX_NDIM) {
        Py_DECREF(shape);
        PyErr_Format(PyExc_ValueError, "at most %d dimensions", CTENSOR_MAX_NDIM);
        return -1;
    }
    int64_t itemsize = self->dtype_bits / 8, step = itemsize, low = 0, high = 0;
    self->ndim = (int32_t)n;
    for (i = n - 1; i >= 0; i--) {
        self->shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        if (self->shape[i] < 0) {
            Py_DECREF(shape);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "negative extent");
            return -1;
        }
        if (strides == Py_None) {
            self->strides[i] = step;
            step *= self->shape[i];
        } else {
            PyObject *s = PySequence_GetItem(strides, i);
            self->strides[i] = s ? PyLong_AsLongLong(s) : -1;
            Py_XDECREF(s);
            if (PyErr_Occurred()) { Py_DECREF(shape); return -1; }
        }
    }
    Py_DECREF(shape);
    if (self->buffer.obj != NULL) PyBuffer_Release(&self->buffer);
    if (PyObject_GetBuffer(buffer, &self->buffer, PyBUF_WRITABLE) != 0) {
        PyErr_Clear();
        if (PyObject_GetBuffer(buffer, &self->buffer, PyBUF_SIMPLE) != 0) return -1;
    }
    self->readonly = self->buffer.readonly;
    /* Every element reached must lie inside the buffer. */
    int empty = 0;
    for (i = 0; i < n; i++) {
        if (self->shape[i] == 0) empty = 1;
        int64_t reach = (self->shape[i] - 1) * self->strides[i];
        if (reach < 0) low += reach; else high += reach;
    }
    if (!empty && (offset + low < 0 || offset + high + itemsize > self->buffer.len)) {
        PyBuffer_Release(&self->buffer);
        PyErr_SetString(PyExc_ValueError, "shape, strides and offset reach outside the buffer");
        return -1;
    }
    self->data = (char *)self->buffer.buf + offset;
    return 0;
}

static void ctensor_dealloc(CTensorObject *self) {
    if (self->buffer.obj != NULL) PyBuffer_Release(&self->buffer);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *int64_tuple(const int64_t *values, int32_t n) {
    PyObject *t = PyTuple_New(n);
    for (int32_t i = 0; t != NULL && i < n; i++) {
        PyObject *v = PyLong_FromLongLong(values[i]);
        if (v == NULL) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *get_shape(CTensorObject *self, void *closure) {
    return int64_tuple(self->shape, self->ndim);
}

static PyObject *get_strides(CTensorObject *self, void *closure) {
    return int64_tuple(self->strides, self->ndim);
}

static PyObject *get_address(CTensorObject *self, void *closure) {
    return PyLong_FromVoidPtr(self->data);
}

static PyObject *get_readonly(CTensorObject *self, void *closure) {
    return PyBool_FromLong(self->readonly);
}

static PyGetSetDef ctensor_getset[] = {
    {"shape", (getter)get_shape, NULL, "Extent of each dimension.", NULL},
    {"strides", (getter)get_strides, NULL, "Step of each dimension in bytes.", NULL},
    {"address", (getter)get_address, NULL, "Address of element 0.", NULL},
    {"readonly", (getter)get_readonly, NULL, "Whether the buffer is read-only.", NULL},
    {NULL},
};

static PyTypeObject CTensorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bytetensor.CTensor",
    .tp_doc = "A strided tensor over a buffer, its metadata in a C struct (bytetensor/ctensor.h).",
    .tp_basicsize = sizeof(CTensorObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ctensor_init,
    .tp_dealloc = (destructor)ctensor_dealloc,
    .tp_getset = ctensor_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "bytetensor._ctensor",
                                    "bytetensor.CTensor (C).", -1, NULL};

PyMODINIT_FUNC PyInit__ctensor(void) {
    if (PyType_Ready(&CTensorType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&CTensorType);
    if (PyModule_AddObject(m, "CTensor", (PyObject *)&CTensorType) < 0) {
        Py_DECREF(&CTensorType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
