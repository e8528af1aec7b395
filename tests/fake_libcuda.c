/* A stand-in for libcuda.so.1, for tests that count the driver calls a copy makes on a machine
 * without a GPU.  Built by tests/fake_driver.py and found by the package's own dlopen of
 * "libcuda.so.1" through LD_LIBRARY_PATH in a subprocess: nothing in interop_core knows of it.
 *
 * Only the entry points interop_core resolves exist; each appends a line to a log that the test
 * reads with fake_take_log().  "Device memory" is host memory (cuMemcpyAsync is a memcpy), so a
 * copy's result can be checked.  Two devices; a stream handle of at least 0x10000 belongs to
 * device (handle >> 16) & 1, a smaller one (and 0, 1, 2) to device 0.  Compiled with
 * -DFAKE_NO_STREAM_GET_DEVICE it is a driver older than CUDA 12.8 (no cuStreamGetDevice). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;

#define DEVICES 2
#define STACK 16
#define LOG_SIZE 65536

static int contexts[DEVICES];               /* a primary context is the address of its slot */
static void* stack[STACK];                  /* the calling thread's context stack (one thread) */
static int depth = 0;
static int event_slot;
static char log_text[LOG_SIZE];
static size_t log_used = 0;
static int logging = 1;

static void note(const char* name, long long arg, int with_arg) {
    int n;
    if (!logging)
        return;
    if (with_arg)
        n = snprintf(log_text + log_used, LOG_SIZE - log_used, "%s %lld\n", name, arg);
    else
        n = snprintf(log_text + log_used, LOG_SIZE - log_used, "%s\n", name);
    if (n > 0 && log_used + (size_t) n < LOG_SIZE)
        log_used += (size_t) n;
}

static int device_of_stream(void* stream) {
    unsigned long long h = (unsigned long long) stream;
    return h >= 0x10000 ? (int) ((h >> 16) & 1) : 0;
}

/* --- test side ------------------------------------------------------------------------- */

/* Copy the log (NUL-terminated, truncated to size) into out and clear it. */
int fake_take_log(char* out, int size) {
    size_t n = log_used < (size_t) (size - 1) ? log_used : (size_t) (size - 1);
    memcpy(out, log_text, n);
    out[n] = 0;
    log_used = 0;
    return (int) n;
}

/* Log calls (1, the default) or not (0: for timing the caller's own cost). */
void fake_set_logging(int on) { logging = on; }

/* Make device's primary context current (what torch does on the thread that uses a device). */
void fake_make_current(int device) {
    depth = 0;
    if (device >= 0)
        stack[depth++] = &contexts[device];
}

/* --- the driver ------------------------------------------------------------------------ */

int cuInit(unsigned int flags) { (void) flags; return 0; }

int cuDriverGetVersion(int* version) {
#ifdef FAKE_NO_STREAM_GET_DEVICE
    *version = 12040;
#else
    *version = 13000;
#endif
    return 0;
}

int cuGetErrorName(int status, const char** name) {
    (void) status;
    *name = "CUDA_ERROR_FAKE";
    return 0;
}

/* Unknown pointers: memory type 0 is ordinary host memory to the caller. */
int cuPointerGetAttributes(unsigned int n, int* attributes, void** values, CUdeviceptr ptr) {
    (void) n; (void) attributes; (void) values; (void) ptr;
    return 0;
}

int cuDeviceGetCount(int* count) { note("cuDeviceGetCount", 0, 0); *count = DEVICES; return 0; }

int cuDeviceGetAttribute(int* value, int attribute, int device) {
    (void) attribute; (void) device;
    note("cuDeviceGetAttribute", 0, 0);
    *value = 0;
    return 0;
}

int cuDeviceCanAccessPeer(int* can, int device, int peer) {
    (void) device; (void) peer;
    note("cuDeviceCanAccessPeer", 0, 0);
    *can = 0;
    return 0;
}

int cuDevicePrimaryCtxRetain(void** ctx, int device) {
    note("cuDevicePrimaryCtxRetain", device, 1);
    if (device < 0 || device >= DEVICES)
        return 101;                         /* CUDA_ERROR_INVALID_DEVICE */
    *ctx = &contexts[device];
    return 0;
}

int cuCtxGetCurrent(void** ctx) {
    note("cuCtxGetCurrent", 0, 0);
    *ctx = depth ? stack[depth - 1] : NULL;
    return 0;
}

int cuCtxPushCurrent_v2(void* ctx) {
    note("cuCtxPushCurrent", 0, 0);
    if (depth == STACK)
        return 1;
    stack[depth++] = ctx;
    return 0;
}

int cuCtxPopCurrent_v2(void** ctx) {
    note("cuCtxPopCurrent", 0, 0);
    if (depth == 0)
        return 201;                         /* CUDA_ERROR_INVALID_CONTEXT */
    *ctx = stack[--depth];
    return 0;
}

int cuCtxGetDevice(int* device) {
    note("cuCtxGetDevice", 0, 0);
    if (depth == 0)
        return 201;
    *device = (int) ((int*) stack[depth - 1] - contexts);
    return 0;
}

int cuCtxEnablePeerAccess(void* ctx, unsigned int flags) {
    (void) ctx; (void) flags;
    return 0;
}

int cuStreamGetCtx(void* stream, void** ctx) {
    note("cuStreamGetCtx", (long long) stream, 1);
    *ctx = &contexts[device_of_stream(stream)];
    return 0;
}

#ifndef FAKE_NO_STREAM_GET_DEVICE
int cuStreamGetDevice(void* stream, int* device) {
    note("cuStreamGetDevice", (long long) stream, 1);
    *device = device_of_stream(stream);
    return 0;
}
#endif

int cuStreamSynchronize(void* stream) { note("cuStreamSynchronize", (long long) stream, 1); return 0; }

int cuEventCreate(void** event, unsigned int flags) {
    (void) flags;
    note("cuEventCreate", 0, 0);
    *event = &event_slot;
    return 0;
}

int cuEventRecord(void* event, void* stream) {
    (void) event;
    note("cuEventRecord", (long long) stream, 1);
    return 0;
}

int cuStreamWaitEvent(void* stream, void* event, unsigned int flags) {
    (void) event; (void) flags;
    note("cuStreamWaitEvent", (long long) stream, 1);
    return 0;
}

int cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void* stream) {
    note("cuMemcpyAsync", (long long) stream, 1);
    memmove((void*) dst, (const void*) src, n);
    return 0;
}

int cuMemcpyPeerAsync(CUdeviceptr dst, void* dst_ctx, CUdeviceptr src, void* src_ctx, size_t n,
                      void* stream) {
    (void) dst_ctx; (void) src_ctx;
    note("cuMemcpyPeerAsync", (long long) stream, 1);
    memmove((void*) dst, (const void*) src, n);
    return 0;
}

/* Device allocations (the general path's temporaries) are host memory too. */
int cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
    note("cuMemAlloc", (long long) n, 1);
    *p = (CUdeviceptr) malloc(n);
    return *p ? 0 : 2;                      /* CUDA_ERROR_OUT_OF_MEMORY */
}

int cuMemFree_v2(CUdeviceptr p) { note("cuMemFree", 0, 0); free((void*) p); return 0; }

/* Resolved by interop_core, never called by the tests that use this library: they fail. */
int cuMemcpy2DAsync_v2(const void* p, void* stream) { (void) p; (void) stream; return 1; }
int cuMemcpy3DAsync_v2(const void* p, void* stream) { (void) p; (void) stream; return 1; }
int cuMemHostAlloc(void** p, size_t n, unsigned int flags) {
    (void) p; (void) n; (void) flags;
    return 2;
}
int cuMemFreeHost(void* p) { (void) p; return 0; }
int cuMemAllocManaged(CUdeviceptr* p, size_t n, unsigned int flags) {
    (void) p; (void) n; (void) flags;
    return 2;
}
