/* A stand-in libcuda.so for tests/cuda_stub.rs: a "driver" that reports one H200-like device
 * and a chosen CUDA version, so that `servesim calibrate --check` (feature cuda) runs its
 * open-time checks on a machine without a GPU: the driver-symbol check, the choice of the
 * event-timing symbol, the driver version, the device, the NVRTC choice and version check.
 * It allocates nothing and runs nothing: every call the check makes after the device query
 * answers CUDA_ERROR_NOT_SUPPORTED.
 *
 * Build options: -DDRIVER_VERSION=12040 (cuDriverGetVersion), -DWITH_V2 (export
 * cuEventElapsedTime_v2, as R570+ drivers do), -DOMIT_ALLOC_ASYNC (a driver without
 * cuMemAllocAsync), -DNO_GPU (cuInit answers CUDA_ERROR_NO_DEVICE). */
#include <string.h>

#ifndef DRIVER_VERSION
#define DRIVER_VERSION 12040
#endif

typedef int CUresult;
enum { CUDA_OK = 0, CUDA_NO_DEVICE = 100, CUDA_NOT_SUPPORTED = 801 };
static int ctx_token;
static void* current;

CUresult cuInit(unsigned f) {
    (void)f;
#ifdef NO_GPU
    return CUDA_NO_DEVICE;
#else
    return CUDA_OK;
#endif
}
CUresult cuDriverGetVersion(int* v) { *v = DRIVER_VERSION; return CUDA_OK; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return CUDA_OK; }
CUresult cuDeviceGet(int* d, int ordinal) { *d = ordinal; return CUDA_OK; }
CUresult cuDeviceGetName(char* name, int len, int dev) {
    (void)dev;
    strncpy(name, "NVIDIA H200", (size_t)len);
    return CUDA_OK;
}
CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
    (void)dev;
    switch (attr) {
        case 16: *v = 132; return CUDA_OK;             /* multiprocessors */
        case 38: *v = 50 * 1024 * 1024; return CUDA_OK; /* L2 bytes */
        case 75: *v = 9; return CUDA_OK;               /* compute capability */
        case 76: *v = 0; return CUDA_OK;
        case 115: *v = 1; return CUDA_OK;              /* memory pools */
        default: *v = 0; return CUDA_OK;
    }
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) { (void)dev; *ctx = &ctx_token; return CUDA_OK; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return CUDA_OK; }
CUresult cuCtxGetCurrent(void** ctx) { *ctx = current; return CUDA_OK; }
CUresult cuCtxSetCurrent(void* ctx) { current = ctx; return CUDA_OK; }
CUresult cuMemGetInfo_v2(size_t* free_b, size_t* total) {
    *free_b = (size_t)139 << 30;
    *total = (size_t)141 << 30;
    return CUDA_OK;
}
CUresult cuGetErrorName(CUresult e, const char** s) { (void)e; *s = "CUDA_ERROR_STUB"; return CUDA_OK; }
CUresult cuGetErrorString(CUresult e, const char** s) { (void)e; *s = "stub driver"; return CUDA_OK; }

#define UNSUPPORTED(name) \
    CUresult name(void) { return CUDA_NOT_SUPPORTED; }
UNSUPPORTED(cuCtxSynchronize)
#ifndef OMIT_ALLOC_ASYNC
UNSUPPORTED(cuMemAllocAsync)
#endif
UNSUPPORTED(cuMemFreeAsync)
UNSUPPORTED(cuMemAlloc_v2)
UNSUPPORTED(cuMemFree_v2)
UNSUPPORTED(cuMemcpyHtoDAsync_v2)
UNSUPPORTED(cuMemcpyDtoHAsync_v2)
UNSUPPORTED(cuMemsetD8Async)
UNSUPPORTED(cuStreamSynchronize)
UNSUPPORTED(cuModuleLoadData)
UNSUPPORTED(cuModuleGetFunction)
UNSUPPORTED(cuModuleUnload)
UNSUPPORTED(cuLaunchKernel)
UNSUPPORTED(cuEventCreate)
UNSUPPORTED(cuEventRecord)
UNSUPPORTED(cuEventSynchronize)
UNSUPPORTED(cuEventDestroy_v2)
UNSUPPORTED(cuEventElapsedTime)
#ifdef WITH_V2
UNSUPPORTED(cuEventElapsedTime_v2)
#endif
