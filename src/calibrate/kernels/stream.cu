// servesim calibration: HBM streaming kernels, the empty kernel, the stream-holding spin kernel
// and the input fills. Compiled by NVRTC to a cubin for the device's architecture
// (src/calibrate/kernels.rs lists the kernels; src/calibrate/cuda.rs launches them).

extern "C" __global__ void empty_kernel() {}

// Copies n 16-byte words from src to dst (grid-stride loop).
extern "C" __global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                       unsigned long long n) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        dst[i] = src[i];
    }
}

// Sums every 32-bit word of src into *out (mod 2^64): a read-only pass over HBM.
extern "C" __global__ void reduce_kernel(const uint4* __restrict__ src, unsigned long long n,
                                         unsigned long long* out) {
    unsigned long long acc = 0;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        uint4 v = src[i];
        acc += (unsigned long long)v.x + v.y + v.z + v.w;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    __shared__ unsigned long long partial[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < (int)(blockDim.x >> 5) ? partial[lane] : 0ull;
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        if (lane == 0) atomicAdd(out, acc);
    }
}

// Holds the stream for `ns` nanoseconds of the GPU's global timer, so that the launches queued
// behind it start back to back once it ends, whatever the host's launch overhead (the method
// of nvbench's blocking kernel, with a fixed duration instead of a host flag). One thread.
extern "C" __global__ void spin_kernel(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(256);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

__device__ __forceinline__ unsigned int mix(unsigned long long i, unsigned int seed) {
    unsigned long long x = i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 29;
    return (unsigned int)x;
}

// bf16 values in {-1, -0.875, ..., 1}: exact in bf16, small enough for any GEMM.
extern "C" __global__ void fill_bf16(unsigned short* p, unsigned long long n, unsigned int seed) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        float f = ((int)(mix(i, seed) % 17u) - 8) * 0.125f;
        p[i] = (unsigned short)(__float_as_uint(f) >> 16);
    }
}

// fp8 e4m3 codes of {0, +-0.5, +-1, +-1.5}.
extern "C" __global__ void fill_fp8(unsigned char* p, unsigned long long n, unsigned int seed) {
    const unsigned char codes[8] = {0x00, 0x30, 0x38, 0x3C, 0x80, 0xB0, 0xB8, 0xBC};
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        p[i] = codes[mix(i, seed) & 7u];
    }
}
