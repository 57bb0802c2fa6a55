//! Sessions and KV reuse (issue 32): traces with block identities, the content-addressed
//! prefix cache and its reported hit rate, checked against hit rates computed here by a
//! second method (a closed form for a generated trace; a plain scan of the Mooncake excerpt).

mod common;

use std::collections::HashSet;
use std::path::PathBuf;

use common::run_toml;
use servesim::summary::RunSummary;

const BLOCK: u64 = 512;

/// A scratch file under the target directory (never outside the build tree).
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kv_reuse");
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir.join(name)
}

/// A multi-turn trace: `convs` conversations of `turns` turns sharing a system prompt of
/// `sys` blocks; turn k (1-based) of a conversation resends its history: the system prompt,
/// `k * grow` blocks of its own, and a 100-token tail that no later turn repeats. Turns
/// arrive `gap_ms` apart, conversations interleaved. Returns the JSONL text and the
/// theoretical token hit rate of an unbounded cache, in closed form: every turn but the
/// first conversation's first hits the system prompt, and turn k > 1 also hits the
/// (k - 1) * grow blocks its previous turn sent.
fn multi_turn(convs: u64, turns: u64, sys: u64, grow: u64, gap_ms: u64) -> (String, f64) {
    let tail = 100;
    let mut text = String::new();
    let mut t = 0;
    for k in 1..=turns {
        for c in 0..convs {
            let mut ids: Vec<u64> = (0..sys).collect();
            // A conversation's block j: its own id, the same in every turn that resends it.
            ids.extend((0..k * grow).map(|j| 1_000_000 * (c + 1) + j));
            ids.push(9_000_000_000 + k * 10_000 + c); // the partial tail block
            let input = (sys + k * grow) * BLOCK + tail;
            text.push_str(&format!(
                "{{\"timestamp\": {t}, \"input_length\": {input}, \"output_length\": 8, \"hash_ids\": {ids:?}}}\n"
            ));
            t += gap_ms;
        }
    }
    let prompt: u64 = (1..=turns)
        .map(|k| convs * ((sys + k * grow) * BLOCK + tail))
        .sum();
    let hit_blocks =
        (convs - 1) * sys + convs * (2..=turns).map(|k| sys + (k - 1) * grow).sum::<u64>();
    (text, (hit_blocks * BLOCK) as f64 / prompt as f64)
}

fn scenario(path: &str, replicas: u32, router: &str, extra: &str) -> String {
    format!(
        "seed = 1\n[deployment]\nmodel = \"llama-3.1-8b\"\ngpu = \"h100-sxm\"\ntp = 1\n\
         replicas = {replicas}\nrouter = \"{router}\"\n[scheduler]\nenable_prefix_caching = true\n\
         [workload]\n{extra}\n[workload.arrival]\nkind = \"trace\"\nformat = \"mooncake\"\npath = \"{path}\"\n"
    )
}

#[test]
fn one_replica_with_room_for_everything_reports_the_theoretical_hit_rate() {
    let (text, want) = multi_turn(40, 6, 4, 2, 500);
    let path = scratch("multi-turn.jsonl");
    std::fs::write(&path, text).unwrap();
    let s = run_toml(&scenario(path.to_str().unwrap(), 1, "round-robin", ""));
    assert_eq!(s.completed, 240);
    assert_eq!(s.preemptions, 0);
    let got = s.prefix_cache_hit_rate.expect("a hit rate with identities");
    eprintln!("generated trace: theoretical {want:.5}, simulated {got:.5}");
    assert!((got - want).abs() < 0.005, "{got} vs {want}");
    assert_eq!(s.replica_prefix_cache_hit_rates, Some(vec![Some(got)]));
}

/// The Mooncake excerpt's theoretical hit rate by a plain scan: each request hits the longest
/// prefix of its whole-512-token ids seen in any earlier request (at least one token left to
/// compute, as the engine must).
fn mooncake_scan(path: &str) -> (u64, u64) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut seen = HashSet::new();
    let (mut hit, mut prompt) = (0, 0);
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let input = v["input_length"].as_u64().unwrap();
        let ids: Vec<u64> = v["hash_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        let most = ((input - 1) / BLOCK) as usize;
        hit += ids
            .iter()
            .take(most)
            .take_while(|i| seen.contains(*i))
            .count() as u64
            * BLOCK;
        prompt += input;
        for (k, id) in ids.iter().enumerate() {
            if (k as u64 + 1) * BLOCK <= input {
                seen.insert(*id);
            }
        }
    }
    (hit, prompt)
}

#[test]
fn the_mooncake_excerpt_reproduces_its_scanned_hit_rate() {
    let path = "tests/data/traces/mooncake-conversation-head300.jsonl";
    let (hit, prompt) = mooncake_scan(path);
    // The excerpt's notes (tests/data/traces/README.md): 4,269,971 input tokens.
    assert_eq!(prompt, 4_269_971);
    let want = hit as f64 / prompt as f64;
    // One request at a time (the trace's t = 0 burst would otherwise compute shared blocks
    // side by side), on a replica that holds every block (8,490 ids x 512 tokens).
    let text = scenario(path, 1, "round-robin", "max_concurrency = 1")
        .replace("gpu = \"h100-sxm\"\ntp = 1", "gpu = \"h200-sxm\"\ntp = 8");
    let s = run_toml(&text);
    assert_eq!((s.completed, s.preemptions), (300, 0));
    let got = s.prefix_cache_hit_rate.unwrap();
    eprintln!("mooncake excerpt: scanned {want:.5} ({hit} of {prompt}), simulated {got:.5}");
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
}

/// A trace on one replica (`one`), and on four behind `prefix-aware` and `round-robin`.
struct Fleets {
    one: RunSummary,
    aware: RunSummary,
    rr: RunSummary,
}

fn fleets(name: &str, text: String) -> Fleets {
    let path = scratch(name);
    std::fs::write(&path, text).unwrap();
    let p = path.to_str().unwrap();
    Fleets {
        one: run_toml(&scenario(p, 1, "round-robin", "")),
        aware: run_toml(&scenario(p, 4, "prefix-aware", "")),
        rr: run_toml(&scenario(p, 4, "round-robin", "")),
    }
}

fn rate(s: &RunSummary) -> f64 {
    s.prefix_cache_hit_rate.expect("a hit rate with identities")
}

#[test]
fn prefix_aware_keeps_the_theoretical_hit_rate_of_conversations_on_four_replicas() {
    // 37 conversations of 8 turns without a shared system prompt (+3 blocks a turn), at
    // 40 and 100 requests/s. 37 is prime to 4, so that round-robin does not keep a
    // conversation on one replica by accident.
    for gap_ms in [25, 10] {
        let (text, want) = multi_turn(37, 8, 0, 3, gap_ms);
        let f = fleets(&format!("conversations-{gap_ms}.jsonl"), text);
        let (a, r) = (rate(&f.aware), rate(&f.rr));
        let per = f.aware.replica_prefix_cache_hit_rates.clone().unwrap();
        eprintln!(
            "{gap_ms} ms apart: theoretical {want:.4}; one replica {:.4} (mean TTFT {:.0} ms); \
             four: prefix-aware {a:.4} {per:?} ({:.0} ms), round-robin {r:.4} ({:.0} ms)",
            rate(&f.one),
            f.one.mean_ttft_ms,
            f.aware.mean_ttft_ms,
            f.rr.mean_ttft_ms
        );
        assert_eq!(f.aware.completed, 37 * 8);
        assert!((a - want).abs() < 0.02, "prefix-aware {a} vs {want}");
        assert!(a - r > 0.2, "prefix-aware {a} vs round-robin {r}");
        // Load counts: new conversations (no cached prefix anywhere) spread by queue and
        // KV, so every replica serves some, each keeping its conversations' histories.
        assert!(per.iter().all(|x| x.is_some_and(|x| x > 0.5)), "{per:?}");
        assert!(f.aware.mean_ttft_ms < f.rr.mean_ttft_ms);
    }
}

#[test]
fn prefix_aware_spreads_conversations_sharing_a_system_prompt_once_a_replica_is_overloaded() {
    // 41 conversations of 6 turns behind one 4-block system prompt, at 40 and 100
    // requests/s. llm-d's profile alone scores the prefix (weight 2, min-max normalized over
    // the replicas holding the first block) above queue and KV (weight 1 each, at most 1):
    // once one replica has cached the system prompt, every request went there, and the
    // fleet ran as one replica. SGLang's balance guard (more than 64 outstanding above the
    // least loaded and 1.5 x as many) sends requests to the least loaded once that replica
    // is overloaded; they cache the system prompt there, and the fleet spreads: every replica
    // serves, the hit rate stays near the theoretical one (each replica computes the system
    // prompt once, and a conversation moved computes its history again), and latencies fall
    // well below one replica's.
    for gap_ms in [25, 10] {
        let (text, want) = multi_turn(41, 6, 4, 2, gap_ms);
        let f = fleets(&format!("system-prompt-{gap_ms}.jsonl"), text);
        let (one, a, r) = (rate(&f.one), rate(&f.aware), rate(&f.rr));
        eprintln!(
            "{gap_ms} ms apart: theoretical {want:.4}; one replica {one:.4} ({:.0} ms); \
             four: prefix-aware {a:.4} {:?} ({:.0} ms), round-robin {r:.4} ({:.0} ms)",
            f.one.mean_ttft_ms,
            f.aware.replica_prefix_cache_hit_rates,
            f.aware.mean_ttft_ms,
            f.rr.mean_ttft_ms
        );
        assert!((one - want).abs() < 0.005, "{one} vs {want}");
        // Near: within 0.06 below (0.749 against 0.802 at 100 req/s, where the guard moves
        // the most conversations, each computing its history again on its new replica).
        assert!((a - want).abs() < 0.06, "prefix-aware {a} vs {want}");
        assert!(a - r > 0.2, "prefix-aware {a} vs round-robin {r}");
        let per = f.aware.replica_prefix_cache_hit_rates.unwrap();
        assert!(per.iter().all(|x| x.is_some_and(|x| x > 0.5)), "{per:?}");
        // Well below: under 0.6 of one replica's. The guard lets the replica holding the
        // system prompt run 64 requests ahead of the least loaded before it spreads, so the
        // gain shrinks as one replica's step gets faster (0.50 at 40 req/s on the BF16 GEMM
        // curve of vidur's 2024 rows, 0.55 on vLLM 0.14's kernel rows).
        assert!(
            f.aware.mean_ttft_ms < 0.6 * f.one.mean_ttft_ms,
            "prefix-aware {} ms against one replica {} ms",
            f.aware.mean_ttft_ms,
            f.one.mean_ttft_ms
        );
    }
}

#[test]
fn prefix_aware_balances_load_when_the_shared_prefix_is_a_small_share_of_the_prompt() {
    // 200 single requests 100 ms apart, each one shared 512-token block (a short system
    // prompt) then 8 blocks and a tail of its own: the best cached prefix covers
    // 512 / 4,708 = 11% of a prompt, below SGLang's cache threshold (0.3). Load balance
    // must win: every replica serves. (Scoring that prefix at llm-d's weight 2 sent every
    // request to the replicas holding the block, and a replica without it never got one.)
    let (text, _) = multi_turn(200, 1, 1, 8, 100);
    let f = fleets("weak-prefix.jsonl", text);
    let per = f.aware.replica_prefix_cache_hit_rates.clone().unwrap();
    eprintln!(
        "weak prefix: prefix-aware {:.4} {per:?} ({:.0} ms mean TTFT), round-robin {:.4} ({:.0} ms), one replica ({:.0} ms)",
        rate(&f.aware),
        f.aware.mean_ttft_ms,
        rate(&f.rr),
        f.rr.mean_ttft_ms,
        f.one.mean_ttft_ms
    );
    assert_eq!(f.aware.completed, 200);
    // Every replica admitted prompts, and after its first request hits the shared block.
    assert!(per.iter().all(|x| x.is_some_and(|x| x > 0.0)), "{per:?}");
    assert!(
        f.aware.mean_ttft_ms < 0.7 * f.one.mean_ttft_ms,
        "prefix-aware {} ms against one replica {} ms",
        f.aware.mean_ttft_ms,
        f.one.mean_ttft_ms
    );
}

/// A generated session workload: `sessions` sessions starting 250 ms apart, each of `turns`
/// turns 2 s apart behind one system prompt of `system` tokens, 300 new and 100 output tokens
/// a turn, block identities of 64 tokens.
fn sessions_toml(replicas: u32, router: &str, sessions: u64, turns: u64, system: u64) -> String {
    format!(
        "seed = 1\n[deployment]\nmodel = \"llama-3.1-8b\"\ngpu = \"h100-sxm\"\ntp = 1\n\
         replicas = {replicas}\nrouter = \"{router}\"\n[scheduler]\nenable_prefix_caching = true\n\
         [workload.arrival]\nkind = \"constant\"\nrate_per_s = 4\n[workload.sessions]\n\
         num_sessions = {sessions}\nsystem_prompt_tokens = {system}\n\
         turns = {{ kind = \"fixed\", tokens = {turns} }}\n\
         think_time_ms = {{ kind = \"fixed\", tokens = 2000 }}\n\
         new_tokens = {{ kind = \"fixed\", tokens = 300 }}\n\
         output_tokens = {{ kind = \"fixed\", tokens = 100 }}\n"
    )
}

/// The theoretical token hit rate of [`sessions_toml`]'s workload, in closed form: turn k
/// (1-based) sends input_k = system + 300 k + 100 (k - 1) tokens; the first turn of every
/// session but the first hits the system prompt's whole 64-token blocks, and turn k > 1 hits
/// the whole blocks of turn k - 1's prompt.
fn sessions_rate(sessions: u64, turns: u64, system: u64) -> f64 {
    let b = 64;
    let input = |k: u64| system + 300 * k + 100 * (k - 1);
    let prompt: u64 = sessions * (1..=turns).map(input).sum::<u64>();
    let hit = (sessions - 1) * (system / b * b)
        + sessions * (2..=turns).map(|k| input(k - 1) / b * b).sum::<u64>();
    hit as f64 / prompt as f64
}

#[test]
fn generated_sessions_reproduce_their_closed_form_hit_rate_on_one_replica() {
    for (sessions, turns, system) in [(60, 5, 1000), (40, 8, 0)] {
        let want = sessions_rate(sessions, turns, system);
        let s = run_toml(&sessions_toml(1, "round-robin", sessions, turns, system));
        assert_eq!((s.completed, s.preemptions), (sessions * turns, 0));
        let got = rate(&s);
        eprintln!("{sessions} sessions x {turns} turns, system {system}: closed form {want:.5}, simulated {got:.5}");
        assert!((got - want).abs() < 0.005, "{got} vs {want}");
    }
}

#[test]
fn session_affinity_keeps_sessions_on_their_replicas() {
    // 80 sessions of 6 turns behind one system prompt on four replicas.
    let want = sessions_rate(80, 6, 1000);
    let run = |router: &str| run_toml(&sessions_toml(4, router, 80, 6, 1000));
    let (sticky, rr, aware) = (
        run("session-affinity"),
        run("round-robin"),
        run("prefix-aware"),
    );
    let per = sticky.replica_prefix_cache_hit_rates.clone().unwrap();
    eprintln!(
        "closed form {want:.4}: session-affinity {:.4} {per:?} ({:.0} ms mean TTFT), round-robin {:.4} ({:.0} ms), prefix-aware {:.4} {:?} ({:.0} ms)",
        rate(&sticky), sticky.mean_ttft_ms, rate(&rr), rr.mean_ttft_ms,
        rate(&aware), aware.replica_prefix_cache_hit_rates, aware.mean_ttft_ms
    );
    assert!(
        (rate(&sticky) - want).abs() < 0.02,
        "{} vs {want}",
        rate(&sticky)
    );
    assert!(rate(&sticky) - rate(&rr) > 0.2);
    assert!(
        per.iter().all(|x| x.is_some_and(|x| x > 0.5)),
        "every replica serves sessions: {per:?}"
    );
}

#[test]
fn bad_session_settings_name_the_key() {
    let base = sessions_toml(1, "round-robin", 10, 2, 100);
    let cases = [
        (
            base.replace(
                "kind = \"constant\"\nrate_per_s = 4",
                "kind = \"trace\"\npath = \"x.csv\"",
            ),
            "workload.sessions: generates its own requests",
        ),
        (
            format!("{base}[workload.input]\nkind = \"fixed\"\ntokens = 5\n"),
            "workload.input: [workload.sessions] supplies",
        ),
        (
            base.replace("tokens = 2 }", "tokens = 0 }"),
            "workload.sessions.turns",
        ),
        (
            base.replace("num_sessions = 10\n", ""),
            "needs num_requests, duration_s or sessions.num_sessions",
        ),
        (
            base.replace(
                "num_sessions = 10\n",
                "num_sessions = 10\nsystem_prompts = 0\n",
            ),
            "workload.sessions.system_prompts: must be >= 1",
        ),
        (
            base.replace(
                "num_sessions = 10\n",
                "num_sessions = 10\nhash_block_tokens = 40\n",
            ),
            "must be a multiple of scheduler.block_size",
        ),
        (
            base.replace("num_sessions = 10\n", "num_sessions = 10\nturn = 3\n"),
            "unknown field `turn`",
        ),
    ];
    for (text, want) in cases {
        let e = servesim::scenario::Scenario::parse(&text, "s.toml", &[])
            .and_then(|s| s.resolve("s.toml"))
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}\nwanted: {want}");
    }
}

/// KV offloading (issue 32, Deliver 3): the multi-turn trace on one replica whose GPU cache
/// holds a few conversations (`gpu_memory_utilization` 0.29), with and
/// without `offload_gib` of host memory. (The GPU cache keeps the shared system prompt and
/// the latest turns; the 40 interleaved conversations revisit far more.)
fn small_gpu_cache(offload_gib: Option<f64>) -> RunSummary {
    let (text, _) = multi_turn(40, 6, 4, 2, 500);
    // One file per call: tests run in parallel.
    let path = scratch(&format!("multi-turn-offload-{offload_gib:?}.jsonl"));
    std::fs::write(&path, text).unwrap();
    let extra = offload_gib.map_or(String::new(), |g| format!("kv_offloading_size_gib = {g}\n"));
    let toml = scenario(path.to_str().unwrap(), 1, "round-robin", "")
        .replace("replicas = 1\n", &format!("replicas = 1\n{extra}"))
        + "[scheduler]\n";
    let toml = toml.replace(
        "[scheduler]\nenable_prefix_caching = true\n",
        "[scheduler]\nenable_prefix_caching = true\ngpu_memory_utilization = 0.29\n",
    );
    let toml = toml.trim_end_matches("[scheduler]\n").to_string();
    run_toml(&toml)
}

#[test]
fn a_cpu_tier_raises_the_hit_rate_of_a_small_gpu_cache_and_lowers_its_mean_ttft() {
    let (_, theoretical) = multi_turn(40, 6, 4, 2, 500);
    let gpu_only = small_gpu_cache(None);
    let tiered = small_gpu_cache(Some(64.0));
    let (g, t) = (
        gpu_only.prefix_cache_hit_rate.unwrap(),
        tiered.prefix_cache_hit_rate.unwrap(),
    );
    let (gpu, cpu) = (
        tiered.prefix_cache_hit_rate_gpu.unwrap(),
        tiered.prefix_cache_hit_rate_cpu.unwrap(),
    );
    eprintln!(
        "hit rate: GPU only {g:.4}; with 64 GiB CPU {t:.4} (GPU {gpu:.4} + CPU {cpu:.4}), \
         theoretical {theoretical:.4}; mean TTFT {:.2} -> {:.2} ms",
        gpu_only.mean_ttft_ms, tiered.mean_ttft_ms
    );
    assert_eq!((gpu_only.completed, tiered.completed), (240, 240));
    // The small cache loses most of the reuse; 64 GiB of host memory holds every block,
    // so the tiers together reach the unbounded cache's rate.
    assert!(g < theoretical - 0.2, "{g} vs {theoretical}");
    assert!((t - theoretical).abs() < 0.005, "{t} vs {theoretical}");
    assert!(((gpu + cpu) - t).abs() < 1e-12);
    assert!(cpu > 0.2, "{cpu}");
    assert!(tiered.mean_ttft_ms < 0.9 * gpu_only.mean_ttft_ms);
    // Without the setting, no tier is reported.
    assert!(gpu_only.prefix_cache_hit_rate_cpu.is_none());
    assert_eq!(
        tiered.replica_prefix_cache_hit_rates_cpu,
        Some(vec![Some(cpu)]),
        "one replica: its rate is the run's"
    );
}

#[test]
fn prompt_tokens_are_served_by_one_tier_or_computed() {
    // INV-10 (docs/invariants.md) at the run level: without preemption, every prompt token is
    // served by the GPU cache, loaded from the CPU tier, or computed, once; a tier too small
    // for all the blocks evicts (least recently used) and still adds up.
    for gib in [2.0, 16.0, 64.0] {
        let s = small_gpu_cache(Some(gib));
        assert_eq!(s.preemptions, 0);
        assert_eq!(
            s.prefill_tokens_computed + s.prefix_cache_hit_tokens,
            s.total_input_tokens,
            "{gib} GiB"
        );
        let rate = s.prefix_cache_hit_tokens as f64 / s.total_input_tokens as f64;
        assert!((rate - s.prefix_cache_hit_rate.unwrap()).abs() < 1e-12);
        eprintln!(
            "{gib} GiB: GPU {:.4} CPU {:.4}",
            s.prefix_cache_hit_rate_gpu.unwrap(),
            s.prefix_cache_hit_rate_cpu.unwrap()
        );
    }
}

/// One prompt of `n` tokens (512-token identities from `first_id` on, output 1 token) at
/// `t_ms`, as a Mooncake line.
fn prompt_line(t_ms: u64, n: u64, first_id: u64) -> String {
    let ids: Vec<u64> = (0..n.div_ceil(BLOCK)).map(|j| first_id + j).collect();
    format!(
        "{{\"timestamp\": {t_ms}, \"input_length\": {n}, \"output_length\": 1, \"hash_ids\": {ids:?}}}\n"
    )
}

/// TTFT of a prompt of `n` tokens sent a second time after two 100K-token prompts pushed it out
/// of the GPU cache, ms: (recomputed without a CPU tier, loaded from a 200 GiB one), with the
/// share of its tokens the CPU tier served. Prompts are 100 s apart (nothing overlaps), so
/// its TTFT is the run's TTFT total less that of the run without it.
fn ttft_by_tier(n: u64) -> (f64, f64, f64) {
    let mut lines = prompt_line(0, n, 1) + &prompt_line(100_000, 100_000, 1_000_000);
    lines += &prompt_line(200_000, 100_000, 2_000_000);
    let again = lines.clone() + &prompt_line(300_000, n, 1);
    let run = |text: &str, name: &str, offload: bool| {
        let path = scratch(name);
        std::fs::write(&path, text).unwrap();
        let mut toml = scenario(path.to_str().unwrap(), 1, "round-robin", "").replace(
            "[scheduler]\n",
            "[scheduler]\ngpu_memory_utilization = 0.45\n",
        );
        if offload {
            toml = toml.replace(
                "replicas = 1\n",
                "replicas = 1\nkv_offloading_size_gib = 200\n",
            );
        }
        run_toml(&toml)
    };
    let mut out = [0.0; 2];
    let mut cpu_share = 0.0;
    for (k, offload) in [false, true].into_iter().enumerate() {
        let base = run(&lines, &format!("tiers-{n}-{offload}-3.jsonl"), offload);
        let all = run(&again, &format!("tiers-{n}-{offload}-4.jsonl"), offload);
        assert_eq!(all.completed, 4);
        out[k] = 4.0 * all.mean_ttft_ms - 3.0 * base.mean_ttft_ms;
        if offload {
            // Nothing of the repeated prompt was left on the GPU: all its hits are CPU hits.
            assert_eq!(all.prefix_cache_hit_rate_gpu, Some(0.0));
            cpu_share = all.prefix_cache_hit_tokens as f64 / n as f64;
        }
    }
    (out[0], out[1], cpu_share)
}

/// docs/validation.md, "KV offloading: TTFT by tier": vLLM's single-request TTFT of
/// Llama-3.1-8B on an H100 recomputed vs loaded from CPU memory (blog.vllm.ai/2026/01/08/
/// kv-offloading-connector.html, figure 1, read off the chart), predicted by servesim with
/// no parameter set from it (the link's default comes from the blog's separate transfer
/// benchmark, figure 4). Out of sample.
#[test]
fn ttft_by_tier_against_vllms_offloading_blog() {
    // (prompt tokens, measured recompute ms, measured CPU load ms), chart readings.
    let measured = [
        (10_000, 260.0, 40.0),
        (50_000, 2_290.0, 160.0),
        (100_000, 6_850.0, 310.0),
    ];
    for (n, recompute, load) in measured {
        let (p_recompute, p_load, cpu_share) = ttft_by_tier(n);
        eprintln!(
            "{n} tokens: recompute {p_recompute:.0} ms (vLLM {recompute}), CPU load \
             {p_load:.1} ms (vLLM {load}), {cpu_share:.3} of the prompt from CPU"
        );
        assert!(cpu_share > 0.95);
        // The loaded prompt is several times faster, as measured (x6.5 to x22).
        assert!(p_load * 4.0 < p_recompute);
        // Within 25% of the measurement (chart readings: +-10 ms on the load line).
        for (p, m) in [(p_recompute, recompute), (p_load, load)] {
            assert!(
                (p / m - 1.0).abs() < 0.25,
                "{n}: predicted {p} vs measured {m}"
            );
        }
    }
}

#[test]
fn a_replica_given_no_traffic_has_no_hit_rate_not_zero() {
    // One request on two round-robin replicas: the second admits nothing, so it has no hit
    // rate (null in JSON), where a rate of 0 would read as a cache that missed.
    let (text, _) = multi_turn(1, 1, 2, 2, 500);
    let path = scratch("one-request.jsonl");
    std::fs::write(&path, text).unwrap();
    let s = run_toml(&scenario(path.to_str().unwrap(), 2, "round-robin", ""));
    assert_eq!(s.completed, 1);
    let per = s.replica_prefix_cache_hit_rates.clone().unwrap();
    assert_eq!(per.len(), 2, "{per:?}");
    assert!(per[0].is_some(), "{per:?}");
    assert_eq!(per[1], None, "{per:?}");
    let json = serde_json::to_value(&s).unwrap();
    assert!(
        json["replica_prefix_cache_hit_rates"][1].is_null(),
        "{json}"
    );
    assert!(
        json["replica_prefix_cache_hit_rates"][0].is_number(),
        "{json}"
    );
}
