//! The kernel suite on a CUDA GPU through cudarc: HBM copy and reduction and an empty kernel,
//! weight GEMMs in bf16 and fp8 (cuBLASLt), and the project's own split-KV paged
//! decode-attention kernel. The CUDA C is in `kernels/`; NVRTC (loaded by [`super::nvrtc`])
//! compiles it to a cubin for the device's architecture, loaded as a binary, so no PTX is left
//! for the driver to JIT.
//!
//! Opening checks, before any kernel runs, that the driver exports every symbol the backend
//! calls (choosing the event-timing symbol the driver has, [`compat::pick_elapsed_symbol`]),
//! and that NVRTC and cuBLASLt suit the driver's CUDA version ([`compat`]). cudarc loads
//! libcuda / libcublasLt dynamically and panics when a library or symbol is missing, so every
//! call into it also runs under `catch_unwind`.
//!
//! Every kernel is checked against a CPU reference on small inputs before it is timed
//! ([`KernelBackend::check`]). Timing ([`super::timing`]): warm-up launches, then samples in
//! which a spin kernel holds the stream while the host queues the start event, the launches
//! (over inputs rotated across more than twice the L2 cache) and the end event, so the events
//! bracket back-to-back GPU work without the host's launch overhead.

use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use cudarc::cublaslt::{result as lt, sys as ltsys};
use cudarc::driver::{
    sys as dsys, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr,
    DriverError, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::kernels::{
    self, bf16_bits, bf16_value, AttentionCase, CompileUnit, SplitPlan, ATTENTION_WARPS,
    KV_BLOCK_TOKENS,
};
use super::nvrtc::Nvrtc;
use super::{
    compat, fp8_item, timing, AttentionShape, CheckItem, CheckStatus, DeviceInfo, GemmDtype,
    KernelBackend, Timing,
};
use crate::error::{Error, Result};

/// Launches per sample of the empty-kernel measurement.
const EMPTY_PER_SAMPLE: usize = 100;
/// Threads per block of the streaming kernels.
const STREAM_THREADS: u32 = 256;
/// cuBLASLt workspace size (NVIDIA's recommendation for Hopper), bytes.
const WORKSPACE_BYTES: usize = 32 << 20;
/// Spin of the timer check, nanoseconds.
const TIMER_CHECK_NS: u64 = 200_000;

/// `cuEventElapsedTime` and `cuEventElapsedTime_v2` (same signature).
type ElapsedFn = unsafe extern "C" fn(*mut f32, dsys::CUevent, dsys::CUevent) -> dsys::CUresult;

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

/// The two kernels of one attention compile unit.
#[derive(Clone)]
struct AttentionFns {
    main: CudaFunction,
    merge: CudaFunction,
}

/// Device pointers of one attention call (see attention.cu for the layouts); the partial
/// buffers are 0 when the call is not split.
#[derive(Clone, Copy)]
struct AttentionPtrs {
    q: u64,
    k: u64,
    v: u64,
    table: u64,
    lens: u64,
    out: u64,
    part_ml: u64,
    part_acc: u64,
}

/// The kernel suite on one CUDA device.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    /// Whether the GPU has FP8 tensor cores (before cuBLASLt is asked).
    fp8_hardware: bool,
    sm: i32,
    sm_count: u32,
    elapsed: ElapsedFn,
    nvrtc: Nvrtc,
    empty: CudaFunction,
    copy: CudaFunction,
    reduce: CudaFunction,
    spin: CudaFunction,
    fill_bf16: CudaFunction,
    fill_fp8: CudaFunction,
    /// Attention kernels by (head_dim, group), compiled on first use.
    attention: HashMap<(u64, u64), AttentionFns>,
    lt: ltsys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // SAFETY: the handle was created in `open` and is destroyed once, here.
        let _ = unsafe { lt::destroy_handle(self.lt) };
    }
}

/// `servesim calibrate --check`: opens device `ordinal` step by step, an item per step, then
/// runs [`KernelBackend::check`]. No driver, no GPU, or no such device is an error (nothing to
/// check); a later failure is a failed item, and the steps after it are not run.
pub fn check(ordinal: usize) -> Result<Vec<CheckItem>> {
    let mut items = Vec::new();
    match guard("open", || open_steps(ordinal, &mut items)) {
        Ok(mut backend) => {
            items.extend(backend.check()?);
            Ok(items)
        }
        Err(e) => {
            if !items.iter().any(|i| i.what == "device") {
                return Err(e);
            }
            if !items.iter().any(|i| i.status == CheckStatus::Failed) {
                items.push(CheckItem::new("open", CheckStatus::Failed, e.to_string()));
            }
            Ok(items)
        }
    }
}

/// A failed check item, and the error that stops opening.
fn fail(items: &mut Vec<CheckItem>, what: &str, why: String) -> Error {
    items.push(CheckItem::new(what, CheckStatus::Failed, why.clone()));
    Error::Unavailable(why)
}

/// Compiles `unit` for `sm_<sm>` and loads it.
fn load_unit(
    ctx: &Arc<CudaContext>,
    nvrtc: &Nvrtc,
    unit: &CompileUnit,
    sm: i32,
) -> Result<(Arc<cudarc::driver::CudaModule>, usize)> {
    let c = nvrtc
        .compile(unit, sm, false)
        .map_err(|e| cuda_err("NVRTC", e))?;
    let bytes = c.cubin.len();
    let module = ctx
        .load_module(Ptx::from_binary(c.cubin))
        .map_err(|e| cuda_err(&format!("load the {} cubin", unit.name), e))?;
    Ok((module, bytes))
}

/// Opens device `ordinal` step by step, recording each check in `items`: the driver, the
/// device, NVRTC, cuBLASLt, then the streaming kernels' module.
fn open_steps(ordinal: usize, items: &mut Vec<CheckItem>) -> Result<CudaBackend> {
    let driver = open_driver(items)?;
    let version = driver.version;
    let dev = open_device(ordinal, items)?;
    let sm = dev.major * 10 + dev.minor;
    let nvrtc = open_nvrtc(version, sm, items)?;
    let (lt_handle, lt_version) = open_cublaslt(version, items)?;

    let unit = kernels::stream_unit();
    let (module, bytes) = load_unit(&dev.ctx, &nvrtc, &unit, sm).map_err(|e| {
        // SAFETY: the handle was created above and is not used after this.
        let _ = unsafe { lt::destroy_handle(lt_handle) };
        fail(items, "module stream", e.to_string())
    })?;
    items.push(CheckItem::new(
        "module stream",
        CheckStatus::Ok,
        format!(
            "cubin sm_{sm}, {bytes} B, {} kernels",
            kernels::STREAM_KERNELS.len()
        ),
    ));
    let f = |n: &str| {
        module
            .load_function(n)
            .map_err(|e| cuda_err(&format!("function {n}"), e))
    };
    // SAFETY: allocation of uninitialised bytes used only as cuBLASLt scratch space.
    let workspace =
        unsafe { dev.stream.alloc::<u8>(WORKSPACE_BYTES) }.map_err(|e| cuda_err("workspace", e))?;
    let fp8_hardware = (dev.major, dev.minor) >= (8, 9);
    Ok(CudaBackend {
        info: DeviceInfo {
            name: dev.name,
            driver: version.to_string(),
            software: format!(
                "driver CUDA {} ({version}); NVRTC {}.{} ({}), cubin sm_{sm}; cuBLASLt {lt_version}; \
                 event timing {}",
                compat::dotted(version),
                nvrtc.version.0,
                nvrtc.version.1,
                nvrtc.name,
                driver.elapsed_name
            ),
            supports_fp8: fp8_hardware,
            fp8_note: None,
            l2_bytes: dev.l2_bytes,
            free_bytes: dev.free_bytes,
        },
        fp8_hardware,
        sm,
        sm_count: dev.sm_count.max(1) as u32,
        elapsed: driver.elapsed,
        empty: f("empty_kernel")?,
        copy: f("copy_kernel")?,
        reduce: f("reduce_kernel")?,
        spin: f("spin_kernel")?,
        fill_bf16: f("fill_bf16")?,
        fill_fp8: f("fill_fp8")?,
        nvrtc,
        attention: HashMap::new(),
        lt: lt_handle,
        workspace,
        ctx: dev.ctx,
        stream: dev.stream,
    })
}

/// The CUDA driver as the checks found it.
struct Driver {
    /// The event-timing function the driver exports.
    elapsed: ElapsedFn,
    /// Its symbol's name.
    elapsed_name: &'static str,
    /// The driver's CUDA version as `cuDriverGetVersion` gives it (12040 for 12.4).
    version: std::ffi::c_int,
}

/// Loads the driver library, checks that it exports every symbol the backend calls (choosing
/// the event-timing one) and reads its CUDA version.
fn open_driver(items: &mut Vec<CheckItem>) -> Result<Driver> {
    // SAFETY: this only tries to dlopen the driver library; nothing is called through it.
    if !unsafe { dsys::is_culib_present() } {
        return Err(Error::Unavailable(
            "no CUDA driver was found (libcuda.so could not be loaded): `servesim calibrate` \
             needs an NVIDIA GPU and its driver"
                .into(),
        ));
    }
    // SAFETY: the library loads (checked above); symbols are only looked up here.
    let lib = unsafe { dsys::culib() };
    // SAFETY: a symbol lookup; the pointer is not called.
    let has = |s: &str| unsafe { lib.get::<*const c_void>(s.as_bytes()) }.is_ok();
    let missing: Vec<&str> = compat::DRIVER_SYMBOLS
        .iter()
        .copied()
        .filter(|s| !has(s))
        .collect();
    let elapsed_name = compat::pick_elapsed_symbol(&has);
    if !missing.is_empty() || elapsed_name.is_err() {
        let mut why = missing.clone();
        if let Err(e) = &elapsed_name {
            why.push(e);
        }
        return Err(fail(
            items,
            "driver symbols",
            format!(
                "the CUDA driver lacks {}: update the NVIDIA driver",
                why.join(", ")
            ),
        ));
    }
    let elapsed_name = elapsed_name.map_err(Error::Unavailable)?;
    // SAFETY: the symbol exists (checked) and has the signature of ElapsedFn (cuda.h).
    let elapsed: ElapsedFn = *unsafe { lib.get::<ElapsedFn>(elapsed_name.as_bytes()) }
        .map_err(|e| cuda_err(elapsed_name, e))?;
    items.push(CheckItem::new(
        "driver symbols",
        CheckStatus::Ok,
        format!(
            "{} symbols the backend calls; event timing through {elapsed_name}",
            compat::DRIVER_SYMBOLS.len()
        ),
    ));
    let mut version: std::ffi::c_int = 0;
    // SAFETY: the driver library is loaded and exports the symbol; `version` is a valid out pointer.
    unsafe { dsys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(|e| cuda_err("cuDriverGetVersion", e))?;
    items.push(CheckItem::new(
        "CUDA driver",
        CheckStatus::Ok,
        format!("CUDA {} ({version})", compat::dotted(version)),
    ));
    Ok(Driver {
        elapsed,
        elapsed_name,
        version,
    })
}

/// The opened device: its context and stream, and what the suite needs to know of it.
struct Device {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    /// Compute capability.
    major: i32,
    minor: i32,
    l2_bytes: u64,
    sm_count: i32,
    free_bytes: u64,
}

/// Finds device `ordinal`, creates its context (event tracking off) and reads its name,
/// compute capability, L2 size, SM count and free memory.
fn open_device(ordinal: usize, items: &mut Vec<CheckItem>) -> Result<Device> {
    let count = match CudaContext::device_count() {
        Ok(n) => n,
        Err(DriverError(dsys::CUresult::CUDA_ERROR_NO_DEVICE)) => 0,
        Err(e) => return Err(cuda_err("device count", e)),
    };
    if count == 0 {
        return Err(Error::Unavailable(
            "the CUDA driver loads but sees no GPU: `servesim calibrate` needs an NVIDIA GPU"
                .into(),
        ));
    }
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
    let (major, minor) = ctx
        .compute_capability()
        .map_err(|e| cuda_err("compute capability", e))?;
    let attr = |a| {
        ctx.attribute(a)
            .map_err(|e| cuda_err("device attribute", e))
    };
    let l2 = attr(dsys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?.max(0) as u64;
    let sm_count = attr(dsys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let (free, _total) = ctx.mem_get_info().map_err(|e| cuda_err("memory info", e))?;
    let sm = major * 10 + minor;
    items.push(CheckItem::new(
        "device",
        CheckStatus::Ok,
        format!(
            "{name}, sm_{sm}, {sm_count} SMs, L2 {} MB, {:.1} GB free; profile {}",
            l2 / 1_000_000,
            free as f64 / 1e9,
            super::fit::profile_for_device(&name).unwrap_or("none (fit needs --base)")
        ),
    ));
    Ok(Device {
        ctx,
        stream,
        name,
        major,
        minor,
        l2_bytes: l2,
        sm_count,
        free_bytes: free as u64,
    })
}

/// NVRTC: the library whose major version is the driver's (`version`), compiling SASS for
/// `sm_<sm>`; `SERVESIM_NVRTC` names one explicitly.
fn open_nvrtc(version: std::ffi::c_int, sm: i32, items: &mut Vec<CheckItem>) -> Result<Nvrtc> {
    let nvrtc = match std::env::var("SERVESIM_NVRTC") {
        Ok(p) => Nvrtc::open(&p),
        Err(_) => Nvrtc::open_first(&compat::nvrtc_candidates(version), compat::major(version)),
    }
    .map_err(|e| {
        fail(
            items,
            "NVRTC",
            format!(
                "{e}: install NVRTC {m}.x (pip install nvidia-cuda-nvrtc-cu{m}) and put its lib \
                 directory on LD_LIBRARY_PATH, or set SERVESIM_NVRTC to its libnvrtc.so",
                m = compat::major(version)
            ),
        )
    })?;
    let archs = nvrtc
        .supported_archs()
        .map_err(|e| fail(items, "NVRTC", e))?;
    compat::check_nvrtc(nvrtc.version, version, sm, &archs).map_err(|e| fail(items, "NVRTC", e))?;
    items.push(CheckItem::new(
        "NVRTC",
        CheckStatus::Ok,
        format!(
            "{}.{} ({}), cubin for sm_{sm}",
            nvrtc.version.0, nvrtc.version.1, nvrtc.name
        ),
    ));
    Ok(nvrtc)
}

/// cuBLASLt: loads it, checks its version against the driver's (`version`) and creates a
/// handle; the handle and the library's version.
fn open_cublaslt(
    version: std::ffi::c_int,
    items: &mut Vec<CheckItem>,
) -> Result<(ltsys::cublasLtHandle_t, usize)> {
    // SAFETY: this only tries to dlopen cuBLASLt.
    if !unsafe { ltsys::is_culib_present() } {
        return Err(fail(
            items,
            "cuBLASLt",
            format!(
                "libcublasLt.so could not be loaded: install cuBLAS (pip install \
                 nvidia-cublas-cu{}) and put it on LD_LIBRARY_PATH",
                compat::major(version)
            ),
        ));
    }
    // SAFETY: cuBLASLt is loaded; the call takes no arguments.
    let lt_version = unsafe { ltsys::cublasLtGetVersion() };
    compat::check_cublaslt(lt_version, version).map_err(|e| fail(items, "cuBLASLt", e))?;
    let lt_handle = lt::create_handle().map_err(|e| {
        fail(
            items,
            "cuBLASLt",
            format!("cuBLASLt {lt_version}: create handle: {e}"),
        )
    })?;
    items.push(CheckItem::new(
        "cuBLASLt",
        CheckStatus::Ok,
        format!("{lt_version}"),
    ));
    Ok((lt_handle, lt_version))
}

impl CudaBackend {
    /// Opens device `ordinal` (see [`open_steps`]): checks the driver, its symbols, NVRTC and
    /// cuBLASLt, creates the context and loads the streaming kernels.
    pub fn open(ordinal: usize) -> Result<Self> {
        guard("open", || open_steps(ordinal, &mut Vec::new()))
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

    fn upload<T: cudarc::driver::DeviceRepr>(&self, v: &[T]) -> Result<CudaSlice<T>> {
        self.stream.clone_htod(v).map_err(|e| cuda_err("upload", e))
    }

    fn download<T: cudarc::driver::DeviceRepr + Default + Clone>(
        &self,
        s: &CudaSlice<T>,
    ) -> Result<Vec<T>> {
        self.stream
            .clone_dtoh(s)
            .map_err(|e| cuda_err("download", e))
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

    /// Milliseconds between two recorded events, once `end` has completed, through the timing
    /// symbol chosen at open (not cudarc's `elapsed_ms`, which calls `cuEventElapsedTime_v2`
    /// only).
    fn elapsed_ms(&self, start: &CudaEvent, end: &CudaEvent) -> Result<f32> {
        end.synchronize().map_err(|e| cuda_err("event sync", e))?;
        let mut ms = 0f32;
        // SAFETY: both events were created in this context, recorded on its stream, and are
        // complete; `ms` is a valid out pointer.
        unsafe { (self.elapsed)(&mut ms, start.cu_event(), end.cu_event()) }
            .result()
            .map_err(|e| cuda_err("event elapsed time", e))?;
        Ok(ms)
    }

    fn launch_spin(&self, ns: u64) -> Result<()> {
        let mut b = self.stream.launch_builder(&self.spin);
        b.arg(&ns);
        let one = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the spin kernel takes one u64 and touches no memory.
        unsafe { b.launch(one) }.map_err(|e| cuda_err("spin", e))?;
        Ok(())
    }

    /// One held sample (see [`super::timing`]): the spin holds the stream while the start
    /// event, `n` launches and the end event are queued; microseconds per launch. Retried with
    /// a longer spin when queueing outlasted it.
    fn held_sample(
        &self,
        events: (&CudaEvent, &CudaEvent),
        n: usize,
        i: &mut usize,
        spin_ns: &mut u64,
        launch: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<f64> {
        let (start, end) = events;
        loop {
            self.launch_spin(*spin_ns)?;
            let t0 = Instant::now();
            start
                .record(&self.stream)
                .map_err(|e| cuda_err("record", e))?;
            for _ in 0..n {
                launch(*i)?;
                *i += 1;
            }
            end.record(&self.stream)
                .map_err(|e| cuda_err("record", e))?;
            let host_ns = t0.elapsed().as_nanos() as u64;
            let ms = self.elapsed_ms(start, end)?;
            if timing::hold_covered(host_ns, *spin_ns) {
                return Ok(ms as f64 * 1e3 / n as f64);
            }
            *spin_ns = timing::longer_spin_ns(*spin_ns, host_ns).ok_or_else(|| {
                Error::Internal(format!(
                    "the host took {host_ns} ns to queue {n} launches: longer than the stream \
                     can be held"
                ))
            })?;
        }
    }

    /// Times a kernel: warm-up, a held pilot launch that sizes the samples
    /// ([`timing::launches_per_sample`]), then `runs` held samples; launch `i` uses rotated
    /// input `i mod R`.
    fn time_kernel(
        &self,
        runs: usize,
        launch: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<Timing> {
        let mut i = 0;
        for _ in 0..timing::WARMUP {
            launch(i)?;
            i += 1;
        }
        self.sync()?;
        let (start, end) = (self.timing_event()?, self.timing_event()?);
        let mut spin_ns = timing::SPIN_START_NS;
        let pilot = self.held_sample((&start, &end), 1, &mut i, &mut spin_ns, launch)?;
        let n = timing::launches_per_sample(pilot);
        let mut samples = Vec::with_capacity(runs);
        for _ in 0..runs {
            samples.push(self.held_sample((&start, &end), n, &mut i, &mut spin_ns, launch)?);
        }
        self.ctx.check_err().map_err(|e| cuda_err("deferred", e))?;
        Timing::from_samples(&samples)
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

    fn launch_empty(&self) -> Result<()> {
        let mut b = self.stream.launch_builder(&self.empty);
        // SAFETY: the empty kernel takes no arguments.
        unsafe { b.launch(LaunchConfig::for_num_elems(1)) }
            .map_err(|e| cuda_err("empty kernel", e))?;
        Ok(())
    }

    /// One cuBLASLt matmul: D (n x m, column-major) = A^T B with A the `k x n` weights
    /// (column-major, i.e. weights transposed) and B the `k x m` activations; bf16 output.
    /// Returns the descriptors and the algorithm; [`Error::Unavailable`] when the heuristic
    /// has no algorithm for the shape.
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
        // SAFETY: all descriptors are live for the call. cudarc returns NOT_SUPPORTED when the
        // heuristic finds no algorithm (cudarc/src/cublaslt/result.rs).
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

    fn stream_words() -> (u64, Vec<u32>) {
        let n16 = 4096u64 + 3;
        let words = (0..n16 * 4)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761))
            .collect();
        (n16, words)
    }

    fn check_copy(&self) -> Result<String> {
        let (n16, words) = Self::stream_words();
        let src = self.upload(&words)?;
        let dst = self.alloc::<u32>(words.len())?;
        self.launch_copy(self.ptr(&src), self.ptr(&dst), n16)?;
        if self.download(&dst)? != words {
            return Err(Error::Internal(
                "copy_kernel: output differs from its input".into(),
            ));
        }
        Ok(format!("{} B copied exactly", n16 * 16))
    }

    fn check_reduce(&self) -> Result<String> {
        let (n16, words) = Self::stream_words();
        let src = self.upload(&words)?;
        let out = self
            .stream
            .alloc_zeros::<u64>(1)
            .map_err(|e| cuda_err("alloc", e))?;
        self.launch_reduce(self.ptr(&src), n16, self.ptr(&out))?;
        let got = self.download(&out)?;
        let want = words.iter().fold(0u64, |a, &w| a.wrapping_add(w as u64));
        if got.first() != Some(&want) {
            return Err(Error::Internal(format!(
                "reduce_kernel: sum {got:?}, CPU reference {want}"
            )));
        }
        Ok(format!("sum of {} words matches", words.len()))
    }

    fn check_empty(&self) -> Result<String> {
        self.launch_empty()?;
        self.sync()?;
        Ok("launched".into())
    }

    /// The event timer against the GPU's global timer: a 200 µs spin between two events.
    fn check_timer(&self) -> Result<String> {
        let (start, end) = (self.timing_event()?, self.timing_event()?);
        start
            .record(&self.stream)
            .map_err(|e| cuda_err("record", e))?;
        self.launch_spin(TIMER_CHECK_NS)?;
        end.record(&self.stream)
            .map_err(|e| cuda_err("record", e))?;
        let us = self.elapsed_ms(&start, &end)? as f64 * 1e3;
        let want = TIMER_CHECK_NS as f64 / 1e3;
        if !(us >= 0.95 * want && us <= 2.0 * want) {
            return Err(Error::Internal(format!(
                "a {want:.0} µs spin timed at {us:.1} µs by the events"
            )));
        }
        Ok(format!("a {want:.0} µs spin timed at {us:.1} µs"))
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
        let (a, b): (Vec<u8>, Vec<u8>) = match dtype {
            GemmDtype::Bf16 => {
                let bytes = |ix: &[usize]| -> Vec<u8> {
                    ix.iter()
                        .flat_map(|&i| bf16_bits(vals[i]).to_le_bytes())
                        .collect()
                };
                (bytes(&wi), bytes(&xi))
            }
            GemmDtype::Fp8 => (
                wi.iter().map(|&i| codes[i]).collect(),
                xi.iter().map(|&i| codes[i]).collect(),
            ),
        };
        debug_assert!(codes
            .iter()
            .zip(vals)
            .all(|(&c, v)| (kernels::e4m3_value(c) - v).abs() < 1e-6));
        let (da, db) = (self.upload(&a)?, self.upload(&b)?);
        let dd = self.alloc::<u16>((m * n) as usize)?;
        self.run_gemm(&plan, self.ptr(&da), self.ptr(&db), self.ptr(&dd))?;
        let out = self.download(&dd)?;
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
        Ok(())
    }

    /// The attention kernels for `head_dim` x `group`, compiled and loaded on first use.
    fn attention_fns(&mut self, head_dim: u64, group: u64) -> Result<AttentionFns> {
        if let Some(f) = self.attention.get(&(head_dim, group)) {
            return Ok(f.clone());
        }
        let unit = kernels::attention_unit(head_dim, group).map_err(Error::Unavailable)?;
        let (module, _) = load_unit(&self.ctx, &self.nvrtc, &unit, self.sm)?;
        let f = |n: &str| {
            module
                .load_function(n)
                .map_err(|e| cuda_err(&format!("function {n}"), e))
        };
        let fns = AttentionFns {
            main: f("paged_decode_attention")?,
            merge: f("paged_decode_attention_merge")?,
        };
        self.attention.insert((head_dim, group), fns.clone());
        Ok(fns)
    }

    /// Compiles `head_dim` x `group` and checks it on [`AttentionCase::small`] unsplit and
    /// split into one KV block per split (so a 1-token sequence has empty splits).
    fn check_attention(&mut self, head_dim: u64, group: u64) -> Result<String> {
        let fns = self.attention_fns(head_dim, group)?;
        let case = AttentionCase::small(head_dim, group, 5 + head_dim + group);
        let (batch, q_heads) = (case.batch(), case.kv_heads * group);
        let q = self.upload(&case.q)?;
        let k = self.upload(&case.k_cache)?;
        let v = self.upload(&case.v_cache)?;
        let table = self.upload(&case.block_table)?;
        let lens = self.upload(&case.context_lens)?;
        let rows = batch * q_heads;
        for plan in [
            SplitPlan {
                splits: 1,
                blocks_per_split: case.max_blocks,
            },
            SplitPlan {
                splits: case.max_blocks,
                blocks_per_split: 1,
            },
        ] {
            let out = self.alloc::<f32>((rows * head_dim) as usize)?;
            let part_ml = self.alloc::<f32>((rows * plan.splits * 2) as usize)?;
            let part_acc = self.alloc::<f32>((rows * plan.splits * head_dim) as usize)?;
            let split = plan.splits > 1;
            let ptrs = AttentionPtrs {
                q: self.ptr(&q),
                k: self.ptr(&k),
                v: self.ptr(&v),
                table: self.ptr(&table),
                lens: self.ptr(&lens),
                out: self.ptr(&out),
                part_ml: if split { self.ptr(&part_ml) } else { 0 },
                part_acc: if split { self.ptr(&part_acc) } else { 0 },
            };
            self.launch_attention(
                &fns,
                ptrs,
                batch,
                case.kv_heads,
                group,
                head_dim,
                case.max_blocks,
                plan,
                case.scale(),
            )?;
            let got = self.download(&out)?;
            case.check(
                &got,
                &format!("paged_decode_attention, {} splits", plan.splits),
            )
            .map_err(Error::Internal)?;
        }
        Ok(format!(
            "cubin sm_{}; 1 and {} splits match the CPU reference",
            self.sm, case.max_blocks
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn launch_attention(
        &self,
        fns: &AttentionFns,
        p: AttentionPtrs,
        batch: u64,
        kv_heads: u64,
        group: u64,
        head_dim: u64,
        max_blocks: u64,
        plan: SplitPlan,
        scale: f32,
    ) -> Result<()> {
        let (kvh, mb, bps) = (
            kv_heads as i32,
            max_blocks as i32,
            plan.blocks_per_split as i32,
        );
        let mut b = self.stream.launch_builder(&fns.main);
        b.arg(&p.q)
            .arg(&p.k)
            .arg(&p.v)
            .arg(&p.table)
            .arg(&p.lens)
            .arg(&p.out)
            .arg(&p.part_ml)
            .arg(&p.part_acc)
            .arg(&kvh)
            .arg(&mb)
            .arg(&bps)
            .arg(&scale);
        let cfg = LaunchConfig {
            grid_dim: (kv_heads as u32, batch as u32, plan.splits as u32),
            block_dim: (ATTENTION_WARPS * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the pointers hold q, the K and V pools, the block table, the context lengths,
        // the output and (when split) the partial buffers with the shapes attention.cu reads.
        unsafe { b.launch(cfg) }.map_err(|e| cuda_err("paged_decode_attention", e))?;
        if plan.splits > 1 {
            let ns = plan.splits as i32;
            let mut m = self.stream.launch_builder(&fns.merge);
            m.arg(&p.part_ml).arg(&p.part_acc).arg(&p.out).arg(&ns);
            let cfg = LaunchConfig {
                grid_dim: ((kv_heads * group) as u32, batch as u32, 1),
                block_dim: (head_dim as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: the partial buffers hold batch x q_heads x splits states; out holds
            // batch x q_heads x head_dim floats.
            unsafe { m.launch(cfg) }.map_err(|e| cuda_err("paged_decode_attention_merge", e))?;
        }
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

impl KernelBackend for CudaBackend {
    fn device(&self) -> Result<DeviceInfo> {
        Ok(self.info.clone())
    }

    fn check(&mut self) -> Result<Vec<CheckItem>> {
        guard("check", || {
            let s = |r: Result<String>| r.map_err(|e| e.to_string());
            let mut items = vec![
                CheckItem::from_result("copy_kernel", s(self.check_copy())),
                CheckItem::from_result("reduce_kernel", s(self.check_reduce())),
                CheckItem::from_result("empty_kernel", s(self.check_empty())),
                CheckItem::from_result("spin_kernel + event timer", s(self.check_timer())),
                CheckItem::from_result(
                    "gemm bf16 16x64x48",
                    s(self
                        .verify_gemm(GemmDtype::Bf16)
                        .map(|()| "matches the CPU reference".into())),
                ),
            ];
            let fp8 = if self.fp8_hardware {
                fp8_item(self.verify_gemm(GemmDtype::Fp8))
            } else {
                CheckItem::new(
                    "gemm fp8 16x64x48",
                    CheckStatus::Unsupported,
                    format!("sm_{} has no FP8 tensor cores", self.sm),
                )
            };
            self.info.supports_fp8 = fp8.status == CheckStatus::Ok;
            self.info.fp8_note = (fp8.status != CheckStatus::Ok).then(|| fp8.detail.clone());
            items.push(fp8);
            for hd in kernels::ATTENTION_HEAD_DIMS {
                for g in 1..=kernels::MAX_GROUP {
                    items.push(CheckItem::from_result(
                        format!("paged_decode_attention hd{hd} g{g}"),
                        s(self.check_attention(hd, g)),
                    ));
                }
            }
            self.sync()?;
            Ok(items)
        })
    }

    fn stream_copy(&mut self, bytes: u64, runs: usize) -> Result<Timing> {
        guard("stream_copy", || {
            let half = (bytes / 2).max(16) / 16 * 16;
            let r = timing::rotations(self.info.l2_bytes, bytes);
            let src = self.alloc::<u8>((half * r) as usize)?;
            let dst = self.alloc::<u8>((half * r) as usize)?;
            let (s0, d0) = (self.ptr(&src), self.ptr(&dst));
            self.fill(s0, half * r / 2, false, 1)?;
            let t = self.time_kernel(runs, &mut |i| {
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
            let r = timing::rotations(self.info.l2_bytes, b);
            let src = self.alloc::<u8>((b * r) as usize)?;
            let s0 = self.ptr(&src);
            self.fill(s0, b * r / 2, false, 2)?;
            let out = self
                .stream
                .alloc_zeros::<u64>(1)
                .map_err(|e| cuda_err("alloc", e))?;
            let o = self.ptr(&out);
            let t = self.time_kernel(runs, &mut |i| {
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
                    self.info
                        .fp8_note
                        .clone()
                        .unwrap_or_else(|| "fp8 GEMMs are not supported here".into()),
                ));
            }
            let elt = dtype.bytes() as u64;
            let (wa, xb) = (k * n * elt, m * k * elt);
            // Keep every operand 256-byte aligned inside the pools.
            let (wa_al, xb_al) = (wa.div_ceil(256) * 256, xb.div_ceil(256) * 256);
            let r = timing::rotations(self.info.l2_bytes, wa + xb);
            let apool = self.alloc::<u8>((wa_al * r) as usize)?;
            let bpool = self.alloc::<u8>((xb_al * r) as usize)?;
            let dout = self.alloc::<u16>((m * n) as usize)?;
            let (a0, b0, d0) = (self.ptr(&apool), self.ptr(&bpool), self.ptr(&dout));
            let fp8 = dtype == GemmDtype::Fp8;
            let per = if fp8 { 1 } else { 2 };
            self.fill(a0, wa_al * r / per, fp8, 3)?;
            self.fill(b0, xb_al * r / per, fp8, 4)?;
            let plan = self.gemm_plan(m, k, n, dtype)?;
            let t = self.time_kernel(runs, &mut |i| {
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
            let group = s.q_heads / s.kv_heads;
            let fns = self.attention_fns(s.head_dim, group)?;
            let max_blocks = s.context.div_ceil(KV_BLOCK_TOKENS);
            let blocks = s.batch * max_blocks;
            let block_bytes = s.kv_heads * KV_BLOCK_TOKENS * s.head_dim * 2;
            let r = timing::rotations(self.info.l2_bytes, 2 * blocks * block_bytes);
            let pool_blocks = blocks * r;
            if pool_blocks > i32::MAX as u64 {
                return Err(Error::Infeasible(
                    "KV pool too large for int block ids".into(),
                ));
            }
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
            let dt = self.upload(&tables)?;
            let dl = self.upload(&vec![s.context as i32; s.batch as usize])?;
            let out = self.alloc::<f32>((s.batch * s.q_heads * s.head_dim) as usize)?;
            let plan =
                kernels::attention_split(s.batch, s.kv_heads, max_blocks, self.sm_count as u64);
            let rows = s.batch * s.q_heads;
            let part_ml = self.alloc::<f32>((rows * plan.splits * 2) as usize)?;
            let part_acc = self.alloc::<f32>((rows * plan.splits * s.head_dim) as usize)?;
            let split = plan.splits > 1;
            let base = AttentionPtrs {
                q: self.ptr(&q),
                k: self.ptr(&kc),
                v: self.ptr(&vc),
                table: self.ptr(&dt),
                lens: self.ptr(&dl),
                out: self.ptr(&out),
                part_ml: if split { self.ptr(&part_ml) } else { 0 },
                part_acc: if split { self.ptr(&part_acc) } else { 0 },
            };
            let scale = 1.0 / (s.head_dim as f32).sqrt();
            let t = self.time_kernel(runs, &mut |i| {
                let p = AttentionPtrs {
                    table: base.table + (i as u64 % r) * blocks * 4,
                    ..base
                };
                self.launch_attention(
                    &fns, p, s.batch, s.kv_heads, group, s.head_dim, max_blocks, plan, scale,
                )
            });
            self.sync()?;
            t
        })
    }

    fn empty_kernel(&mut self, runs: usize) -> Result<Timing> {
        // Not held: the row is the launch-bound rate an engine without CUDA graphs sees, host
        // launch overhead included. 100 launches between the events, from an idle stream.
        guard("empty_kernel", || {
            for _ in 0..timing::WARMUP {
                self.launch_empty()?;
            }
            self.sync()?;
            let (start, end) = (self.timing_event()?, self.timing_event()?);
            let mut samples = Vec::with_capacity(runs);
            for _ in 0..runs {
                start
                    .record(&self.stream)
                    .map_err(|e| cuda_err("record", e))?;
                for _ in 0..EMPTY_PER_SAMPLE {
                    self.launch_empty()?;
                }
                end.record(&self.stream)
                    .map_err(|e| cuda_err("record", e))?;
                let ms = self.elapsed_ms(&start, &end)?;
                samples.push(ms as f64 * 1e3 / EMPTY_PER_SAMPLE as f64);
            }
            self.ctx.check_err().map_err(|e| cuda_err("deferred", e))?;
            Timing::from_samples(&samples)
        })
    }
}
