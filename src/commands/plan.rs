//! `servesim plan`: the cheapest deployment that meets the SLOs, and its report folder.

use std::io::IsTerminal;

use anyhow::{Context, Result};

use crate::cli::{Format, PlanArgs};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use servesim::plan::{plan_with_progress, shell_word, Progress};
use servesim::report::plan::{write_plan_report, write_plan_text};
use servesim::report::{CsvExporter, Exporter, JsonExporter};
use servesim::scenario::Scenario;

const DEFAULT_PLAN: &str = include_str!("../../scenarios/chat-slo.toml");
const DEFAULT_ORIGIN: &str = "<embedded scenarios/chat-slo.toml>";

/// Runs `servesim plan`.
pub fn run(args: &PlanArgs) -> Result<()> {
    // A bad --price fails before the report folder is started.
    if let Some(p) = args.price {
        servesim::scenario::check_gpu_price(p)
            .map_err(|why| servesim::Error::config("--price", "price_usd_per_gpu_hour", why))?;
    }
    let report = super::begin_out_dir("--out", &args.out)?;
    let set = super::overrides(&args.set, args.no_fast_forward);
    let (mut sc, origin) = match &args.scenario {
        Some(p) => (Scenario::load(Some(p), &set)?, p.display().to_string()),
        None => (
            Scenario::parse(DEFAULT_PLAN, DEFAULT_ORIGIN, &set)?,
            DEFAULT_ORIGIN.to_string(),
        ),
    };
    if let Some(p) = args.price {
        sc.pricing.price_usd_per_gpu_hour = Some(p);
    }
    if let Some(seed) = args.seed {
        sc.seed = seed;
    }
    let bar = Bar::new(if sc.name.is_empty() {
        &origin
    } else {
        &sc.name
    });
    let out = plan_with_progress(&sc, &origin, &bar);
    bar.0.finish_and_clear();
    let mut out = out?;
    // The re-run lines must reproduce this plan's scenario: the shipped file for the embedded
    // one, and the user's own --set and --seed.
    let p = &mut out.plan;
    let colocated = p.detail.as_mut().and_then(|d| d.run_command.as_mut());
    let xpyd = p
        .disaggregated
        .as_mut()
        .and_then(|d| d.run_command.as_mut());
    let recommended = p
        .recommendation
        .as_mut()
        .and_then(|r| r.run_command.as_mut());
    let period = p
        .week
        .iter_mut()
        .flat_map(|w| w.candidates.iter_mut())
        .filter_map(|c| c.static_run_command.as_mut());
    for cmd in colocated
        .into_iter()
        .chain(xpyd)
        .chain(recommended)
        .chain(period)
    {
        *cmd = rerun_line(cmd, &origin, &set);
    }
    let mut text = Vec::new();
    match args.format {
        Format::Json => JsonExporter::new("plan.json").write(&out.plan, &mut text)?,
        Format::Csv => CsvExporter::new("candidates.csv").write(&out.plan, &mut text)?,
        Format::Table => write_plan_text(&mut text, &sc, &out.plan)?,
    }
    // The report first, swapped in whole: a standard output whose reader went away cannot
    // lose it, and an interruption leaves the previous report, not a mix of two.
    write_plan_report(report.path(), &sc, &out)
        .with_context(|| format!("writing the report folder {}", args.out.display()))?;
    let dir = report
        .commit()
        .with_context(|| format!("putting the report folder {} in place", args.out.display()))?;
    note!("wrote {}", dir.join("index.html").display());
    super::to_stdout(&text)?;
    // A plan with nothing to recommend is written whole but is no answer: exit 1 (not 2:
    // the input is valid, the target is out of the search space's reach), so scripts and CI
    // do not read it as a deployment.
    if out.plan.recommendation.is_none() {
        // An SLO below the physical floor is the whole answer: say it here too.
        let floor = out
            .plan
            .slo_below_floor
            .as_deref()
            .map_or(String::new(), |f| format!(": {}", f.replace('\n', "; ")));
        anyhow::bail!(
            "no candidate meets the SLOs at {:.2} {} within the search space{floor}; the report in {} says what stops each one",
            out.plan.target_rate_per_s,
            out.plan.rate_unit.as_deref().unwrap_or("req/s"),
            dir.display()
        );
    }
    Ok(())
}

/// `cmd` (`servesim run ORIGIN --set ... --seed N`) naming a file a user can run, with the
/// plan's own `--set` values (`--no-fast-forward` among them) before the deployment's, which
/// win. The seed is the plan's already (`--seed` or the scenario's).
fn rerun_line(cmd: &str, origin: &str, set: &[String]) -> String {
    let Some(rest) = cmd.strip_prefix(&format!("servesim run {origin}")) else {
        return cmd.to_string();
    };
    let file = if origin == DEFAULT_ORIGIN {
        "scenarios/chat-slo.toml"
    } else {
        origin
    };
    let mut line = format!("servesim run {}", shell_word(file));
    for s in set {
        line.push_str(&format!(" --set {}", shell_word(s)));
    }
    line.push_str(rest);
    line
}

/// The plan's progress bar on stderr, drawn only when stderr is a terminal.
struct Bar(ProgressBar);

impl Bar {
    fn new(name: &str) -> Self {
        let bar = ProgressBar::new(0);
        if std::io::stderr().is_terminal() {
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} steps: {prefix}: {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.set_prefix(format!("planning {name}"));
            bar.enable_steady_tick(std::time::Duration::from_millis(200));
        } else {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        Bar(bar)
    }
}

impl Progress for Bar {
    fn add(&self, n: u64) {
        self.0.inc_length(n);
    }
    fn done(&self, n: u64) {
        self.0.inc(n);
    }
    fn stage(&self, what: &str) {
        self.0.set_message(what.to_string());
    }
}
