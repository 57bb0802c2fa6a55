// servesim calibration: paged decode attention with the KV split across thread blocks
// (split-KV, as vLLM's paged attention v2 and FlashDecoding do), and the pass that merges the
// splits. HEAD_DIM and GROUP (query heads per KV head) are compile-time (-D) constants; NVRTC
// compiles one cubin per pair (src/calibrate/kernels.rs lists the supported pairs).
//
// Layouts (bf16 stored as unsigned short):
//   q:            [batch][kv_heads * GROUP][HEAD_DIM]
//   k/v_cache:    [num_blocks][kv_heads][BLOCK_TOKENS][HEAD_DIM]
//   block_table:  [batch][max_blocks] int (physical block of each logical block)
//   context_lens: [batch] int
//   out:          [batch][kv_heads * GROUP][HEAD_DIM] float
//   part_ml:      [batch][kv_heads * GROUP][num_splits][2] float (a split's running max, sum)
//   part_acc:     [batch][kv_heads * GROUP][num_splits][HEAD_DIM] float (unnormalised output)

#define BLOCK_TOKENS 16
#define NWARPS 4
#define LPT (HEAD_DIM / 8)
#define TPW (32 / LPT)
#define SLOTS (NWARPS * TPW)

__device__ __forceinline__ float bf(unsigned int bits16) { return __uint_as_float(bits16 << 16); }

__device__ __forceinline__ void unpack(uint4 r, float* f) {
    f[0] = bf(r.x & 0xffffu); f[1] = bf(r.x >> 16);
    f[2] = bf(r.y & 0xffffu); f[3] = bf(r.y >> 16);
    f[4] = bf(r.z & 0xffffu); f[5] = bf(r.z >> 16);
    f[6] = bf(r.w & 0xffffu); f[7] = bf(r.w >> 16);
}

// Grid (kv_heads, batch, num_splits), NWARPS warps per block. Block (kvh, seq, split) covers the
// sequence's KV blocks [split * blocks_per_split, (split + 1) * blocks_per_split); its warps take
// every NWARPS-th 16-token block (through the block table), LPT lanes per token each holding 8
// bf16 of K and V (one 16-byte load), for the GROUP query heads that share the KV head (their
// scaled queries in shared memory, the accumulators in registers), with an online softmax; the
// warps' partial states are merged in shared memory. With one split the block writes the
// normalised output; otherwise its max, sum and unnormalised accumulator go to part_ml /
// part_acc for paged_decode_attention_merge. The launch bounds' minimum of one block per SM
// leaves ptxas free of an occupancy target: with only the block size it spilled a few bytes at
// some head_dim x group (NVRTC 12.9; the NVRTC compile test checks that nothing spills).
extern "C" __global__ void __launch_bounds__(NWARPS * 32, 1) paged_decode_attention(
    const unsigned short* __restrict__ q, const unsigned short* __restrict__ k_cache,
    const unsigned short* __restrict__ v_cache, const int* __restrict__ block_table,
    const int* __restrict__ context_lens, float* __restrict__ out, float* __restrict__ part_ml,
    float* __restrict__ part_acc, int kv_heads, int max_blocks, int blocks_per_split,
    float scale) {
    __shared__ __align__(16) float sm_q[GROUP][HEAD_DIM];
    __shared__ float sm_m[SLOTS][GROUP];
    __shared__ float sm_l[SLOTS][GROUP];
    __shared__ float sm_acc[SLOTS][GROUP][HEAD_DIM];

    const int kvh = blockIdx.x, seq = blockIdx.y, split = blockIdx.z;
    const int num_splits = gridDim.z;
    const int q_heads = kv_heads * GROUP;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int slot = lane / LPT, sub = lane % LPT;
    const int ctx = context_lens[seq];

    // The GROUP scaled query heads, in shared memory (registers hold the accumulators).
    const unsigned short* qs = q + ((size_t)seq * q_heads + kvh * GROUP) * HEAD_DIM;
    for (int idx = threadIdx.x; idx < GROUP * HEAD_DIM; idx += blockDim.x) {
        sm_q[idx / HEAD_DIM][idx % HEAD_DIM] = bf(qs[idx]) * scale;
    }
    float acc[GROUP][8], m[GROUP], l[GROUP];
    for (int g = 0; g < GROUP; ++g) {
        for (int i = 0; i < 8; ++i) acc[g][i] = 0.f;
        m[g] = -1e30f; l[g] = 0.f;
    }
    __syncthreads();
    const int nblocks = (ctx + BLOCK_TOKENS - 1) / BLOCK_TOKENS;
    const int b_begin = split * blocks_per_split;
    const int b_end = min(nblocks, b_begin + blocks_per_split);
    for (int b = b_begin + warp; b < b_end; b += NWARPS) {
        const size_t phys = (size_t)block_table[(size_t)seq * max_blocks + b];
        const size_t base = (phys * kv_heads + kvh) * BLOCK_TOKENS * HEAD_DIM;
        for (int t0 = 0; t0 < BLOCK_TOKENS; t0 += TPW) {
            const int t = t0 + slot;
            const bool valid = b * BLOCK_TOKENS + t < ctx;
            float kf[8], vf[8];
            uint4 kr = make_uint4(0, 0, 0, 0), vr = make_uint4(0, 0, 0, 0);
            if (valid) {
                kr = *(const uint4*)(k_cache + base + t * HEAD_DIM + sub * 8);
                vr = *(const uint4*)(v_cache + base + t * HEAD_DIM + sub * 8);
            }
            unpack(kr, kf);
            unpack(vr, vf);
            for (int g = 0; g < GROUP; ++g) {
                const float4 qa = *(const float4*)&sm_q[g][sub * 8];
                const float4 qb = *(const float4*)&sm_q[g][sub * 8 + 4];
                float s = qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] +
                          qb.x * kf[4] + qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
                for (int o = LPT / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                if (valid) {
                    const float mn = fmaxf(m[g], s);
                    const float c = __expf(m[g] - mn), p = __expf(s - mn);
                    l[g] = l[g] * c + p;
                    for (int i = 0; i < 8; ++i) acc[g][i] = acc[g][i] * c + p * vf[i];
                    m[g] = mn;
                }
            }
        }
    }
    const int me = warp * TPW + slot;
    for (int g = 0; g < GROUP; ++g) {
        if (sub == 0) { sm_m[me][g] = m[g]; sm_l[me][g] = l[g]; }
        for (int i = 0; i < 8; ++i) sm_acc[me][g][sub * 8 + i] = acc[g][i];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < GROUP * HEAD_DIM; idx += blockDim.x) {
        const int g = idx / HEAD_DIM, d = idx % HEAD_DIM;
        float mx = -1e30f;
        for (int s = 0; s < SLOTS; ++s) mx = fmaxf(mx, sm_m[s][g]);
        float den = 0.f, num = 0.f;
        for (int s = 0; s < SLOTS; ++s) {
            const float w = __expf(sm_m[s][g] - mx);
            den += sm_l[s][g] * w;
            num += sm_acc[s][g][d] * w;
        }
        const size_t row = (size_t)seq * q_heads + kvh * GROUP + g;
        if (num_splits == 1) {
            out[row * HEAD_DIM + d] = den > 0.f ? num / den : 0.f;
        } else {
            const size_t part = row * num_splits + split;
            part_acc[part * HEAD_DIM + d] = num;
            if (d == 0) { part_ml[part * 2] = mx; part_ml[part * 2 + 1] = den; }
        }
    }
}

// Grid (q_heads, batch), HEAD_DIM threads per block: merges a row's num_splits partial states
// (max m_s, sum l_s, accumulator a_s) into out = sum_s a_s e^(m_s - M) / sum_s l_s e^(m_s - M),
// M the largest m_s. Splits that covered no token carry l_s = 0 and add nothing.
extern "C" __global__ void __launch_bounds__(HEAD_DIM) paged_decode_attention_merge(
    const float* __restrict__ part_ml, const float* __restrict__ part_acc,
    float* __restrict__ out, int num_splits) {
    const size_t row = (size_t)blockIdx.y * gridDim.x + blockIdx.x;
    const int d = threadIdx.x;
    const float* ml = part_ml + row * num_splits * 2;
    float mx = -1e30f;
    for (int s = 0; s < num_splits; ++s) mx = fmaxf(mx, ml[s * 2]);
    float den = 0.f, num = 0.f;
    for (int s = 0; s < num_splits; ++s) {
        const float w = __expf(ml[s * 2] - mx);
        den += ml[s * 2 + 1] * w;
        num += part_acc[(row * num_splits + s) * HEAD_DIM + d] * w;
    }
    out[row * HEAD_DIM + d] = den > 0.f ? num / den : 0.f;
}
