// Runs src/calibrate/kernels/attention.cu (built with -DHEAD_DIM and -DGROUP) on the CPU through
// cuda_emu.hpp: reads one case written by tests/kernel_emulation.rs, runs the attention kernel
// with the given split and, when split, the merge pass, and writes the output.
//
// Input (little-endian): u32 batch, kv_heads, max_blocks, num_blocks, splits, blocks_per_split;
// f32 scale; u16 q[batch * kv_heads * GROUP * HEAD_DIM]; u16 k, v[num_blocks * kv_heads * 16 *
// HEAD_DIM]; i32 block_table[batch * max_blocks]; i32 context_lens[batch].
// Output: f32 out[batch * kv_heads * GROUP * HEAD_DIM].
#include "cuda_emu.hpp"

#include "../../src/calibrate/kernels/attention.cu"

#include <cstdint>
#include <cstdio>

template <class T> static std::vector<T> read(std::FILE* f, size_t n) {
    std::vector<T> v(n);
    if (n && std::fread(v.data(), sizeof(T), n, f) != n) { std::perror("short input"); std::exit(2); }
    return v;
}

int main(int argc, char** argv) {
    if (argc != 3) { std::fprintf(stderr, "usage: run_attention IN OUT\n"); return 2; }
    std::FILE* in = std::fopen(argv[1], "rb");
    if (!in) { std::perror(argv[1]); return 2; }
    const auto h = read<uint32_t>(in, 6);
    const unsigned batch = h[0], kv_heads = h[1], max_blocks = h[2], num_blocks = h[3];
    const unsigned splits = h[4], bps = h[5];
    const float scale = read<float>(in, 1)[0];
    const size_t q_heads = (size_t)kv_heads * GROUP;
    const auto q = read<uint16_t>(in, batch * q_heads * HEAD_DIM);
    const size_t pool = (size_t)num_blocks * kv_heads * BLOCK_TOKENS * HEAD_DIM;
    const auto k = read<uint16_t>(in, pool);
    const auto v = read<uint16_t>(in, pool);
    const auto table = read<int32_t>(in, (size_t)batch * max_blocks);
    const auto lens = read<int32_t>(in, batch);
    std::fclose(in);

    std::vector<float> out(batch * q_heads * HEAD_DIM, -7.f);  // -7: never written
    std::vector<float> part_ml(batch * q_heads * splits * 2, -7.f);
    std::vector<float> part_acc(batch * q_heads * splits * HEAD_DIM, -7.f);
    float* ml = splits > 1 ? part_ml.data() : nullptr;
    float* acc = splits > 1 ? part_acc.data() : nullptr;
    emu::launch(Dim3{kv_heads, batch, splits}, Dim3{NWARPS * 32, 1, 1}, paged_decode_attention,
                q.data(), k.data(), v.data(), table.data(), lens.data(), out.data(), ml, acc,
                (int)kv_heads, (int)max_blocks, (int)bps, scale);
    if (splits > 1) {
        emu::launch(Dim3{(unsigned)q_heads, batch, 1}, Dim3{HEAD_DIM, 1, 1},
                    paged_decode_attention_merge, (const float*)ml, (const float*)acc, out.data(),
                    (int)splits);
    }
    std::FILE* o = std::fopen(argv[2], "wb");
    if (!o || std::fwrite(out.data(), sizeof(float), out.size(), o) != out.size()) {
        std::perror(argv[2]);
        return 2;
    }
    std::fclose(o);
    return 0;
}
