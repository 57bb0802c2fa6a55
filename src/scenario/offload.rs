//! KV offloading keys of `[deployment]`: the CPU tier's size (vLLM's `--kv-offloading-size`,
//! GiB per engine summed over its TP ranks, as vllm/config/cache.py documents it at
//! vllm-project/vllm@002f10e0cfa1373a19a0d2756598a34b700d20e5) and its host link.

use super::DeploymentConfig;
use crate::error::{Error, Result};
use crate::roofline::MemoryPlan;
use crate::sim::OffloadConfig;

/// Default host-link bandwidth of one GPU, one direction, GB/s: what vLLM's offloading
/// connector measured moving 1,000 blocks CPU -> GPU by DMA at a 2 MB physical block (its
/// layout for Llama-3.1-8B since 0.12) on an H100, whose host link is PCIe Gen5 x16: 47.5
/// GB/s of the link's 63.0 GB/s ceiling (32 GT/s x 16 lanes x 128b/130b / 8; PCI-SIG PCI
/// Express Base Specification 5.0). Source: blog.vllm.ai/2026/01/08/kv-offloading-connector
/// .html, figure 4 (vllm-project/vllm-project.github.io@c3a01c4,
/// assets/figures/2026-01-08-kv-offloading-connector/figure4.png). H200 and HGX B200 boards
/// reach their host over PCIe Gen5 x16 too; A100 over Gen4 x16 (half: set about 24); a
/// Grace-Blackwell superchip over NVLink-C2C (set its figure).
pub const DEFAULT_BANDWIDTH_GB_S: f64 = 47.5;

/// Default fixed time of one load from host memory, us: an assumption (a copy launch and
/// its DMA setup per transfer), the same as the P/D link's default.
pub const DEFAULT_LATENCY_US: f64 = 20.0;

/// The largest `kv_offloading_size_gib` accepted, GiB (1 PiB: beyond any host).
pub const MAX_SIZE_GIB: f64 = 1_048_576.0;

/// The CPU tier of a deployment, `None` without one; errors name `origin` and the key.
pub fn resolve(
    d: &DeploymentConfig,
    prefix_caching: bool,
    memory: &MemoryPlan,
    origin: &str,
) -> Result<Option<OffloadConfig>> {
    let err = |key: &str, reason: String| Error::config(origin, key, reason);
    let size_key = "deployment.kv_offloading_size_gib";
    let size = d.kv_offloading_size_gib.unwrap_or(0.0);
    if !(0.0..=MAX_SIZE_GIB).contains(&size) {
        return Err(err(
            size_key,
            format!("must be a size in GiB in [0, {MAX_SIZE_GIB}], got {size}"),
        ));
    }
    let bw_key = "deployment.kv_offloading_bandwidth_gb_s";
    let bw = d
        .kv_offloading_bandwidth_gb_s
        .unwrap_or(DEFAULT_BANDWIDTH_GB_S);
    if !(bw > 0.0 && bw.is_finite()) {
        return Err(err(
            bw_key,
            format!("must be a finite bandwidth > 0 GB/s, got {bw}"),
        ));
    }
    let lat_key = "deployment.kv_offloading_latency_us";
    let lat = d.kv_offloading_latency_us.unwrap_or(DEFAULT_LATENCY_US);
    if !(0.0..=1e9).contains(&lat) {
        return Err(err(
            lat_key,
            format!("must be a time in [0, 1e9] us, got {lat}"),
        ));
    }
    if size == 0.0 {
        return Ok(None);
    }
    if !prefix_caching {
        return Err(err(
            size_key,
            "KV offloading needs prefix caching (scheduler.enable_prefix_caching = true)".into(),
        ));
    }
    let block_bytes = memory.kv_bytes_per_token * memory.block_size as f64;
    // vLLM splits the size evenly over the TP ranks; each data-parallel rank has its own.
    let per_gpu_bytes = size * (1u64 << 30) as f64 / d.tp.max(1) as f64;
    let cpu_blocks = (per_gpu_bytes / block_bytes).floor() as u64 * d.dp.max(1) as u64;
    if cpu_blocks == 0 {
        return Err(err(
            size_key,
            format!("{size} GiB holds no KV block of {block_bytes:.0} bytes per GPU"),
        ));
    }
    Ok(Some(OffloadConfig {
        cpu_blocks,
        block_bytes_per_gpu: block_bytes,
        bandwidth_bytes_per_s: bw * 1e9,
        latency_ns: (lat * 1e3).round() as u64,
    }))
}
