//! What the CUDA backend needs from the machine's driver and libraries, as plain checks that
//! run without a GPU: which driver symbols it calls, which event-timing symbol to use, which
//! NVRTC library to load for the driver, and whether NVRTC and cuBLASLt suit the driver.
//!
//! Version numbers are the CUDA API's: the driver's `cuDriverGetVersion` (1000 x major +
//! 10 x minor, e.g. 12040 for 12.4), NVRTC's `nvrtcVersion` (major, minor), cuBLASLt's
//! `cublasLtGetVersion` (10000 x major + 100 x minor + patch from CUDA 12 on, e.g. 120901).

/// Driver API symbols the backend calls (through cudarc 0.19 with its `cuda-13000` bindings:
/// context, memory, copies, modules, launches, events; cudarc/src/driver/result.rs), looked up
/// before the first call so that an old driver is a clear error rather than a panic. The
/// event-timing symbol is chosen separately ([`pick_elapsed_symbol`]).
pub const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuMemGetInfo_v2",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemsetD8Async",
    "cuStreamSynchronize",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuGetErrorName",
    "cuGetErrorString",
];

/// The event-timing symbols, preferred first. cudarc 0.19 built with `cuda-13000` calls only
/// `cuEventElapsedTime_v2` (cudarc/src/driver/result.rs, `event::elapsed`), which drivers
/// export from R570 (CUDA 12.8) on; every driver exports `cuEventElapsedTime`. Both take
/// `(float *ms, CUevent start, CUevent end)`.
pub const ELAPSED_SYMBOLS: [&str; 2] = ["cuEventElapsedTime_v2", "cuEventElapsedTime"];

/// The event-timing symbol to call, given which symbols the driver exports (`has`): the
/// `_v2` one where present, else the original; an error when the driver has neither.
pub fn pick_elapsed_symbol(has: &dyn Fn(&str) -> bool) -> Result<&'static str, String> {
    ELAPSED_SYMBOLS
        .iter()
        .copied()
        .find(|s| has(s))
        .ok_or_else(|| {
            format!(
                "the CUDA driver exports neither {} nor {}",
                ELAPSED_SYMBOLS[0], ELAPSED_SYMBOLS[1]
            )
        })
}

/// The CUDA major version of a driver or runtime version number (12040 -> 12).
pub fn major(version: i32) -> i32 {
    version / 1000
}

/// `major.minor` of a version number (12040 -> "12.4").
pub fn dotted(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

/// NVRTC libraries to try, in order, for a driver of CUDA version `driver_version`: the one
/// whose major version is the driver's first, then an unversioned `libnvrtc.so` (its version
/// is checked after loading), then older majors (a cubin from an older NVRTC loads on a newer
/// driver). A newer major is never tried: its cubins need a newer driver. `SERVESIM_NVRTC`, when
/// set, names the one library to load instead.
pub fn nvrtc_candidates(driver_version: i32) -> Vec<String> {
    let m = major(driver_version);
    let mut v = vec![format!("libnvrtc.so.{m}"), "libnvrtc.so".to_string()];
    for older in (11..m).rev() {
        v.push(format!("libnvrtc.so.{older}"));
    }
    v
}

/// Whether NVRTC `nvrtc` = (major, minor), which can target the SM versions in `supported`
/// (e.g. 90 for sm_90), can build cubins that a driver of version `driver_version` loads on a
/// device of SM version `sm`. The suite compiles SASS (cubin), not PTX: PTX from NVRTC 12.9 is
/// PTX ISA 8.8 and needs a 12.9 driver to JIT, while a cubin from any 12.x NVRTC loads on any
/// 12.x driver (CUDA minor-version compatibility). A newer major than the driver's is refused.
pub fn check_nvrtc(
    nvrtc: (i32, i32),
    driver_version: i32,
    sm: i32,
    supported: &[i32],
) -> Result<(), String> {
    let d = major(driver_version);
    if nvrtc.0 > d {
        return Err(format!(
            "NVRTC {}.{} is newer than the driver's CUDA {}: its cubins need a CUDA {} driver. \
             Put NVRTC {d}.x first (pip install nvidia-cuda-nvrtc-cu{d}; LD_LIBRARY_PATH) or set \
             SERVESIM_NVRTC to its libnvrtc.so",
            nvrtc.0,
            nvrtc.1,
            dotted(driver_version),
            nvrtc.0
        ));
    }
    if !supported.contains(&sm) {
        return Err(format!(
            "NVRTC {}.{} cannot compile for sm_{sm} (it targets sm_{}); install a newer NVRTC \
             {d}.x",
            nvrtc.0,
            nvrtc.1,
            supported
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", sm_")
        ));
    }
    Ok(())
}

/// The major version of a `cublasLtGetVersion` number (120901 -> 12); `None` for the CUDA 11
/// numbering (below 100000), which is older than any driver this suite runs on.
pub fn cublaslt_major(version: usize) -> Option<i32> {
    (version >= 100_000).then_some((version / 10_000) as i32)
}

/// Whether cuBLASLt `version` works with a driver of version `driver_version`: its major
/// version must not be newer than the driver's (cuBLAS 13 needs an R580 driver).
pub fn check_cublaslt(version: usize, driver_version: i32) -> Result<(), String> {
    let d = major(driver_version);
    match cublaslt_major(version) {
        Some(m) if m > d => Err(format!(
            "cuBLASLt {version} (CUDA {m}) is newer than the driver's CUDA {}: put cuBLAS {d}.x \
             first (pip install nvidia-cublas-cu{d}; LD_LIBRARY_PATH)",
            dotted(driver_version)
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_symbol_falls_back_on_drivers_before_r570() {
        // R535-R560 (CUDA 12.2-12.6): only the original symbol.
        let old = |s: &str| s == "cuEventElapsedTime";
        assert_eq!(pick_elapsed_symbol(&old).unwrap(), "cuEventElapsedTime");
        // R570 and later export both: the _v2 one, as the CUDA 13 headers call it.
        let new = |s: &str| s.starts_with("cuEventElapsedTime");
        assert_eq!(pick_elapsed_symbol(&new).unwrap(), "cuEventElapsedTime_v2");
        let none = |_: &str| false;
        let e = pick_elapsed_symbol(&none).unwrap_err();
        assert!(e.contains("cuEventElapsedTime_v2") && e.contains("nor cuEventElapsedTime"));
    }

    #[test]
    fn nvrtc_candidates_prefer_the_drivers_major_and_never_a_newer_one() {
        assert_eq!(
            nvrtc_candidates(12040),
            ["libnvrtc.so.12", "libnvrtc.so", "libnvrtc.so.11"]
        );
        let c13 = nvrtc_candidates(13000);
        assert_eq!(c13[0], "libnvrtc.so.13");
        assert_eq!(c13[2], "libnvrtc.so.12");
        assert!(!nvrtc_candidates(12090).iter().any(|c| c.ends_with(".13")));
    }

    #[test]
    fn nvrtc_must_suit_the_driver_and_the_device() {
        let archs = [75, 80, 86, 89, 90, 100, 120];
        // A 12.9 NVRTC on a 12.2 driver: cubin loads (minor-version compatibility).
        assert!(check_nvrtc((12, 9), 12020, 90, &archs).is_ok());
        // A CUDA 13 NVRTC on an R550 (12.4) driver: refused, naming the fix.
        let e = check_nvrtc((13, 0), 12040, 90, &archs).unwrap_err();
        assert!(
            e.contains("NVRTC 13.0 is newer than the driver's CUDA 12.4"),
            "{e}"
        );
        assert!(e.contains("nvidia-cuda-nvrtc-cu12"), "{e}");
        // An NVRTC that cannot target the device.
        let e = check_nvrtc((12, 4), 12080, 100, &[75, 80, 90]).unwrap_err();
        assert!(e.contains("cannot compile for sm_100"), "{e}");
        assert_eq!(dotted(12080), "12.8");
    }

    #[test]
    fn cublaslt_must_not_be_newer_than_the_driver() {
        assert_eq!(cublaslt_major(120901), Some(12));
        assert_eq!(cublaslt_major(130001), Some(13));
        assert_eq!(cublaslt_major(11_803), None);
        assert!(check_cublaslt(120901, 12020).is_ok());
        assert!(check_cublaslt(130001, 13000).is_ok());
        let e = check_cublaslt(130001, 12080).unwrap_err();
        assert!(e.contains("nvidia-cublas-cu12"), "{e}");
    }
}
