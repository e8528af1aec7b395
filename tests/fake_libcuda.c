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

/* Unknown pointers: memory type 0 is ordinary host memory to the caller, and such queries are
 * not logged.  A test may make every pointer memory of one kind (fake_set_pointer_answer): the
 * queries are then logged, with the pointer. */
static int pointer_memory_type = 0;     /* CU_MEMORYTYPE_*: 1 host, 2 device; 0 unknown */
static int pointer_ordinal = 0;
static int pointer_managed = 0;

void fake_set_pointer_answer(int memory_type, int ordinal, int is_managed) {
    pointer_memory_type = memory_type;
    pointer_ordinal = ordinal;
    pointer_managed = is_managed;
}

int cuPointerGetAttributes(unsigned int n, int* attributes, void** values, CUdeviceptr ptr) {
    unsigned int i;
    if (!pointer_memory_type)
        return 0;
    note("cuPointerGetAttributes", (long long) ptr, 1);
    for (i = 0; i < n; i++) {
        switch (attributes[i]) {
        case 2: *(unsigned int*) values[i] = (unsigned int) pointer_memory_type; break;
        case 8: *(int*) values[i] = pointer_managed; break;
        case 9: *(int*) values[i] = pointer_ordinal; break;
        default: break;
        }
    }
    return 0;
}

int cuDeviceGetCount(int* count) { note("cuDeviceGetCount", 0, 0); *count = DEVICES; return 0; }

/* The launch limits of an sm_90 device (grid, block, threads, opt-in shared memory, clusters,
 * cooperative launches); every other attribute reads 0. */
int cuDeviceGetAttribute(int* value, int attribute, int device) {
    (void) device;
    note("cuDeviceGetAttribute", attribute, 1);
    switch (attribute) {
    case 1: *value = 1024; break;           /* MAX_THREADS_PER_BLOCK */
    case 2: case 3: *value = 1024; break;   /* MAX_BLOCK_DIM_X, _Y */
    case 4: *value = 64; break;             /* MAX_BLOCK_DIM_Z */
    case 5: *value = 2147483647; break;     /* MAX_GRID_DIM_X */
    case 6: case 7: *value = 65535; break;  /* MAX_GRID_DIM_Y, _Z */
    case 97: *value = 232448; break;        /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    case 95: case 120: *value = 1; break;   /* COOPERATIVE_LAUNCH, CLUSTER_LAUNCH */
    default: *value = 0;
    }
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

/* --- modules and launches -------------------------------------------------------------- */

/* Every function of every module has the parameter sizes the test set last (fake_set_params);
 * a count of -1 makes cuFuncGetParamInfo fail as on a driver before CUDA 12.4.  A launch saves
 * its configuration and each parameter's bytes (as many as its size says) for
 * fake_last_launch.  An image starting with "bad" fails to load, with a JIT log; a kernel name
 * starting with "missing" is not found. */
#define MAX_FAKE_PARAMS 64
static size_t param_sizes[MAX_FAKE_PARAMS];
static int param_count = -1;
static int module_slot;
static int function_slot;
static unsigned long long last_config[16];
static unsigned char last_params[MAX_FAKE_PARAMS * 8];
static size_t last_params_used = 0;

void fake_set_params(const long long* sizes, int n) {
    param_count = n;
    for (int i = 0; i < n && i < MAX_FAKE_PARAMS; ++i)
        param_sizes[i] = (size_t) sizes[i];
}

/* config: grid x y z, block x y z, shared memory, stream, number of attributes, then per
 * attribute (at most 2 reported) its id and first value word; returns the parameter bytes. */
int fake_last_launch(unsigned long long* config, unsigned char* params, int size) {
    memcpy(config, last_config, sizeof(last_config));
    size_t n = last_params_used < (size_t) size ? last_params_used : (size_t) size;
    memcpy(params, last_params, n);
    return (int) n;
}

static void save_params(void** params) {
    last_params_used = 0;
    if (params == NULL || param_count < 0)
        return;
    for (int i = 0; i < param_count && i < MAX_FAKE_PARAMS; ++i) {
        memcpy(last_params + last_params_used, params[i], param_sizes[i]);
        last_params_used += param_sizes[i];
    }
}

int cuModuleLoadDataEx(void** module, const void* image, unsigned int n, int* options,
                       void** values) {
    const char* text = (const char*) image;
    note("cuModuleLoadDataEx", memcmp(text, "\x7f" "ELF", 4) == 0, 1);
    if (strncmp(text, "bad", 3) == 0) {
        for (unsigned int i = 0; i < n; ++i)
            if (options[i] == 5)            /* CU_JIT_ERROR_LOG_BUFFER */
                strcpy((char*) values[i], "ptxas fatal: fake syntax error");
        return 218;                         /* CUDA_ERROR_INVALID_PTX */
    }
    *module = &module_slot;
    return 0;
}

int cuModuleGetFunction(void** function, void* module, const char* name) {
    (void) module;
    note("cuModuleGetFunction", 0, 0);
    if (strncmp(name, "missing", 7) == 0)
        return 500;                         /* CUDA_ERROR_NOT_FOUND */
    *function = &function_slot;
    return 0;
}

int cuModuleUnload(void* module) { (void) module; note("cuModuleUnload", 0, 0); return 0; }

/* A driver that counts parameters (cuFuncGetParamCount) unless the count is -1; a query past
 * the last parameter is logged: it is what compute-sanitizer reports as a failed API call. */
int cuFuncGetParamCount(void* f, size_t* count) {
    (void) f;
    if (param_count < 0)
        return 801;                         /* CUDA_ERROR_NOT_SUPPORTED */
    *count = (size_t) param_count;
    return 0;
}

int cuFuncGetParamInfo(void* f, size_t index, size_t* offset, size_t* size) {
    (void) f;
    if (param_count < 0)
        return 801;                         /* CUDA_ERROR_NOT_SUPPORTED */
    if ((int) index >= param_count) {
        note("cuFuncGetParamInfo past the last parameter", 0, 0);
        return 1;                           /* CUDA_ERROR_INVALID_VALUE */
    }
    *offset = 0;
    *size = param_sizes[index];
    return 0;
}

int cuFuncSetAttribute(void* f, int attribute, int value) {
    (void) f; (void) attribute;
    note("cuFuncSetAttribute", value, 1);
    return 0;
}

int cuLaunchKernel(void* f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                   unsigned int by, unsigned int bz, unsigned int shared, void* stream,
                   void** params, void** extra) {
    (void) f; (void) extra;
    note("cuLaunchKernel", (long long) stream, 1);
    unsigned long long c[16] = {gx, gy, gz, bx, by, bz, shared, (unsigned long long) stream, 0};
    memcpy(last_config, c, sizeof(c));
    save_params(params);
    return 0;
}

typedef struct {
    int id;
    char pad[4];
    unsigned long long value[8];
} FakeLaunchAttribute;

typedef struct {
    unsigned int grid[3];
    unsigned int block[3];
    unsigned int shared;
    void* stream;
    FakeLaunchAttribute* attrs;
    unsigned int num_attrs;
} FakeLaunchConfig;

int cuLaunchKernelEx(const FakeLaunchConfig* config, void* f, void** params, void** extra) {
    (void) f; (void) extra;
    note("cuLaunchKernelEx", (long long) config->stream, 1);
    unsigned long long c[16] = {config->grid[0], config->grid[1], config->grid[2],
                                config->block[0], config->block[1], config->block[2],
                                config->shared, (unsigned long long) config->stream,
                                config->num_attrs};
    for (unsigned int i = 0; i < config->num_attrs && i < 3; ++i) {
        c[9 + 2 * i] = (unsigned long long) config->attrs[i].id;
        c[10 + 2 * i] = config->attrs[i].value[0];
    }
    memcpy(last_config, c, sizeof(c));
    save_params(params);
    return 0;
}
