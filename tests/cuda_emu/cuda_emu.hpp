// A CPU stand-in for the CUDA C features servesim's calibration kernels use, so that their
// logic (indexing, the split-KV partition, the online softmax, the merge) runs and is checked
// against the CPU reference without a GPU (tests/kernel_emulation.rs).
//
// Every thread of a block is a std::thread; the blocks of a grid run one after another, each
// thread looping over them, with a block barrier between blocks. __shared__ variables become
// function statics, shared by the block's threads. __syncthreads() is the block barrier; a warp
// shuffle writes the lane's value to the warp's buffer, waits for the warp, reads the source
// lane's value and waits again (the kernels call shuffles with the whole warp converged, as
// __shfl_*_sync with a full mask requires). It checks the kernels' arithmetic and indexing, not
// their performance or memory-model corner cases.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct uint4 { unsigned int x, y, z, w; };
struct float4 { float x, y, z, w; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }

struct Dim3 { unsigned x = 1, y = 1, z = 1; };
inline thread_local Dim3 threadIdx, blockIdx;
inline Dim3 blockDim, gridDim;

inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __expf(float x) { return std::exp(x); }
using std::max;
using std::min;

namespace emu {
inline std::unique_ptr<std::barrier<>> block_barrier;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
inline std::vector<std::array<unsigned long long, 32>> shuffle_buf;

template <class T> T exchange(T v, unsigned src) {
    const unsigned t = threadIdx.x, warp = t / 32, lane = t % 32;
    unsigned long long bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    shuffle_buf[warp][lane] = bits;
    warp_barriers[warp]->arrive_and_wait();
    T r;
    bits = shuffle_buf[warp][src];
    std::memcpy(&r, &bits, sizeof(T));
    warp_barriers[warp]->arrive_and_wait();
    return r;
}

// Runs kernel(args...) over `grid` blocks of `block.x` threads (a multiple of 32).
template <class K, class... A> void launch(Dim3 grid, Dim3 block, K kernel, A... args) {
    const unsigned n = block.x;
    gridDim = grid;
    blockDim = block;
    block_barrier = std::make_unique<std::barrier<>>(n);
    warp_barriers.clear();
    for (unsigned w = 0; w < n / 32; ++w) warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
    shuffle_buf.assign(n / 32, {});
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < n; ++t) {
        threads.emplace_back([=] {
            threadIdx = {t, 0, 0};
            for (unsigned z = 0; z < grid.z; ++z)
                for (unsigned y = 0; y < grid.y; ++y)
                    for (unsigned x = 0; x < grid.x; ++x) {
                        blockIdx = {x, y, z};
                        kernel(args...);
                        block_barrier->arrive_and_wait();
                    }
        });
    }
    for (auto& th : threads) th.join();
}
}  // namespace emu

inline void __syncthreads() { emu::block_barrier->arrive_and_wait(); }
template <class T> T __shfl_xor_sync(unsigned, T v, int o) {
    return emu::exchange(v, (threadIdx.x % 32) ^ (unsigned)o);
}
template <class T> T __shfl_down_sync(unsigned, T v, int o) {
    const unsigned src = threadIdx.x % 32 + (unsigned)o;
    return emu::exchange(v, src < 32 ? src : threadIdx.x % 32);
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    return std::atomic_ref<unsigned long long>(*p).fetch_add(v);
}
