//! The `servesim run` line a plan prints for its answer. It carries everything the plan's
//! measurement used (the deployment, the load, the run length and the seed), so that running
//! it exactly as printed reproduces the plan's verdict, request for request, and with one
//! replica fewer the one-fewer verdict: `servesim run` keeps the same sample of the same
//! requests and judges them by the same steady-state analysis.

use super::measure::LoadMeasurement;
use super::Candidate;
use crate::scenario::Scenario;

/// The `--set` overrides that give `base` the run length of measurement `m`: its request
/// count, and where the scenario caps its duration, a cap the run cannot reach (the plan's
/// runs have none).
pub(crate) fn length_overrides(base: &Scenario, m: &LoadMeasurement) -> Vec<String> {
    let mut sets = vec![format!("workload.num_requests={}", m.requests)];
    if base
        .workload
        .sessions
        .as_ref()
        .is_some_and(|x| x.num_sessions.is_some())
    {
        sets.push(format!("workload.sessions.num_sessions={}", m.requests));
    }
    if let Some(d) = base.workload.duration_s {
        // The last arrival comes at most `duration` after the first, which comes first.
        let bound = 2.0 * (m.summary.duration + 1.0);
        if d <= bound {
            sets.push(format!("workload.duration_s={}", (10.0 * bound).ceil()));
        }
    }
    sets
}

/// `servesim run ORIGIN --set S ... --seed SEED`, each override one shell word.
pub(crate) fn run_line(origin: &str, sets: &[String], seed: u64) -> String {
    let mut line = format!("servesim run {origin}");
    for s in sets {
        line.push_str(" --set ");
        line.push_str(&shell_word(s));
    }
    line.push_str(&format!(" --seed {seed}"));
    line
}

/// `s` as one shell word: as it is when it holds only safe characters, else single-quoted.
pub fn shell_word(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "._-/=:,+@%".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The `--set` overrides that make `base` the plan's measurement of `c` with `replicas`
/// replicas at `target` req/s, every step `scale` times the model's: the candidate's
/// deployment and [`load_overrides`], with an autoscaler pinned to the fleet. `None` where `--set` cannot remove what the plan's runs
/// leave out (disaggregated pools, fault injection).
pub(crate) fn colocated_run_overrides(
    base: &Scenario,
    c: &Candidate,
    replicas: u32,
    target: f64,
    scale: f64,
) -> Option<Vec<String>> {
    let mut sets = deployment_overrides(base, c, replicas, scale)?;
    sets.extend(load_overrides(base, target, Some(replicas))?);
    Some(sets)
}

/// The `--set` overrides that make `base`'s deployment `replicas` of candidate `c`, every
/// step `scale` times the model's (`None` with disaggregated pools in the base).
fn deployment_overrides(
    base: &Scenario,
    c: &Candidate,
    replicas: u32,
    scale: f64,
) -> Option<Vec<String>> {
    if base.deployment.prefill.is_some() || base.deployment.decode.is_some() {
        return None;
    }
    let mut sets = Vec::new();
    if base.deployment.mode == crate::scenario::DeploymentMode::Disaggregated {
        sets.push("deployment.mode=colocated".to_string());
    }
    sets.extend([
        format!("deployment.gpu={}", c.gpu),
        format!("deployment.dtype={}", c.dtype),
        format!("deployment.kv_cache_dtype={}", c.kv_cache_dtype),
        format!("deployment.tp={}", c.tp),
        format!("scheduler.max_num_seqs={}", c.max_num_seqs),
        format!("deployment.replicas={replicas}"),
    ]);
    if c.dp != 1 || c.ep != 1 || base.deployment.dp != 1 || base.deployment.ep != 1 {
        let at = sets.len() - 2;
        sets.insert(at, format!("deployment.ep={}", c.ep));
        sets.insert(at, format!("deployment.dp={}", c.dp));
    }
    if scale != 1.0 {
        sets.push(format!(
            "deployment.step_time_scale={}",
            base.deployment.step_time_scale * scale
        ));
    }
    if let Some(r) = &c.router {
        sets.push(format!("deployment.router={r}"));
    }
    if let Some(g) = c.kv_offloading_size_gib {
        sets.push(format!("deployment.kv_offloading_size_gib={g}"));
    }
    if let Some(k) = c.num_speculative_tokens {
        sets.push(format!("speculative.num_speculative_tokens={k}"));
        sets.extend(acceptance_list_override(base, k));
    }
    Some(sets)
}

/// Where `base` gives the acceptance as a per-position list longer than the candidate's
/// `k` (K > 0), the `--set` that cuts it to its first `k` rates, as the plan's candidate
/// does (`candidate_scenario`): `run` needs one rate per drafted token.
fn acceptance_list_override(base: &Scenario, k: u32) -> Option<String> {
    use crate::speculative::AcceptanceRate;
    let spec = base.speculative.as_ref()?;
    match &spec.acceptance_rate {
        Some(AcceptanceRate::PerPosition(v)) if k > 0 && v.len() > k as usize => {
            let rates: Vec<String> = v[..k as usize].iter().map(|r| format!("{r:?}")).collect();
            Some(format!("speculative.acceptance_rate=[{}]", rates.join(",")))
        }
        _ => None,
    }
}

/// The `--set` overrides that give `base` the load a plan measures at `target` req/s
/// (`measure::with_load`): Poisson arrivals at the target where the scenario's are offline or
/// vary over time, else its rate set to the target; no concurrency cap; an autoscaler pinned
/// to `pin` replicas. `None` where `--set` cannot express it: fault injection (the plan's
/// runs have none), or an autoscaler with nothing to pin it to (an xPyD fleet).
pub(crate) fn load_overrides(
    base: &Scenario,
    target: f64,
    pin: Option<u32>,
) -> Option<Vec<String>> {
    use crate::workload::ArrivalConfig as A;
    if base.faults.is_some() || (base.autoscale.is_some() && pin.is_none()) {
        return None;
    }
    let mut sets = Vec::new();
    match &base.workload.arrival {
        A::Offline | A::Schedule { .. } | A::Diurnal { .. } => sets.push(format!(
            "workload.arrival={{kind=\"poisson\", rate_per_s={target}}}"
        )),
        A::Poisson { rate_per_s } | A::Gamma { rate_per_s, .. } | A::Constant { rate_per_s } => {
            if *rate_per_s != target {
                sets.push(format!("workload.arrival.rate_per_s={target}"));
            }
        }
        A::Trace { rate_per_s, .. } => {
            if *rate_per_s != Some(target) {
                sets.push(format!("workload.arrival.rate_per_s={target}"));
            }
        }
    }
    if base.workload.max_concurrency.is_some() {
        sets.push(format!("workload.max_concurrency={}", u32::MAX));
    }
    if let (Some(_), Some(r)) = (&base.autoscale, pin) {
        sets.extend(autoscale_pin(r));
    }
    Some(sets)
}

/// An autoscaler pinned to `r` replicas: a static fleet.
fn autoscale_pin(r: u32) -> [String; 4] {
    [
        format!("autoscale.min_replicas={r}"),
        format!("autoscale.max_replicas={r}"),
        format!("autoscale.initial_replicas={r}"),
        "autoscale.capacity_rate_per_replica=1.0".to_string(),
    ]
}

/// The `--set` overrides that make `base` a static fleet of `replicas` of `c` over its own
/// period (its arrivals as written, an autoscaler pinned to the fleet), every step `scale`
/// times the model's: what the period plan simulates for the static fleet. `None` where
/// `--set` cannot remove what that simulation leaves out (disaggregated pools, faults).
pub(crate) fn static_overrides(
    base: &Scenario,
    c: &Candidate,
    replicas: u32,
    scale: f64,
) -> Option<Vec<String>> {
    if base.faults.is_some() {
        return None;
    }
    let mut sets = deployment_overrides(base, c, replicas, scale)?;
    if base.autoscale.is_some() {
        sets.extend(autoscale_pin(replicas));
    }
    Some(sets)
}
