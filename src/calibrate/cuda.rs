//! The kernel suite on a CUDA GPU through cudarc: HBM copy and reduction and an empty kernel
//! (NVRTC), weight GEMMs in bf16 and fp8 (cuBLASLt), and the project's own paged
//! decode-attention kernel (CUDA C below, compiled at run time by NVRTC).
//!
//! Every kernel is checked against a CPU reference on small inputs before it is timed. Timing:
//! warm-up launches, then each run is bracketed by timing-enabled CUDA events on one stream;
//! inputs rotate over a pool larger than twice the L2 cache so no run reads warm data.
//! cudarc loads libcuda / libnvrtc / libcublasLt dynamically and panics when one is missing,
//! so [`CudaBackend::open`] checks each with `is_culib_present()` first, and every call into
//! cudarc runs under `catch_unwind` (a missing symbol in an old driver is a panic there).

use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::cublaslt::{result as lt, sys as ltsys};
use cudarc::driver::{
    sys as dsys, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr,
    LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{AttentionShape, DeviceInfo, GemmDtype, KernelBackend, Timing, KV_BLOCK_TOKENS};
use crate::error::{Error, Result};

/// Warm-up launches before the timed runs.
const WARMUP: usize = 5;
/// Launches per sample of the empty-kernel measurement.
const EMPTY_PER_SAMPLE: usize = 100;
/// Threads per block of the streaming kernels.
const STREAM_THREADS: u32 = 256;
/// Warps per block of the attention kernel (must match NWARPS in the source).
const ATTN_WARPS: u32 = 4;
/// Largest GQA group (query heads per KV head) the attention kernel's shared memory holds.
const MAX_GROUP: u64 = 8;

/// Streaming kernels, the empty kernel and fills, compiled once.
const STREAM_SRC: &str = r#"
extern "C" __global__ void empty_kernel() {}

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
"#;

/// The paged decode-attention kernel. One thread block per (KV head, sequence); each of its
/// NWARPS warps walks the sequence's 16-token KV blocks (through the block table) with an
/// online softmax, LPT lanes per token each holding 8 bf16 of K and V (one 16-byte load),
/// for the GROUP query heads that share the KV head; the warps' partial results are merged in
/// shared memory. HEAD_DIM and GROUP are compile-time (-D) constants.
const ATTENTION_SRC: &str = r#"
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

// q: [batch][kv_heads * GROUP][HEAD_DIM] bf16
// k_cache, v_cache: [num_blocks][kv_heads][BLOCK_TOKENS][HEAD_DIM] bf16
// block_table: [batch][max_blocks] int; context_lens: [batch] int
// out: [batch][kv_heads * GROUP][HEAD_DIM] float
extern "C" __global__ void __launch_bounds__(NWARPS * 32) paged_decode_attention(
    const unsigned short* __restrict__ q, const unsigned short* __restrict__ k_cache,
    const unsigned short* __restrict__ v_cache, const int* __restrict__ block_table,
    const int* __restrict__ context_lens, float* __restrict__ out, int kv_heads, int max_blocks,
    float scale) {
    __shared__ float sm_m[SLOTS][GROUP];
    __shared__ float sm_l[SLOTS][GROUP];
    __shared__ float sm_acc[SLOTS][GROUP][HEAD_DIM];

    const int kvh = blockIdx.x, seq = blockIdx.y;
    const int q_heads = kv_heads * GROUP;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int slot = lane / LPT, sub = lane % LPT;
    const int ctx = context_lens[seq];

    float qv[GROUP][8], acc[GROUP][8], m[GROUP], l[GROUP];
    for (int g = 0; g < GROUP; ++g) {
        const unsigned short* qp = q + ((size_t)seq * q_heads + kvh * GROUP + g) * HEAD_DIM + sub * 8;
        unpack(*(const uint4*)qp, qv[g]);
        for (int i = 0; i < 8; ++i) { qv[g][i] *= scale; acc[g][i] = 0.f; }
        m[g] = -1e30f; l[g] = 0.f;
    }
    const int nblocks = (ctx + BLOCK_TOKENS - 1) / BLOCK_TOKENS;
    for (int b = warp; b < nblocks; b += NWARPS) {
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
                float s = 0.f;
                for (int i = 0; i < 8; ++i) s += qv[g][i] * kf[i];
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
        out[((size_t)seq * q_heads + kvh * GROUP + g) * HEAD_DIM + d] = den > 0.f ? num / den : 0.f;
    }
}
"#;

fn cuda_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("CUDA {what}: {e}"))
}

/// Runs `f`, turning a panic inside cudarc (a library or symbol that cannot be loaded) into
/// an error.
fn guard<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(Error::Internal(format!("CUDA {what}: {msg}")))
        }
    }
}

fn bf16_bits(x: f32) -> u16 {
    // Round to nearest even; inputs here are exact in bf16, so this is a truncation.
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

fn bf16_value(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// Decodes an fp8 e4m3 code (finite values only; the fills use a handful of exact codes).
fn e4m3_value(c: u8) -> f32 {
    let sign = if c & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((c >> 3) & 0xf) as i32;
    let m = (c & 7) as f32;
    let v = if e == 0 {
        m / 8.0 * 2f32.powi(-6)
    } else {
        (1.0 + m / 8.0) * 2f32.powi(e - 7)
    };
    sign * v
}

/// RAII owner of a cuBLASLt descriptor (layout, matmul desc, or preference).
struct LtObj<T: Copy> {
    raw: T,
    destroy: unsafe fn(T) -> std::result::Result<(), lt::CublasError>,
}

impl<T: Copy> Drop for LtObj<T> {
    fn drop(&mut self) {
        // SAFETY: `raw` was created by the matching create call and is destroyed once, here.
        let _ = unsafe { (self.destroy)(self.raw) };
    }
}

/// The kernel suite on one CUDA device.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    sm_count: u32,
    empty: CudaFunction,
    copy: CudaFunction,
    reduce: CudaFunction,
    fill_bf16: CudaFunction,
    fill_fp8: CudaFunction,
    /// Attention kernels by (head_dim, group), each verified when compiled.
    attention: HashMap<(u64, u64), CudaFunction>,
    lt: ltsys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
    arch: &'static str,
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // SAFETY: the handle was created in `open` and is destroyed once, here.
        let _ = unsafe { lt::destroy_handle(self.lt) };
    }
}

/// cuBLASLt workspace size (NVIDIA's recommendation for Hopper), bytes.
const WORKSPACE_BYTES: usize = 32 << 20;

fn arch_of(major: i32, minor: i32) -> &'static str {
    match (major, minor) {
        (9, _) => "compute_90",
        (8, 9) => "compute_89",
        (8, 6) => "compute_86",
        (8, _) => "compute_80",
        (10, _) => "compute_100",
        (12, _) => "compute_120",
        _ => "compute_75",
    }
}

impl CudaBackend {
    /// Opens device `ordinal`: checks the CUDA driver, NVRTC and cuBLASLt can be loaded
    /// (an [`Error::Unavailable`] naming the missing one otherwise), creates the context and
    /// compiles the streaming kernels.
    pub fn open(ordinal: usize) -> Result<Self> {
        // SAFETY: these only try to dlopen the libraries; nothing is called through them.
        if !unsafe { dsys::is_culib_present() } {
            return Err(Error::Unavailable(
                "no CUDA driver was found (libcuda.so could not be loaded): `servesim calibrate` \
                 needs an NVIDIA GPU and its driver"
                    .into(),
            ));
        }
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(Error::Unavailable(
                "NVRTC (libnvrtc.so) could not be loaded: install the CUDA runtime libraries \
                 (e.g. pip install nvidia-cuda-nvrtc-cu12) and put them on LD_LIBRARY_PATH"
                    .into(),
            ));
        }
        if !unsafe { ltsys::is_culib_present() } {
            return Err(Error::Unavailable(
                "cuBLASLt (libcublasLt.so) could not be loaded: install cuBLAS \
                 (e.g. pip install nvidia-cublas-cu12) and put it on LD_LIBRARY_PATH"
                    .into(),
            ));
        }
        guard("open", || Self::open_inner(ordinal))
    }

    fn open_inner(ordinal: usize) -> Result<Self> {
        let count = CudaContext::device_count().map_err(|e| cuda_err("device count", e))?;
        if ordinal as i64 >= count as i64 {
            return Err(Error::config(
                "--device",
                "device",
                format!("no CUDA device {ordinal}: this machine has {count}"),
            ));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| cuda_err("context", e))?;
        // SAFETY: the suite uses one stream only, so no cross-stream synchronisation is needed;
        // without tracking, kernel arguments carry no event records into the timed region.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        let name = ctx.name().map_err(|e| cuda_err("device name", e))?;
        let mut version: std::ffi::c_int = 0;
        // SAFETY: the driver library is loaded (checked in `open`); `version` is a valid out pointer.
        let rc = unsafe { dsys::cuDriverGetVersion(&mut version) };
        let driver = if rc == dsys::CUresult::CUDA_SUCCESS {
            version.to_string()
        } else {
            String::new()
        };
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| cuda_err("compute capability", e))?;
        let attr = |a| {
            ctx.attribute(a)
                .map_err(|e| cuda_err("device attribute", e))
        };
        let l2 = attr(dsys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?;
        let sm_count = attr(dsys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let (free, _total) = ctx.mem_get_info().map_err(|e| cuda_err("memory info", e))?;
        let arch = arch_of(major, minor);
        let ptx = compile_ptx_with_opts(
            STREAM_SRC,
            CompileOptions {
                arch: Some(arch),
                name: Some("servesim_stream.cu".into()),
                ..Default::default()
            },
        )
        .map_err(|e| cuda_err("NVRTC (streaming kernels)", e))?;
        let module = ctx
            .load_module(ptx)
            .map_err(|e| cuda_err("load module", e))?;
        let f = |n: &str| {
            module
                .load_function(n)
                .map_err(|e| cuda_err(&format!("function {n}"), e))
        };
        let lt_handle = lt::create_handle().map_err(|e| cuda_err("cuBLASLt handle", e))?;
        // SAFETY: allocation of uninitialised bytes used only as cuBLASLt scratch space.
        let workspace =
            unsafe { stream.alloc::<u8>(WORKSPACE_BYTES) }.map_err(|e| cuda_err("workspace", e))?;
        Ok(CudaBackend {
            info: DeviceInfo {
                name,
                driver,
                supports_fp8: (major, minor) >= (8, 9),
                l2_bytes: l2.max(0) as u64,
                free_bytes: free as u64,
            },
            sm_count: sm_count.max(1) as u32,
            empty: f("empty_kernel")?,
            copy: f("copy_kernel")?,
            reduce: f("reduce_kernel")?,
            fill_bf16: f("fill_bf16")?,
            fill_fp8: f("fill_fp8")?,
            attention: HashMap::new(),
            lt: lt_handle,
            workspace,
            arch,
            ctx,
            stream,
        })
    }

    fn stream_cfg(&self) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (self.sm_count * 8, 1, 1),
            block_dim: (STREAM_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    fn ptr<T>(&self, s: &CudaSlice<T>) -> u64 {
        // Event tracking is off, so the guard records nothing when dropped.
        let (p, _guard) = s.device_ptr(&self.stream);
        p
    }

    fn alloc<T: cudarc::driver::DeviceRepr>(&self, len: usize) -> Result<CudaSlice<T>> {
        // SAFETY: every buffer is filled (or fully written by a kernel) before it is read.
        unsafe { self.stream.alloc::<T>(len.max(1)) }.map_err(|e| cuda_err("alloc", e))
    }

    fn fill(&self, ptr: u64, elems: u64, fp8: bool, seed: u32) -> Result<()> {
        let f = if fp8 { &self.fill_fp8 } else { &self.fill_bf16 };
        let mut b = self.stream.launch_builder(f);
        b.arg(&ptr).arg(&elems).arg(&seed);
        // SAFETY: `ptr` holds `elems` elements of the kernel's element type.
        unsafe { b.launch(self.stream_cfg()) }.map_err(|e| cuda_err("fill", e))?;
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| cuda_err("synchronize", e))
    }

    fn timing_event(&self) -> Result<CudaEvent> {
        self.ctx
            .new_event(Some(dsys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| cuda_err("event", e))
    }

    /// Warm-up, then `runs` samples of `per_sample` calls of `launch(i)` between two timing
    /// events; each sample is the elapsed time divided by `per_sample`, microseconds.
    fn time_runs(
        &self,
        runs: usize,
        per_sample: usize,
        launch: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<Timing> {
        for i in 0..WARMUP {
            launch(i)?;
        }
        self.sync()?;
        let (start, end) = (self.timing_event()?, self.timing_event()?);
        let mut samples = Vec::with_capacity(runs);
        let mut i = WARMUP;
        for _ in 0..runs {
            start
                .record(&self.stream)
                .map_err(|e| cuda_err("record", e))?;
            for _ in 0..per_sample {
                launch(i)?;
                i += 1;
            }
            end.record(&self.stream)
                .map_err(|e| cuda_err("record", e))?;
            let ms = start.elapsed_ms(&end).map_err(|e| cuda_err("elapsed", e))?;
            samples.push(ms as f64 * 1e3 / per_sample as f64);
        }
        self.ctx.check_err().map_err(|e| cuda_err("deferred", e))?;
        Timing::from_samples(&samples)
    }

    /// How many copies of a `bytes`-sized input rotate so that together they exceed twice L2.
    fn rotations(&self, bytes: u64, cap: u64) -> u64 {
        (2 * self.info.l2_bytes)
            .div_ceil(bytes.max(1))
            .clamp(1, cap.max(1))
    }

    fn launch_copy(&self, src: u64, dst: u64, n16: u64) -> Result<()> {
        let mut b = self.stream.launch_builder(&self.copy);
        b.arg(&src).arg(&dst).arg(&n16);
        // SAFETY: src and dst each hold n16 16-byte words.
        unsafe { b.launch(self.stream_cfg()) }.map_err(|e| cuda_err("copy", e))?;
        Ok(())
    }

    fn launch_reduce(&self, src: u64, n16: u64, out: u64) -> Result<()> {
        let mut b = self.stream.launch_builder(&self.reduce);
        b.arg(&src).arg(&n16).arg(&out);
        // SAFETY: src holds n16 16-byte words; out is one u64.
        unsafe { b.launch(self.stream_cfg()) }.map_err(|e| cuda_err("reduce", e))?;
        Ok(())
    }

    /// One cuBLASLt matmul: D (n x m, column-major) = A^T B with A the `k x n` weights
    /// (column-major, i.e. weights transposed) and B the `k x m` activations; bf16 output.
    /// Returns a closure-ready plan (descriptors and algorithm).
    fn gemm_plan(&self, m: u64, k: u64, n: u64, dtype: GemmDtype) -> Result<GemmPlan> {
        let in_type = match dtype {
            GemmDtype::Bf16 => ltsys::cudaDataType::CUDA_R_16BF,
            GemmDtype::Fp8 => ltsys::cudaDataType::CUDA_R_8F_E4M3,
        };
        let layout = |t, rows: u64, cols: u64, ld: u64| -> Result<LtObj<_>> {
            let raw = lt::create_matrix_layout(t, rows, cols, ld as i64)
                .map_err(|e| cuda_err("cuBLASLt layout", e))?;
            Ok(LtObj {
                raw,
                destroy: lt::destroy_matrix_layout,
            })
        };
        let a = layout(in_type, k, n, k)?;
        let b = layout(in_type, k, m, k)?;
        let d = layout(ltsys::cudaDataType::CUDA_R_16BF, n, m, n)?;
        let desc = LtObj {
            raw: lt::create_matmul_desc(
                ltsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                ltsys::cudaDataType::CUDA_R_32F,
            )
            .map_err(|e| cuda_err("cuBLASLt matmul desc", e))?,
            destroy: lt::destroy_matmul_desc,
        };
        let op_t: i32 = 1; // CUBLAS_OP_T
                           // SAFETY: the attribute is an int32 cublasOperation_t, passed by pointer with its size.
        unsafe {
            lt::set_matmul_desc_attribute(
                desc.raw,
                ltsys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                &op_t as *const i32 as *const c_void,
                std::mem::size_of::<i32>(),
            )
        }
        .map_err(|e| cuda_err("cuBLASLt transa", e))?;
        let pref = LtObj {
            raw: lt::create_matmul_pref().map_err(|e| cuda_err("cuBLASLt preference", e))?,
            destroy: lt::destroy_matmul_pref,
        };
        let ws: u64 = WORKSPACE_BYTES as u64;
        // SAFETY: the attribute is a uint64 byte count, passed by pointer with its size.
        unsafe {
            lt::set_matmul_pref_attribute(
                pref.raw,
                ltsys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const u64 as *const c_void,
                std::mem::size_of::<u64>(),
            )
        }
        .map_err(|e| cuda_err("cuBLASLt workspace preference", e))?;
        // SAFETY: all descriptors are live for the call.
        let heur = unsafe {
            lt::get_matmul_algo_heuristic(self.lt, desc.raw, a.raw, b.raw, d.raw, d.raw, pref.raw)
        }
        .map_err(|e| {
            Error::Unavailable(format!(
                "cuBLASLt has no {} algorithm for m={m} k={k} n={n}: {e}",
                dtype.name()
            ))
        })?;
        Ok(GemmPlan {
            a,
            b,
            d,
            desc,
            _pref: pref,
            algo: heur.algo,
        })
    }

    fn run_gemm(&self, plan: &GemmPlan, a: u64, b: u64, d: u64) -> Result<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let ws = self.ptr(&self.workspace);
        // SAFETY: a, b, d hold the matrices the plan's layouts describe; the workspace holds
        // WORKSPACE_BYTES; the descriptors live in `plan`.
        unsafe {
            lt::matmul(
                self.lt,
                plan.desc.raw,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                a as *const c_void,
                plan.a.raw,
                b as *const c_void,
                plan.b.raw,
                d as *const c_void,
                plan.d.raw,
                d as *mut c_void,
                plan.d.raw,
                &plan.algo,
                ws as *mut c_void,
                WORKSPACE_BYTES,
                self.stream.cu_stream() as ltsys::cudaStream_t,
            )
        }
        .map_err(|e| cuda_err("cuBLASLt matmul", e))
    }

    fn verify_stream(&self) -> Result<()> {
        let n16 = 4096u64 + 3;
        let words: Vec<u32> = (0..n16 * 4)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761))
            .collect();
        let src = self
            .stream
            .clone_htod(&words)
            .map_err(|e| cuda_err("upload", e))?;
        let dst = self.alloc::<u32>(words.len())?;
        self.launch_copy(self.ptr(&src), self.ptr(&dst), n16)?;
        let back = self
            .stream
            .clone_dtoh(&dst)
            .map_err(|e| cuda_err("download", e))?;
        if back != words {
            return Err(Error::Internal(
                "copy_kernel: output differs from its input".into(),
            ));
        }
        let out = self
            .stream
            .alloc_zeros::<u64>(1)
            .map_err(|e| cuda_err("alloc", e))?;
        self.launch_reduce(self.ptr(&src), n16, self.ptr(&out))?;
        let got = self
            .stream
            .clone_dtoh(&out)
            .map_err(|e| cuda_err("download", e))?;
        let want = words.iter().fold(0u64, |a, &w| a.wrapping_add(w as u64));
        if got.first() != Some(&want) {
            return Err(Error::Internal(format!(
                "reduce_kernel: sum {got:?}, CPU reference {want}"
            )));
        }
        let mut b = self.stream.launch_builder(&self.empty);
        // SAFETY: the empty kernel takes no arguments.
        unsafe { b.launch(LaunchConfig::for_num_elems(1)) }
            .map_err(|e| cuda_err("empty kernel", e))?;
        self.sync()
    }

    fn verify_gemm(&self, dtype: GemmDtype) -> Result<()> {
        let (m, k, n) = (16u64, 64u64, 48u64);
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let vals = [-1.5f32, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5];
        let codes = [0xBCu8, 0xB8, 0xB0, 0x00, 0x30, 0x38, 0x3C];
        let pick = |rng: &mut ChaCha8Rng, len: u64| -> Vec<usize> {
            (0..len).map(|_| rng.gen_range(0..vals.len())).collect()
        };
        let wi = pick(&mut rng, k * n); // weights, column j of A^T = row-major [n][k]
        let xi = pick(&mut rng, m * k); // activations [m][k]
        let plan = self.gemm_plan(m, k, n, dtype)?;
        let (a, b) = match dtype {
            GemmDtype::Bf16 => {
                let a: Vec<u16> = wi.iter().map(|&i| bf16_bits(vals[i])).collect();
                let b: Vec<u16> = xi.iter().map(|&i| bf16_bits(vals[i])).collect();
                (to_bytes16(&a), to_bytes16(&b))
            }
            GemmDtype::Fp8 => (
                wi.iter().map(|&i| codes[i]).collect(),
                xi.iter().map(|&i| codes[i]).collect(),
            ),
        };
        let da = self
            .stream
            .clone_htod(&a)
            .map_err(|e| cuda_err("upload", e))?;
        let db = self
            .stream
            .clone_htod(&b)
            .map_err(|e| cuda_err("upload", e))?;
        let dd = self.alloc::<u16>((m * n) as usize)?;
        self.run_gemm(&plan, self.ptr(&da), self.ptr(&db), self.ptr(&dd))?;
        let out = self
            .stream
            .clone_dtoh(&dd)
            .map_err(|e| cuda_err("download", e))?;
        // A (k x n, column-major, ld k): element (kk, j) at j*k + kk. B (k x m): (kk, t) at t*k + kk.
        // D (n x m, column-major, ld n): (j, t) at t*n + j.
        for t in 0..m {
            for j in 0..n {
                let want: f32 = (0..k)
                    .map(|kk| vals[wi[(j * k + kk) as usize]] * vals[xi[(t * k + kk) as usize]])
                    .sum();
                let got = bf16_value(out[(t * n + j) as usize]);
                if (got - want).abs() > 0.02 * want.abs().max(1.0) {
                    return Err(Error::Internal(format!(
                        "{} GEMM: D[{j},{t}] = {got}, CPU reference {want}",
                        dtype.name()
                    )));
                }
            }
        }
        // The codes above are the e4m3 encodings of `vals`.
        debug_assert!(codes
            .iter()
            .zip(vals)
            .all(|(&c, v)| (e4m3_value(c) - v).abs() < 1e-6));
        Ok(())
    }

    /// The attention kernel for `head_dim` x `group`, compiled and verified on first use.
    fn attention_fn(&mut self, head_dim: u64, group: u64) -> Result<CudaFunction> {
        if let Some(f) = self.attention.get(&(head_dim, group)) {
            return Ok(f.clone());
        }
        if !matches!(head_dim, 64 | 128 | 256) || group == 0 || group > MAX_GROUP {
            return Err(Error::Unavailable(format!(
                "the paged attention kernel supports head_dim 64, 128 or 256 and 1..={MAX_GROUP} query heads per KV head, not head_dim {head_dim} x group {group}"
            )));
        }
        let ptx = compile_ptx_with_opts(
            ATTENTION_SRC,
            CompileOptions {
                arch: Some(self.arch),
                name: Some("servesim_paged_attention.cu".into()),
                options: vec![format!("-DHEAD_DIM={head_dim}"), format!("-DGROUP={group}")],
                ..Default::default()
            },
        )
        .map_err(|e| cuda_err("NVRTC (paged attention)", e))?;
        let module = self
            .ctx
            .load_module(ptx)
            .map_err(|e| cuda_err("load module", e))?;
        let f = module
            .load_function("paged_decode_attention")
            .map_err(|e| cuda_err("paged_decode_attention", e))?;
        self.verify_attention(&f, head_dim, group)?;
        self.attention.insert((head_dim, group), f.clone());
        Ok(f)
    }

    fn verify_attention(&self, f: &CudaFunction, head_dim: u64, group: u64) -> Result<()> {
        let contexts = [1u64, 17, 45];
        let (batch, kv_heads) = (contexts.len() as u64, 2u64);
        let q_heads = kv_heads * group;
        let max_blocks = 45u64.div_ceil(KV_BLOCK_TOKENS);
        let num_blocks = batch * max_blocks + 3;
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut rand_bf16 = |len: u64| -> Vec<u16> {
            (0..len)
                .map(|_| bf16_bits(rng.gen_range(-8i32..=8) as f32 * 0.125))
                .collect()
        };
        let per_block = kv_heads * KV_BLOCK_TOKENS * head_dim;
        let q = rand_bf16(batch * q_heads * head_dim);
        let kc = rand_bf16(num_blocks * per_block);
        let vc = rand_bf16(num_blocks * per_block);
        // A scrambled block table: sequence s, block j -> physical block.
        let mut phys: Vec<i32> = (0..num_blocks as i32).collect();
        for i in (1..phys.len()).rev() {
            phys.swap(i, rng.gen_range(0..=i));
        }
        let table: Vec<i32> = phys[..(batch * max_blocks) as usize].to_vec();
        let lens: Vec<i32> = contexts.iter().map(|&c| c as i32).collect();
        let scale = 1.0 / (head_dim as f32).sqrt();
        let up16 = |v: &Vec<u16>| self.stream.clone_htod(v).map_err(|e| cuda_err("upload", e));
        let (dq, dk, dv) = (up16(&q)?, up16(&kc)?, up16(&vc)?);
        let dt = self
            .stream
            .clone_htod(&table)
            .map_err(|e| cuda_err("upload", e))?;
        let dl = self
            .stream
            .clone_htod(&lens)
            .map_err(|e| cuda_err("upload", e))?;
        let dout = self.alloc::<f32>((batch * q_heads * head_dim) as usize)?;
        self.launch_attention(
            f,
            [
                self.ptr(&dq),
                self.ptr(&dk),
                self.ptr(&dv),
                self.ptr(&dt),
                self.ptr(&dl),
                self.ptr(&dout),
            ],
            batch,
            kv_heads,
            max_blocks,
            scale,
        )?;
        let out = self
            .stream
            .clone_dtoh(&dout)
            .map_err(|e| cuda_err("download", e))?;
        for s in 0..batch {
            let ctx = contexts[s as usize];
            for h in 0..q_heads {
                let kvh = h / group;
                let qv: Vec<f64> = (0..head_dim)
                    .map(|d| bf16_value(q[((s * q_heads + h) * head_dim + d) as usize]) as f64)
                    .collect();
                let at = |cache: &Vec<u16>, tok: u64, d: u64| -> f64 {
                    let p = table[(s * max_blocks + tok / KV_BLOCK_TOKENS) as usize] as u64;
                    let idx = ((p * kv_heads + kvh) * KV_BLOCK_TOKENS + tok % KV_BLOCK_TOKENS)
                        * head_dim
                        + d;
                    bf16_value(cache[idx as usize]) as f64
                };
                let scores: Vec<f64> = (0..ctx)
                    .map(|t| {
                        (0..head_dim)
                            .map(|d| qv[d as usize] * at(&kc, t, d))
                            .sum::<f64>()
                            * scale as f64
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|x| (x - mx).exp()).collect();
                let den: f64 = w.iter().sum();
                for d in 0..head_dim {
                    let want: f64 =
                        (0..ctx).map(|t| w[t as usize] * at(&vc, t, d)).sum::<f64>() / den;
                    let got = out[((s * q_heads + h) * head_dim + d) as usize] as f64;
                    if (got - want).abs() > 1e-3 * want.abs().max(1.0) {
                        return Err(Error::Internal(format!(
                            "paged_decode_attention (head_dim {head_dim}, group {group}): \
                             out[seq {s}, head {h}, {d}] = {got}, CPU reference {want}"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn launch_attention(
        &self,
        f: &CudaFunction,
        ptrs: [u64; 6],
        batch: u64,
        kv_heads: u64,
        max_blocks: u64,
        scale: f32,
    ) -> Result<()> {
        let (kvh, mb) = (kv_heads as i32, max_blocks as i32);
        let mut b = self.stream.launch_builder(f);
        for p in &ptrs {
            b.arg(p);
        }
        b.arg(&kvh).arg(&mb).arg(&scale);
        let cfg = LaunchConfig {
            grid_dim: (kv_heads as u32, batch as u32, 1),
            block_dim: (ATTN_WARPS * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the pointers hold q, the K and V pools, the block table, the context lengths
        // and the output with the shapes the kernel reads (see ATTENTION_SRC).
        unsafe { b.launch(cfg) }.map_err(|e| cuda_err("paged_decode_attention", e))?;
        Ok(())
    }
}

struct GemmPlan {
    a: LtObj<ltsys::cublasLtMatrixLayout_t>,
    b: LtObj<ltsys::cublasLtMatrixLayout_t>,
    d: LtObj<ltsys::cublasLtMatrixLayout_t>,
    desc: LtObj<ltsys::cublasLtMatmulDesc_t>,
    _pref: LtObj<ltsys::cublasLtMatmulPreference_t>,
    algo: ltsys::cublasLtMatmulAlgo_t,
}

fn to_bytes16(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl KernelBackend for CudaBackend {
    fn device(&self) -> Result<DeviceInfo> {
        Ok(self.info.clone())
    }

    fn verify(&mut self) -> Result<()> {
        guard("verify", || {
            self.verify_stream()?;
            self.verify_gemm(GemmDtype::Bf16)?;
            if self.info.supports_fp8 {
                self.verify_gemm(GemmDtype::Fp8)?;
            }
            self.attention_fn(128, 4).map(|_| ())
        })
    }

    fn stream_copy(&mut self, bytes: u64, runs: usize) -> Result<Timing> {
        guard("stream_copy", || {
            let half = (bytes / 2).max(16) / 16 * 16;
            let r = self.rotations(bytes, 128);
            let src = self.alloc::<u8>((half * r) as usize)?;
            let dst = self.alloc::<u8>((half * r) as usize)?;
            let (s0, d0) = (self.ptr(&src), self.ptr(&dst));
            self.fill(s0, half * r / 2, false, 1)?;
            let t = self.time_runs(runs, 1, &mut |i| {
                let o = (i as u64 % r) * half;
                self.launch_copy(s0 + o, d0 + o, half / 16)
            });
            self.sync()?;
            t
        })
    }

    fn stream_reduce(&mut self, bytes: u64, runs: usize) -> Result<Timing> {
        guard("stream_reduce", || {
            let b = bytes.max(16) / 16 * 16;
            let r = self.rotations(b, 128);
            let src = self.alloc::<u8>((b * r) as usize)?;
            let s0 = self.ptr(&src);
            self.fill(s0, b * r / 2, false, 2)?;
            let out = self
                .stream
                .alloc_zeros::<u64>(1)
                .map_err(|e| cuda_err("alloc", e))?;
            let o = self.ptr(&out);
            let t = self.time_runs(runs, 1, &mut |i| {
                self.launch_reduce(s0 + (i as u64 % r) * b, b / 16, o)
            });
            self.sync()?;
            t
        })
    }

    fn gemm(&mut self, m: u64, k: u64, n: u64, dtype: GemmDtype, runs: usize) -> Result<Timing> {
        guard("gemm", || {
            if dtype == GemmDtype::Fp8 && !self.info.supports_fp8 {
                return Err(Error::Unavailable(
                    "this GPU has no fp8 tensor cores".into(),
                ));
            }
            let elt = dtype.bytes() as u64;
            let (wa, xb) = (k * n * elt, m * k * elt);
            // Keep every operand 256-byte aligned inside the pools.
            let (wa_al, xb_al) = (wa.div_ceil(256) * 256, xb.div_ceil(256) * 256);
            let r = self.rotations(wa + xb, 64);
            let apool = self.alloc::<u8>((wa_al * r) as usize)?;
            let bpool = self.alloc::<u8>((xb_al * r) as usize)?;
            let dout = self.alloc::<u16>((m * n) as usize)?;
            let (a0, b0, d0) = (self.ptr(&apool), self.ptr(&bpool), self.ptr(&dout));
            let fp8 = dtype == GemmDtype::Fp8;
            let per = if fp8 { 1 } else { 2 };
            self.fill(a0, wa_al * r / per, fp8, 3)?;
            self.fill(b0, xb_al * r / per, fp8, 4)?;
            let plan = self.gemm_plan(m, k, n, dtype)?;
            let t = self.time_runs(runs, 1, &mut |i| {
                let j = i as u64 % r;
                self.run_gemm(&plan, a0 + j * wa_al, b0 + j * xb_al, d0)
            });
            self.sync()?;
            t
        })
    }

    fn paged_decode_attention(&mut self, s: AttentionShape, runs: usize) -> Result<Timing> {
        guard("paged_decode_attention", || {
            if s.kv_heads == 0 || s.q_heads % s.kv_heads != 0 {
                return Err(Error::Infeasible(format!(
                    "query heads {} are not a multiple of KV heads {}",
                    s.q_heads, s.kv_heads
                )));
            }
            let f = self.attention_fn(s.head_dim, s.q_heads / s.kv_heads)?;
            let max_blocks = s.context.div_ceil(KV_BLOCK_TOKENS);
            let blocks = s.batch * max_blocks;
            let block_bytes = s.kv_heads * KV_BLOCK_TOKENS * s.head_dim * 2;
            let r = self.rotations(2 * blocks * block_bytes, 16);
            let pool_blocks = blocks * r;
            let kc = self.alloc::<u16>((pool_blocks * block_bytes / 2) as usize)?;
            let vc = self.alloc::<u16>((pool_blocks * block_bytes / 2) as usize)?;
            self.fill(self.ptr(&kc), pool_blocks * block_bytes / 2, false, 5)?;
            self.fill(self.ptr(&vc), pool_blocks * block_bytes / 2, false, 6)?;
            let q = self.alloc::<u16>((s.batch * s.q_heads * s.head_dim) as usize)?;
            self.fill(self.ptr(&q), s.batch * s.q_heads * s.head_dim, false, 7)?;
            // r block tables, each a random permutation of its own region of the pool.
            let mut rng = ChaCha8Rng::seed_from_u64(9);
            let mut tables: Vec<i32> = Vec::with_capacity(pool_blocks as usize);
            for j in 0..r {
                let mut region: Vec<i32> =
                    ((j * blocks) as i32..((j + 1) * blocks) as i32).collect();
                for i in (1..region.len()).rev() {
                    region.swap(i, rng.gen_range(0..=i));
                }
                tables.extend(region);
            }
            if pool_blocks > i32::MAX as u64 {
                return Err(Error::Infeasible(
                    "KV pool too large for int block ids".into(),
                ));
            }
            let dt = self
                .stream
                .clone_htod(&tables)
                .map_err(|e| cuda_err("upload", e))?;
            let lens = vec![s.context as i32; s.batch as usize];
            let dl = self
                .stream
                .clone_htod(&lens)
                .map_err(|e| cuda_err("upload", e))?;
            let out = self.alloc::<f32>((s.batch * s.q_heads * s.head_dim) as usize)?;
            let scale = 1.0 / (s.head_dim as f32).sqrt();
            let (pq, pk, pv, pt, pl, po) = (
                self.ptr(&q),
                self.ptr(&kc),
                self.ptr(&vc),
                self.ptr(&dt),
                self.ptr(&dl),
                self.ptr(&out),
            );
            let t = self.time_runs(runs, 1, &mut |i| {
                let table = pt + (i as u64 % r) * blocks * 4;
                self.launch_attention(
                    &f,
                    [pq, pk, pv, table, pl, po],
                    s.batch,
                    s.kv_heads,
                    max_blocks,
                    scale,
                )
            });
            self.sync()?;
            t
        })
    }

    fn empty_kernel(&mut self, runs: usize) -> Result<Timing> {
        guard("empty_kernel", || {
            let cfg = LaunchConfig::for_num_elems(1);
            self.time_runs(runs, EMPTY_PER_SAMPLE, &mut |_| {
                let mut b = self.stream.launch_builder(&self.empty);
                // SAFETY: the empty kernel takes no arguments.
                unsafe { b.launch(cfg) }.map_err(|e| cuda_err("empty kernel", e))?;
                Ok(())
            })
        })
    }
}
