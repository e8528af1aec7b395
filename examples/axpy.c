/* out[i] = a * x[i] + y[i] for i < n, float32, contiguous: interop-core's launcher example and
 * tests call these through ctypes with the arrays launch_args() builds.
 *
 * axpy_pointers takes LaunchArgs.address: one void* per argument, a tensor's data pointer or
 * the address of a scalar's value.  axpy_params takes LaunchArgs.kernel_params_address, the
 * form cuLaunchKernel takes: for every argument a pointer to its value, so a tensor's entry
 * points at a slot holding its data pointer.  Both expect (out, x, y, a, n) with a stored as
 * float32 and n as int64 (launch_args(..., scalar_types=(None, None, None, "float32", None))).
 */
#include <stdint.h>

void axpy_pointers(void** args) {
    float* out = (float*) args[0];
    const float* x = (const float*) args[1];
    const float* y = (const float*) args[2];
    float a = *(const float*) args[3];
    int64_t n = *(const int64_t*) args[4];
    for (int64_t i = 0; i < n; ++i) out[i] = a * x[i] + y[i];
}

void axpy_params(void** params) {
    float* out = *(float**) params[0];
    const float* x = *(const float**) params[1];
    const float* y = *(const float**) params[2];
    float a = *(const float*) params[3];
    int64_t n = *(const int64_t*) params[4];
    for (int64_t i = 0; i < n; ++i) out[i] = a * x[i] + y[i];
}
