//! NVRTC through its C API, loaded at run time (libloading): compiles the suite's CUDA C to a
//! cubin (SASS for one architecture) and reads ptxas's resource report. NVRTC needs no GPU, so
//! the compile test below runs on any machine with an NVRTC library (e.g. the
//! `nvidia-cuda-nvrtc-cu12` wheel). The CUDA backend loads NVRTC here rather than through
//! cudarc so that it chooses the library whose major version matches the driver
//! ([`super::compat::nvrtc_candidates`]).

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use super::kernels::CompileUnit;

type Program = *mut c_void;
type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
type NumArchsFn = unsafe extern "C" fn(*mut c_int) -> c_int;
type ArchsFn = unsafe extern "C" fn(*mut c_int) -> c_int;
type CreateFn = unsafe extern "C" fn(
    *mut Program,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> c_int;
type CompileFn = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int;
type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> c_int;
type GetFn = unsafe extern "C" fn(Program, *mut c_char) -> c_int;
type DestroyFn = unsafe extern "C" fn(*mut Program) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;

/// A loaded NVRTC library.
pub struct Nvrtc {
    lib: libloading::Library,
    /// The name or path it was loaded by.
    pub name: String,
    /// Its version, (major, minor).
    pub version: (i32, i32),
}

/// A compiled unit: the cubin image and NVRTC's log (with ptxas's report when asked for).
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The cubin (an ELF image), loadable with `cuModuleLoadData`.
    pub cubin: Vec<u8>,
    /// NVRTC's program log.
    pub log: String,
}

/// One kernel's resources as ptxas reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelResources {
    /// Kernel name.
    pub kernel: String,
    /// Registers per thread.
    pub registers: u32,
    /// Static shared memory per block, bytes.
    pub shared_bytes: u64,
    /// Stack frame per thread, bytes.
    pub stack_bytes: u64,
    /// Register spill stores per thread, bytes.
    pub spill_store_bytes: u64,
    /// Register spill loads per thread, bytes.
    pub spill_load_bytes: u64,
}

impl Nvrtc {
    /// Loads NVRTC from `name` (a soname searched the usual way, or a path) and reads its
    /// version.
    pub fn open(name: &str) -> Result<Self, String> {
        // SAFETY: loading NVRTC runs only its initialisers; it is used through the typed
        // symbols below, with the signatures of nvrtc.h.
        let lib = unsafe { libloading::Library::new(name) }.map_err(|e| format!("{name}: {e}"))?;
        let mut n = Nvrtc {
            lib,
            name: name.to_string(),
            version: (0, 0),
        };
        let (mut major, mut minor) = (0, 0);
        let f: VersionFn = n.sym("nvrtcVersion")?;
        // SAFETY: two valid out pointers.
        n.status(unsafe { f(&mut major, &mut minor) }, "nvrtcVersion")?;
        n.version = (major, minor);
        Ok(n)
    }

    /// The first of `candidates` that loads and whose major version is at most `max_major`;
    /// an error listing what each candidate said.
    pub fn open_first(candidates: &[String], max_major: i32) -> Result<Self, String> {
        let mut why = Vec::new();
        for c in candidates {
            match Self::open(c) {
                Ok(n) if n.version.0 <= max_major => return Ok(n),
                Ok(n) => why.push(format!(
                    "{c}: NVRTC {}.{} is newer than CUDA {max_major}",
                    n.version.0, n.version.1
                )),
                Err(e) => why.push(e),
            }
        }
        Err(format!("no usable NVRTC library ({})", why.join("; ")))
    }

    fn sym<T: Copy>(&self, name: &str) -> Result<T, String> {
        // SAFETY: `T` is the function-pointer type nvrtc.h declares for `name`.
        unsafe { self.lib.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| format!("{}: missing {name}: {e}", self.name))
    }

    fn status(&self, rc: c_int, call: &str) -> Result<(), String> {
        if rc == 0 {
            return Ok(());
        }
        let text = self
            .sym::<ErrorStringFn>("nvrtcGetErrorString")
            .ok()
            // SAFETY: NVRTC returns a static C string for any result code.
            .map(|f| {
                unsafe { CStr::from_ptr(f(rc)) }
                    .to_string_lossy()
                    .into_owned()
            })
            .unwrap_or_default();
        Err(format!("{call} failed: {rc} {text}"))
    }

    /// The SM versions this NVRTC can target (e.g. 90 for sm_90).
    pub fn supported_archs(&self) -> Result<Vec<i32>, String> {
        let num: NumArchsFn = self.sym("nvrtcGetNumSupportedArchs")?;
        let get: ArchsFn = self.sym("nvrtcGetSupportedArchs")?;
        let mut n: c_int = 0;
        // SAFETY: a valid out pointer.
        self.status(unsafe { num(&mut n) }, "nvrtcGetNumSupportedArchs")?;
        let mut v = vec![0 as c_int; n.max(0) as usize];
        // SAFETY: `v` holds the n entries NVRTC writes.
        self.status(unsafe { get(v.as_mut_ptr()) }, "nvrtcGetSupportedArchs")?;
        Ok(v)
    }

    /// Compiles `unit` to a cubin for `sm_<sm>`; with `report`, asks ptxas for its resource
    /// report (registers, shared memory, spills) in the log. A compile error carries the log.
    pub fn compile(&self, unit: &CompileUnit, sm: i32, report: bool) -> Result<Compiled, String> {
        let create: CreateFn = self.sym("nvrtcCreateProgram")?;
        let compile: CompileFn = self.sym("nvrtcCompileProgram")?;
        let log_size: SizeFn = self.sym("nvrtcGetProgramLogSize")?;
        let get_log: GetFn = self.sym("nvrtcGetProgramLog")?;
        let cubin_size: SizeFn = self.sym("nvrtcGetCUBINSize")?;
        let get_cubin: GetFn = self.sym("nvrtcGetCUBIN")?;
        let destroy: DestroyFn = self.sym("nvrtcDestroyProgram")?;

        let src = CString::new(unit.source).map_err(|e| e.to_string())?;
        let file = CString::new(unit.file).map_err(|e| e.to_string())?;
        let mut opts = vec![format!("--gpu-architecture=sm_{sm}")];
        opts.extend(unit.options.iter().cloned());
        if report {
            opts.push("--ptxas-options=--verbose".into());
        }
        let opts: Vec<CString> = opts
            .into_iter()
            .map(|o| CString::new(o).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();

        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: valid C strings; no headers.
        self.status(
            unsafe {
                create(
                    &mut prog,
                    src.as_ptr(),
                    file.as_ptr(),
                    0,
                    std::ptr::null(),
                    std::ptr::null(),
                )
            },
            "nvrtcCreateProgram",
        )?;
        let result = (|| {
            // SAFETY: `prog` is live; `ptrs` holds `ptrs.len()` C strings that outlive the call.
            let rc = unsafe { compile(prog, ptrs.len() as c_int, ptrs.as_ptr()) };
            let mut n = 0usize;
            // SAFETY: `prog` is live; the log buffer holds the size NVRTC reported.
            let log = unsafe {
                self.status(log_size(prog, &mut n), "nvrtcGetProgramLogSize")?;
                let mut buf = vec![0 as c_char; n.max(1)];
                self.status(get_log(prog, buf.as_mut_ptr()), "nvrtcGetProgramLog")?;
                CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
            };
            if rc != 0 {
                return Err(format!(
                    "NVRTC {}.{} could not compile {} for sm_{sm} ({}): {}",
                    self.version.0,
                    self.version.1,
                    unit.name,
                    opts.iter()
                        .map(|o| o.to_string_lossy())
                        .collect::<Vec<_>>()
                        .join(" "),
                    log.trim()
                ));
            }
            // SAFETY: `prog` compiled; the buffer holds the size NVRTC reported.
            let cubin = unsafe {
                self.status(cubin_size(prog, &mut n), "nvrtcGetCUBINSize")?;
                let mut buf = vec![0u8; n];
                self.status(
                    get_cubin(prog, buf.as_mut_ptr() as *mut c_char),
                    "nvrtcGetCUBIN",
                )?;
                buf
            };
            Ok(Compiled { cubin, log })
        })();
        // SAFETY: `prog` was created above and is destroyed once.
        let _ = unsafe { destroy(&mut prog) };
        result
    }
}

/// The per-kernel resources in a ptxas `--verbose` log, in the order the kernels appear.
pub fn parse_ptxas_log(log: &str) -> Vec<KernelResources> {
    let num_before = |line: &str, unit: &str| -> Option<u64> {
        let at = line.find(unit)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    let mut out: Vec<KernelResources> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let kernel = rest.split('\'').next().unwrap_or_default().to_string();
            out.push(KernelResources {
                kernel,
                registers: 0,
                shared_bytes: 0,
                stack_bytes: 0,
                spill_store_bytes: 0,
                spill_load_bytes: 0,
            });
            continue;
        }
        let Some(k) = out.last_mut() else { continue };
        if line.contains("bytes stack frame") {
            k.stack_bytes = num_before(line, "bytes stack frame").unwrap_or(0);
            k.spill_store_bytes = num_before(line, "bytes spill stores").unwrap_or(0);
            k.spill_load_bytes = num_before(line, "bytes spill loads").unwrap_or(0);
        } else if line.contains("Used ") && line.contains(" registers") {
            k.registers = num_before(line, "registers").unwrap_or(0) as u32;
            k.shared_bytes = num_before(line, "bytes smem").unwrap_or(0);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::kernels::{suite_units, ATTENTION_WARPS};
    use super::*;

    #[test]
    fn parses_a_ptxas_report() {
        let log = "ptxas info    : 0 bytes gmem\n\
            ptxas info    : Compiling entry function 'paged_decode_attention' for 'sm_90'\n\
            ptxas info    : Function properties for paged_decode_attention\n\
            ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
            ptxas info    : Used 168 registers, used 1 barriers, 33280 bytes smem\n\
            ptxas info    : Compiling entry function 'empty_kernel' for 'sm_90'\n\
            ptxas info    : Function properties for empty_kernel\n\
            ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
            ptxas info    : Used 4 registers\n";
        let r = parse_ptxas_log(log);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0],
            KernelResources {
                kernel: "paged_decode_attention".into(),
                registers: 168,
                shared_bytes: 33280,
                stack_bytes: 8,
                spill_store_bytes: 4,
                spill_load_bytes: 12,
            }
        );
        assert_eq!((r[1].registers, r[1].shared_bytes), (4, 0));
    }

    /// The NVRTC library for the compile test: `SERVESIM_NVRTC` (a path), else the usual
    /// sonames, else the `nvidia-cuda-nvrtc-cu12` wheel of the first `python3` on PATH.
    fn nvrtc_for_tests() -> Result<Nvrtc, String> {
        if let Ok(p) = std::env::var("SERVESIM_NVRTC") {
            return Nvrtc::open(&p);
        }
        let mut tried = Vec::new();
        for name in ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"] {
            match Nvrtc::open(name) {
                Ok(n) => return Ok(n),
                Err(e) => tried.push(e),
            }
        }
        let py = std::process::Command::new("python3")
            .args([
                "-c",
                "import nvidia.cuda_nvrtc as m; print(list(m.__path__)[0])",
            ])
            .output();
        if let Ok(o) = py {
            let dir = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if o.status.success() && !dir.is_empty() {
                let lib = std::path::Path::new(&dir)
                    .join("lib")
                    .join("libnvrtc.so.12");
                if lib.exists() {
                    return Nvrtc::open(&lib.to_string_lossy());
                }
            }
        }
        Err(tried.join("; "))
    }

    /// Compiles every CUDA C unit of the suite with NVRTC to an sm_90 cubin (and sm_100 where
    /// this NVRTC targets it), as the CUDA backend does on an H100/H200, and checks ptxas's
    /// report: every kernel present, no register spills, shared memory within the 48 KiB a
    /// block may declare statically. Prints the table (`-- --nocapture`). Skips with a message
    /// when no NVRTC library is found, unless `SERVESIM_REQUIRE_NVRTC=1` (as `.ci/run` sets).
    #[test]
    fn nvrtc_compiles_every_suite_kernel_to_cubin() {
        let nvrtc = match nvrtc_for_tests() {
            Ok(n) => n,
            Err(e) => {
                assert!(
                    std::env::var("SERVESIM_REQUIRE_NVRTC").as_deref() != Ok("1"),
                    "SERVESIM_REQUIRE_NVRTC=1 but no NVRTC library loads: {e}"
                );
                eprintln!(
                    "skipped: no NVRTC library (pip install nvidia-cuda-nvrtc-cu12, or set \
                     SERVESIM_NVRTC to libnvrtc.so): {e}"
                );
                return;
            }
        };
        let archs = nvrtc.supported_archs().unwrap();
        let targets: Vec<i32> = [90, 100]
            .into_iter()
            .filter(|a| archs.contains(a))
            .collect();
        assert!(
            targets.contains(&90),
            "NVRTC {:?} cannot target sm_90",
            nvrtc.version
        );
        eprintln!(
            "NVRTC {}.{} ({}); targets sm_{}",
            nvrtc.version.0,
            nvrtc.version.1,
            nvrtc.name,
            targets
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", sm_")
        );
        eprintln!(
            "{:<20} {:<30} {:>6} {:>5} {:>10} {:>6} {:>12}",
            "unit", "kernel", "arch", "regs", "smem B", "stack", "spill st/ld"
        );
        let mut compiled = 0;
        for unit in suite_units() {
            for &sm in &targets {
                let c = nvrtc
                    .compile(&unit, sm, true)
                    .unwrap_or_else(|e| panic!("{e}"));
                assert!(
                    c.cubin.starts_with(b"\x7fELF"),
                    "{}: not a cubin",
                    unit.name
                );
                let res = parse_ptxas_log(&c.log);
                for k in unit.kernels {
                    let r = res.iter().find(|r| r.kernel == *k).unwrap_or_else(|| {
                        panic!("{}: no ptxas report for {k}:\n{}", unit.name, c.log)
                    });
                    eprintln!(
                        "{:<20} {:<30} {:>6} {:>5} {:>10} {:>6} {:>6}/{:<5}",
                        unit.name,
                        k,
                        format!("sm_{sm}"),
                        r.registers,
                        r.shared_bytes,
                        r.stack_bytes,
                        r.spill_store_bytes,
                        r.spill_load_bytes
                    );
                    assert_eq!(
                        (r.spill_store_bytes, r.spill_load_bytes),
                        (0, 0),
                        "{} {k} sm_{sm} spills registers",
                        unit.name
                    );
                    assert!(
                        r.registers > 0 && r.registers <= 255,
                        "{} {k}: {} registers",
                        unit.name,
                        r.registers
                    );
                    assert!(r.shared_bytes <= 48 << 10, "{} {k}: {:?}", unit.name, r);
                    if *k == "paged_decode_attention" {
                        // __launch_bounds__(NWARPS * 32): a block of 4 warps must fit in the
                        // 64K registers of an SM.
                        assert!(r.registers as u64 * ATTENTION_WARPS as u64 * 32 <= 65536);
                    }
                }
                compiled += 1;
            }
        }
        assert_eq!(compiled, suite_units().len() * targets.len());
    }
}
