/*
 * interop_core.h: the C ABI for compiled interop-core readers and exporters (version 6).
 *
 * A plugin written in C, C++, Cython or Rust registers a reader that runs at the same speed as
 * interop-core's own: every first-party reader (numpy, torch, cupy, numba, jax) is built on this
 * header and nothing else of the core.  `interop_core.get_include()` names this folder.
 *
 * A reader is a function that describes one Python object's memory.  Put a pointer to it in a
 * PyCapsule named INTEROP_CORE_READER_V2_CAPSULE and pass the capsule as `reader=` to
 * `registry.add_type(...)` in your plugin's `interop_core_register` hook.
 *
 * The reader is called with the GIL held, once per `interop_core.view(obj)` of an object of the
 * registered type.  It returns
 *    0  and fills `out`;
 *    1  "not this one": the object needs what the fast path does not handle (an unusual
 *       layout, a lazy tensor); interop-core then reads it with the `fallback=` reader of the
 *       registration (a BufferError when there is none).  `out` is ignored;
 *   -1  with a Python exception set.
 * `shape` and `strides` are only read during the call (they may point into the object itself);
 * interop-core copies them before it runs any Python code, so a reader may also point them at a
 * static buffer that it fills after its own last Python-level call (GIL held throughout).
 * Strides are in ELEMENTS, or in bytes when `strides_in_bytes` is set (interop-core divides them
 * by the itemsize and refuses strides it does not divide); NULL strides mean C-contiguous.
 * Before each call interop-core sets the optional outputs to their defaults: `data`, `strides`
 * and `keepalive` NULL; `ndim`, `device_id`, `readonly`, `has_producer_stream`,
 * `producer_stream` and `strides_in_bytes` 0.  A reader always sets `shape` (for ndim > 0),
 * the dtype triple and `device_type`.
 *
 * Ownership: `out->keepalive`, if not NULL, is a NEW reference to the object that keeps the
 * memory alive; interop-core releases it when the last view of the memory dies.  NULL means
 * "the object itself" (interop-core then holds `obj`).
 *
 * Readers that rely on undocumented layouts declare how to check them (`prepare=` and
 * `canaries=` in `add_type`): interop-core validates the reader once per process before its
 * first use and installs the fallback instead when the check fails (docs/plugins.md).
 *
 * Version 1 readers (capsule INTEROP_CORE_READER_CAPSULE, return 0 or -1, no byte strides) are
 * still accepted; their struct is the same, the version 2 fields left zero.
 *
 * Version 3 adds one input, `batch`: read it only when the running core's table says
 * `abi_version >= 3` (a reader built against this header may be loaded by an older core, whose
 * struct ends before it).
 *
 * The core's own helpers (dtype conversion, pointer attributes from the CUDA driver, DLPack
 * capsules, views made from a filled record, describing a view for a compiled exporter) are in
 * a table of function pointers, `interop_core_api`, which `interop_core_import_api()` fetches
 * once.  The exporter capsule (INTEROP_CORE_EXPORTER_CAPSULE) came with version 3 too.
 *
 * Version 4 appends one helper to the table, `deferred_keepalive`: a keep-alive taken when the
 * memory is first used rather than when it is described (check `size` before calling it), and
 * one input, `uses_memory` (read it only when the table says `abi_version >= 4`).
 *
 * Version 5 adds one input, `protocol` (read it only when the table says `abi_version >= 5`):
 * the exchange protocol a read stands in for, when StridedMemoryView.from_<protocol>(obj) takes
 * a reader the registration declared equivalent to it.
 *
 * Version 6 gives `uses_memory` a second non-zero value, INTEROP_CORE_USES_MEMORY_IN_CALL: the
 * memory is used before the reading call returns and nothing made from the read outlives it (a
 * kernel launch that reads its arguments, enqueues the kernel and drops what it read).  A
 * reader that does not tell the two non-zero values apart treats both as "used at once", which
 * stays correct.
 *
 * An optional equivalence check (capsule INTEROP_CORE_EQUIVALENCE_CHECK_CAPSULE, passed as
 * `equivalence_check=` with `equivalent_to=`) says, per object, whether what the reader read is
 * what a protocol's own reading would give: see interop_core_equivalence_check_v1 below.  It is
 * optional and changes no struct: a core without it refuses the keyword, never the reader.
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

#define INTEROP_CORE_ABI_VERSION 6
#define INTEROP_CORE_READER_CAPSULE "interop_core.reader_v1"
#define INTEROP_CORE_READER_V2_CAPSULE "interop_core.reader_v2"
#define INTEROP_CORE_EXPORTER_CAPSULE "interop_core.exporter_v1"
/* PyCapsule_Import name of the core's function table (the attribute `_C_API` of interop_core). */
#define INTEROP_CORE_API_CAPSULE "interop_core._C_API"

/* The exchange protocols a registration may declare its reader equivalent to (`equivalent_to=`),
   as an equivalence check and a reader's `protocol` input name them (0: no protocol). */
#define INTEROP_CORE_PROTOCOL_DLPACK 2
#define INTEROP_CORE_PROTOCOL_CUDA_ARRAY_INTERFACE 3
#define INTEROP_CORE_PROTOCOL_ARRAY_INTERFACE 4
#define INTEROP_CORE_PROTOCOL_BUFFER 5
#define INTEROP_CORE_EQUIVALENCE_CHECK_CAPSULE "interop_core.equivalence_check_v1"

/* The values of `uses_memory` (version 4; IN_CALL since version 6). */
#define INTEROP_CORE_USES_MEMORY_LATER 0
#define INTEROP_CORE_USES_MEMORY_AT_ONCE 1
#define INTEROP_CORE_USES_MEMORY_IN_CALL 2

/* A reader's return values (version 2). */
#define INTEROP_CORE_READ_OK 0
#define INTEROP_CORE_READ_DECLINED 1
#define INTEROP_CORE_READ_ERROR (-1)

typedef struct {
    void *data;                  /* address of element 0 */
    int32_t ndim;                /* 0 .. 64 */
    const int64_t *shape;        /* ndim extents, each >= 0 */
    const int64_t *strides;      /* ndim strides in elements (bytes if strides_in_bytes), or NULL
                                    for C-contiguous */
    uint8_t dtype_code;          /* DLPack DLDataTypeCode (0 int, 1 uint, 2 float, 4 bfloat, ...) */
    uint8_t dtype_bits;          /* bits per lane */
    uint16_t dtype_lanes;        /* 1 for scalars */
    int32_t device_type;         /* DLPack DLDeviceType (1 CPU, 2 CUDA, 3 CUDA host, ...) */
    int32_t device_id;           /* device ordinal, 0 for the host */
    int32_t readonly;            /* non-zero: writes through the view are not allowed */
    int32_t has_producer_stream; /* non-zero: producer_stream is the producer's CUstream */
    intptr_t producer_stream;
    PyObject *keepalive;         /* new reference, or NULL meaning the object itself */
    /* ---- version 2 ---- */
    int32_t strides_in_bytes;    /* non-zero: `strides` are in bytes */
    /* ---- version 3: an input, set by interop-core before the call ---- */
    uint64_t batch;              /* non-zero while one call reads several objects (launch_args):
                                    what a reader looked up for one object of a batch that
                                    depends only on the moment, not on the object (e.g. its
                                    framework's current stream of a device), stays valid for the
                                    other objects of the same batch.  0: a lone read. */
    /* ---- version 4: an input, set by interop-core before the call ---- */
    uint32_t uses_memory;        /* INTEROP_CORE_USES_MEMORY_AT_ONCE (1): the caller uses the
                                    memory as soon as the read returns, and what it makes may
                                    outlive the call (to(), launch_args, copies): a reader that
                                    would hand out a deferred_keepalive may take its hold right
                                    away instead.  _LATER (0): a view(), which may be used for
                                    its metadata only.  _IN_CALL (2, version 6): the memory is
                                    used before the reading call returns and nothing made from
                                    the read outlives it (a launch that enqueues a kernel and
                                    drops its record); a deferred_keepalive handed out is taken
                                    only if anything runs Python code between the read and the
                                    use, so it costs nothing otherwise.  With a consumer stream
                                    the memory must be ordered before it in every case. */
    /* ---- version 5: an input, set by interop-core before the call ---- */
    int32_t protocol;            /* 0: view(), to(), launch_args, copies.  Otherwise the read
                                    stands in for StridedMemoryView.from_<protocol>(obj)
                                    (INTEROP_CORE_PROTOCOL_*), for a registration that declared
                                    the reader equivalent to that protocol: give what the
                                    protocol's own reading would, hold and readiness included
                                    (jax: the buffer held at once, and, without a consumer
                                    stream, the host waiting until it is computed, as jax's
                                    __dlpack__() does). */
} interop_core_tensor_info;

/* `stream` is the consumer's stream, resolved: None (no synchronisation) or the CUstream handle
   as a Python int.  Ordering the consumer after the producer is interop-core's job: a reader
   only reports the producer's stream (has_producer_stream) when it knows it cheaply. */
typedef int (*interop_core_reader_v1)(PyObject *obj, PyObject *stream,
                                      interop_core_tensor_info *out);
typedef int (*interop_core_reader_v2)(PyObject *obj, PyObject *stream,
                                      interop_core_tensor_info *out);

/* An equivalence check: asked by StridedMemoryView.from_<protocol>(obj) after the reader read
   `obj` (described by `read`, strides in ELEMENTS, valid for the call only), for a protocol the
   registration named in `equivalent_to=`.  Returns 1 when the protocol's own reading of `obj`
   gives the same view (pointer, layout, dtype, device, read-only flag, stream ordering), 0 when
   it may not (the view is dropped and the protocol itself answers, in its own words), or -1
   with a Python exception set.  For objects whose exactness depends on the object (torch: a
   tensor that requires grad, which torch's CUDA Array Interface refuses).  The core already
   refuses, without asking, device memory for the host protocols and host memory for the CUDA
   Array Interface. */
typedef int (*interop_core_equivalence_check_v1)(PyObject *obj, int32_t protocol,
                                                 const interop_core_tensor_info *read);

/* A compiled exporter: the target framework's object over the memory `view` describes (strides
   in ELEMENTS, `keepalive` unused), holding a reference to `owner` for as long as that object
   lives.  `owner` keeps the memory alive: a StridedMemoryView, or what the source's reader said
   holds the memory (the source itself, a DLPack capsule, ...).  `stream` is the consumer stream
   as to() got it; the core has ordered the memory before it already.  Returns a new reference,
   or NULL with an exception set.  Put the function in a PyCapsule named
   INTEROP_CORE_EXPORTER_CAPSULE and pass it as `exporter=` to `registry.add_exporter(...)`:
   `to(obj, target)` then hands it the reader's description without making a view object. */
typedef PyObject *(*interop_core_exporter_v1)(const interop_core_tensor_info *view,
                                              PyObject *owner, PyObject *stream);

/* The core's helpers for compiled readers and exporters.  Members are only ever appended: check `size`
   before using one added after the version you compiled against. */
typedef struct {
    uint32_t abi_version;        /* INTEROP_CORE_ABI_VERSION of the running core */
    uint32_t size;               /* sizeof(interop_core_api) of the running core */
    /* The DLPack triple of a dtype object: a numpy dtype (what cupy and numba arrays carry, and
       ml_dtypes' types), a name, a (code, bits, lanes) tuple.  Cached by identity: the second
       call with the same object costs a pointer comparison.  0, or -1 with TypeError /
       ValueError / BufferError set naming the dtype. */
    int (*dtype_of)(PyObject *dtype, uint8_t *code, uint8_t *bits, uint16_t *lanes);
    /* Where the memory at `ptr` lives, asked of the CUDA driver (loaded lazily; no CUDA package
       needed): 1 and the DLPack device for memory the driver knows (device, managed, pinned
       host); 0, outputs untouched, for ordinary host memory or when there is no driver. */
    int (*pointer_device)(uintptr_t ptr, int32_t *device_type, int32_t *device_id);
    /* Describe an UNCONSUMED DLPack capsule ("dltensor" or "dltensor_versioned") in `out`
       without taking it: shape and strides point into the capsule's tensor, so pass the capsule
       as `out->keepalive` (a new reference) for the view to own.  0, or -1 with BufferError set
       for anything else. */
    int (*describe_dlpack)(PyObject *capsule, interop_core_tensor_info *out);
    /* A new legacy DLPack capsule ("dltensor") over a StridedMemoryView's memory that holds the
       view, for a consumer that never writes into what it imports (read-only views are handed
       over too; a legacy capsule cannot say read-only).  NULL with an exception set. */
    PyObject *(*legacy_capsule_for_immutable_consumer)(PyObject *view);
    /* A new StridedMemoryView of `obj`, made from `info` exactly as view() makes one from a
       reader's fill (the same checks; byte strides taken as in version 2), for a plugin that
       reads several objects in one loop of its own (a sharded array's per-device pieces)
       rather than through one view() call each.  `info->keepalive` (a new reference, or NULL
       for `obj` itself) is taken over in every case.  `shape` and `strides` are read during
       the call only, after it allocates: do not point them at a buffer that Python code can
       overwrite (a reader's static one).  Read-only flags are taken as given.  NULL with an
       exception set. */
    PyObject *(*view_from_info)(PyObject *obj, interop_core_tensor_info *info);
    /* Describe a StridedMemoryView (exactly that type) in `out`, for compiled exporters: shape
       and strides in ELEMENTS point into the view and stay valid while it lives; `keepalive`
       is NULL (hold the view itself: it keeps the memory alive).  0, or -1 with TypeError set
       for anything else. */
    int (*describe_view)(PyObject *view, interop_core_tensor_info *out);
    /* ---- version 4 ---- */
    /* A keep-alive to put in `out->keepalive` that holds the memory only once it is first used,
       for a reader whose hold costs more than the rest of its read (jax's external reference
       on a buffer costs about what jax's own __dlpack__() does).  The view is made at once
       from the rest of the fill; before anything uses its memory (its `ptr` is read, it is
       exported, copied, handed to to() or launch_args; to() and launch_args of the object
       itself take it at once) interop-core calls `acquire(state, &held)`, once for the view
       and every view sliced from it, with the GIL held: 0 with `held` set to a new reference
       to what keeps the memory alive from then on, or -1 with an exception set -- a
       BufferError naming what happened where the producer freed or replaced the memory since
       the read (that use then raises it; nothing reads the memory).  `acquire` must check
       that the memory it holds is the memory the fill described.  `state` (the core takes its
       own reference) is what `acquire` reads; it must not refer to a view (the keep-alive is
       not tracked by the garbage collector, so such a cycle would never be freed).  A new reference, or NULL with an exception
       set. */
    PyObject *(*deferred_keepalive)(int (*acquire)(PyObject *state, PyObject **held),
                                    PyObject *state);
} interop_core_api;

/* The core's table, imported once (NULL with an ImportError set when interop_core is missing
   or older than `min_size` bytes of table).  Call with the GIL held. */
static inline const interop_core_api *interop_core_import_api(uint32_t min_size) {
    const interop_core_api *api =
        (const interop_core_api *)PyCapsule_Import(INTEROP_CORE_API_CAPSULE, 0);
    if (api != NULL && api->size < min_size) {
        PyErr_SetString(PyExc_ImportError,
                        "the installed interop_core is older than this plugin needs");
        return NULL;
    }
    return api;
}

#ifdef __cplusplus
}
#endif

#endif /* INTEROP_CORE_H */
