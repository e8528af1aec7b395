/*
 * ctensor.h: the C layout of bytetensor.CTensor, for compiled code that reads it directly
 * (bytetensor's own C API; interop_bytetensor's compiled reader includes it).
 */
#ifndef BYTETENSOR_CTENSOR_H
#define BYTETENSOR_CTENSOR_H

#include <Python.h>
#include <stdint.h>

#define CTENSOR_MAX_NDIM 8

typedef struct {
    PyObject_HEAD
    Py_buffer buffer;                      /* owned: holds the exporting object alive */
    char *data;                            /* address of element 0, inside buffer */
    int32_t ndim;
    int64_t shape[CTENSOR_MAX_NDIM];
    int64_t strides[CTENSOR_MAX_NDIM];     /* in bytes */
    uint8_t dtype_code;                    /* DLPack type code: 0 int, 1 uint, 2 float, 6 bool */
    uint8_t dtype_bits;
    int32_t readonly;
} CTensorObject;

#endif /* BYTETENSOR_CTENSOR_H */
