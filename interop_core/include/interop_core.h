/*
 * interop_core.h: the C ABI for compiled interop-core readers (version 1).
 *
 * A plugin written in C, C++, Cython or Rust can register a reader that runs at the same speed
 * as the core's own: a function that describes one Python object's memory.  Put a pointer to it
 * in a PyCapsule named INTEROP_CORE_READER_CAPSULE and pass the capsule as `reader=` to
 * `registry.add_type(...)` in your plugin's `interop_core_register` hook.
 *
 * The reader is called with the GIL held, once per `interop_core.view(obj)` of an object of
 * the registered type.  It fills `out` and returns 0, or sets a Python exception and returns -1.
 * `shape` and `strides` are only read during the call (they may point into the object itself);
 * interop-core copies them.  Strides are in ELEMENTS (NULL means C-contiguous).
 *
 * Ownership: `out->keepalive`, if not NULL, is a NEW reference to the object that keeps the
 * memory alive; interop-core releases it when the last view of the memory dies.  NULL means
 * "the object itself" (interop-core then holds `obj`).
 *
 * This header is self-contained: the element type is a DLPack (code, bits, lanes) triple and the
 * device a DLPack (device_type, device_id) pair, spelled out here without any DLPack header.
 */
#ifndef INTEROP_CORE_H
#define INTEROP_CORE_H

#include <Python.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define INTEROP_CORE_READER_ABI_VERSION 1
#define INTEROP_CORE_READER_CAPSULE "interop_core.reader_v1"

typedef struct {
    void *data;                  /* address of element 0 */
    int32_t ndim;                /* 0 .. 64 */
    const int64_t *shape;        /* ndim extents, each >= 0 */
    const int64_t *strides;      /* ndim strides in elements, or NULL for C-contiguous */
    uint8_t dtype_code;          /* DLPack DLDataTypeCode (0 int, 1 uint, 2 float, 4 bfloat, ...) */
    uint8_t dtype_bits;          /* bits per lane */
    uint16_t dtype_lanes;        /* 1 for scalars */
    int32_t device_type;         /* DLPack DLDeviceType (1 CPU, 2 CUDA, 3 CUDA host, ...) */
    int32_t device_id;           /* device ordinal, 0 for the host */
    int32_t readonly;            /* non-zero: writes through the view are not allowed */
    int32_t has_producer_stream; /* non-zero: producer_stream is the producer's CUstream */
    intptr_t producer_stream;
    PyObject *keepalive;         /* new reference, or NULL meaning the object itself */
} interop_core_tensor_info;

/* Called with the GIL held; `stream` is the consumer's stream, resolved: None (no
   synchronisation) or the CUstream handle as a Python int. */
typedef int (*interop_core_reader_v1)(PyObject *obj, PyObject *stream,
                                      interop_core_tensor_info *out);

#ifdef __cplusplus
}
#endif

#endif /* INTEROP_CORE_H */
