//! Expert and attention data parallelism for MoE models: the all-to-all that moves tokens to
//! their experts and back, the load of the busiest expert-parallel rank, and collectives over
//! GPUs that span nodes. Each is a named term of the step (docs/model.md, "MoE parallelism").

use crate::gpu::GpuProfile;

use super::kernels;

/// One all-to-all of expert parallelism (a dispatch or a combine) as DeepEP's low-latency
/// kernels run it: each of the `tokens_per_gpu` tokens this GPU holds goes to each of its
/// `top_k` experts once (no deduplication per rank), `hidden x bytes_per_elem` bytes each;
/// the experts are spread evenly over `ep` ranks, `gpus_per_node` of them per NVLink domain.
/// Sends to the GPU's own node ride NVLink at the all-reduce bus bandwidth, the others its
/// NIC (`network.internode_bandwidth_bytes_per_s`); the two run at once and the slower sets
/// the time, after a fixed latency (the NCCL small-message latency inside a node,
/// `network.internode_latency_s` across nodes). Seconds; 0 for one rank.
pub fn all_to_all_s(
    gpu: &GpuProfile,
    tokens_per_gpu: f64,
    hidden: f64,
    top_k: f64,
    ep: u32,
    bytes_per_elem: f64,
) -> f64 {
    if ep <= 1 || tokens_per_gpu <= 0.0 {
        return 0.0;
    }
    let ep_f = ep as f64;
    let local = ep.min(gpu.network.gpus_per_node.max(1)) as f64;
    let per_token = top_k * hidden * bytes_per_elem;
    let nvlink_bytes = tokens_per_gpu * per_token * (local - 1.0) / ep_f;
    let rdma_bytes = tokens_per_gpu * per_token * (ep_f - local) / ep_f;
    let latency = if rdma_bytes > 0.0 {
        gpu.network.internode_latency_s
    } else {
        gpu.allreduce.latency_s
    };
    latency
        + (nvlink_bytes / gpu.allreduce.bus_bandwidth_bytes_per_s)
            .max(rdma_bytes / gpu.network.internode_bandwidth_bytes_per_s)
}

/// The load of the busiest of `ep` expert-parallel ranks over the mean load, when `tokens`
/// tokens each pick `top_k` distinct experts of `experts` uniformly at random and each rank
/// holds `experts / ep` of them: the count on one rank has mean `T k / ep` and variance
/// `T (k/ep)(1 - 1/ep)(E - k)/(E - 1)` (a sum over tokens of hypergeometric draws), and the
/// largest of `ep` such counts is about `mean + sd sqrt(2 ln ep)`. `redundant` extra expert
/// replicas (EPLB) split their experts' tokens, which shrinks the variance by `E / (E + r)`.
/// At least 1, at most `ep` (every pair on one rank).
pub fn expert_straggler(tokens: f64, experts: f64, top_k: f64, ep: u32, redundant: f64) -> f64 {
    if ep <= 1 || tokens <= 0.0 || experts <= 1.0 || top_k <= 0.0 {
        return 1.0;
    }
    let ep_f = ep as f64;
    let mean = tokens * top_k / ep_f;
    let var = tokens * (top_k / ep_f) * (1.0 - 1.0 / ep_f) * (experts - top_k).max(0.0)
        / (experts - 1.0)
        * experts
        / (experts + redundant.max(0.0));
    let gamma = 1.0 + var.sqrt() / mean * (2.0 * ep_f.ln()).sqrt();
    gamma.clamp(1.0, ep_f)
}

/// An all-reduce of `bytes` over `gpus` GPUs as the engines run it: within one NVLink domain
/// [`kernels::engine_allreduce_s`] (the engine's own kernels up to `limits.custom_max_bytes`,
/// NCCL above); across nodes NCCL's ring, limited by each GPU's NIC, after the cross-node latency.
pub fn allreduce_span_s(
    gpu: &GpuProfile,
    bytes: f64,
    gpus: u32,
    limits: kernels::AllReduceLimits,
) -> f64 {
    if gpus <= gpu.network.gpus_per_node {
        return kernels::engine_allreduce_s(gpu, bytes, gpus, limits);
    }
    let n = gpus as f64;
    gpu.network.internode_latency_s
        + 2.0 * (n - 1.0) / n * bytes / gpu.network.internode_bandwidth_bytes_per_s
}

/// The all-gather and reduce-scatter that run a MoE layer's experts tensor-parallel over the
/// `gpus` GPUs of several attention data-parallel ranks (vLLM's data parallelism without
/// `--enable-expert-parallel`): every GPU gathers all ranks' tokens (`bytes` in all) and
/// scatters the summed outputs back, the traffic of one NCCL all-reduce of `bytes`.
pub fn gather_scatter_s(gpu: &GpuProfile, bytes: f64, gpus: u32) -> f64 {
    let nccl = kernels::AllReduceLimits {
        custom_max_bytes: 0.0,
        one_shot_max_bytes: 0.0,
    };
    allreduce_span_s(gpu, bytes, gpus, nccl)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> GpuProfile {
        GpuProfile::load("h100-sxm").unwrap()
    }

    #[test]
    fn the_straggler_factor_grows_with_ranks_and_shrinks_with_tokens() {
        assert_eq!(expert_straggler(1000.0, 256.0, 8.0, 1, 0.0), 1.0);
        let small = expert_straggler(64.0, 256.0, 8.0, 8, 0.0);
        let large = expert_straggler(8192.0, 256.0, 8.0, 8, 0.0);
        assert!(small > large && large > 1.0, "{small} {large}");
        assert!(
            expert_straggler(8192.0, 256.0, 8.0, 64, 0.0) > large,
            "more ranks, a busier busiest rank"
        );
        // Redundant experts spread the load.
        assert!(expert_straggler(64.0, 256.0, 8.0, 8, 32.0) < small);
        // 512 tokens x top-8 over 8 ranks: mean 512, sd 20.7, max ~ 1 + 0.040 x 2.04.
        let g = expert_straggler(512.0, 256.0, 8.0, 8, 0.0);
        assert!((g - 1.083).abs() < 0.005, "{g}");
    }

    #[test]
    fn all_to_all_crossing_nodes_costs_the_nic() {
        let g = h100();
        // DeepEP's low-latency table (128 tokens, hidden 7168, top-8, FP8): the fit its
        // defaults come from reproduces the cross-node rows within 10%.
        for (ep, measured_us) in [(16, 118.0), (32, 155.0), (64, 173.0), (256, 194.0)] {
            let t = all_to_all_s(&g, 128.0, 7168.0, 8.0, ep, 1.03) * 1e6;
            assert!(
                (t - measured_us).abs() / measured_us < 0.1,
                "EP{ep}: {t:.0} us vs {measured_us}"
            );
        }
        // Inside a node it rides NVLink: faster than any cross-node exchange.
        let one_node = all_to_all_s(&g, 128.0, 7168.0, 8.0, 8, 1.03);
        assert!(one_node * 1e6 < 118.0 && one_node > g.allreduce.latency_s);
        assert_eq!(all_to_all_s(&g, 128.0, 7168.0, 8.0, 1, 1.0), 0.0);
    }
}
