/* A buffer exporter that hands out exactly the Py_buffer fields it is given, however malformed
 * (tests/test_bad_input.py: what the buffer-protocol reader must refuse).  OddBuffer(buf,
 * length, itemsize, format, shape, strides): `buf` an address (0: NULL), `shape` None for a NULL
 * shape with the given `ndim`, `strides` None for NULL strides. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define MAX_DIMS 70

typedef struct {
    PyObject_HEAD
    void *buf;
    Py_ssize_t len, itemsize;
    int ndim, has_shape, has_strides;
    Py_ssize_t shape[MAX_DIMS], strides[MAX_DIMS];
    char format[32];
} OddBuffer;

static int odd_init(OddBuffer *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"buf", "length", "itemsize", "format", "ndim", "shape", "strides",
                            NULL};
    unsigned long long buf = 0;
    const char *format = "B";
    PyObject *shape = Py_None, *strides = Py_None;
    self->ndim = -2;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|KnnsiOO", names, &buf, &self->len,
                                     &self->itemsize, &format, &self->ndim, &shape, &strides))
        return -1;
    self->buf = (void *)(uintptr_t)buf;
    strncpy(self->format, format, sizeof(self->format) - 1);
    self->has_shape = shape != Py_None;
    self->has_strides = strides != Py_None;
    if (self->has_shape) {
        Py_ssize_t n = PySequence_Size(shape);
        if (n < 0 || n > MAX_DIMS) { PyErr_SetString(PyExc_ValueError, "shape"); return -1; }
        if (self->ndim == -2) self->ndim = (int)n;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PySequence_GetItem(shape, i);
            self->shape[i] = PyLong_AsSsize_t(item);
            Py_XDECREF(item);
        }
    }
    if (self->has_strides) {
        Py_ssize_t n = PySequence_Size(strides);
        if (n < 0 || n > MAX_DIMS) { PyErr_SetString(PyExc_ValueError, "strides"); return -1; }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PySequence_GetItem(strides, i);
            self->strides[i] = PyLong_AsSsize_t(item);
            Py_XDECREF(item);
        }
    }
    if (self->ndim == -2) self->ndim = 1;
    return PyErr_Occurred() ? -1 : 0;
}

static int odd_getbuffer(OddBuffer *self, Py_buffer *view, int flags) {
    (void)flags;
    view->obj = (PyObject *)self;
    Py_INCREF(self);
    view->buf = self->buf;
    view->len = self->len;
    view->readonly = 1;
    view->itemsize = self->itemsize;
    view->format = self->format;
    view->ndim = self->ndim;
    view->shape = self->has_shape ? self->shape : NULL;
    view->strides = self->has_strides ? self->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static PyBufferProcs odd_as_buffer = {(getbufferproc)odd_getbuffer, NULL};

static PyTypeObject OddBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "odd_buffer.OddBuffer",
    .tp_basicsize = sizeof(OddBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)odd_init,
    .tp_as_buffer = &odd_as_buffer,
};

static struct PyModuleDef odd_module = {PyModuleDef_HEAD_INIT, "odd_buffer", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_odd_buffer(void) {
    if (PyType_Ready(&OddBufferType) < 0) return NULL;
    PyObject *m = PyModule_Create(&odd_module);
    if (m == NULL) return NULL;
    Py_INCREF(&OddBufferType);
    if (PyModule_AddObject(m, "OddBuffer", (PyObject *)&OddBufferType) < 0) return NULL;
    return m;
}
