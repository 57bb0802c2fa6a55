//! Writes a sample cost workbook: `cargo run --example cost_workbook -- OUT.xlsx [--price USD]`.
//!
//! `--price` sets the $/GPU-hour of every plan (default 2.50); scripts/check-xlsx.sh uses the
//! output to check the workbook's formulas under LibreOffice.

use std::path::PathBuf;
use std::process::ExitCode;

use servesim::report::xlsx::{write_cost_workbook, CellValue, CostInputs, TableSheet};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut out: Option<PathBuf> = None;
    let mut price = 2.50;
    while let Some(a) = args.next() {
        if a == "--price" {
            match args.next().and_then(|v| v.parse::<f64>().ok()) {
                Some(p) if p.is_finite() && p >= 0.0 => price = p,
                _ => {
                    eprintln!("--price needs a non-negative number");
                    return ExitCode::from(2);
                }
            }
        } else if out.is_none() {
            out = Some(PathBuf::from(a));
        } else {
            eprintln!("usage: cost_workbook OUT.xlsx [--price USD_PER_GPU_HOUR]");
            return ExitCode::from(2);
        }
    }
    let Some(out) = out else {
        eprintln!("usage: cost_workbook OUT.xlsx [--price USD_PER_GPU_HOUR]");
        return ExitCode::from(2);
    };
    let plans = vec![
        CostInputs {
            label: "llama-3.1-70b tp4 x2 (chat SLO)".into(),
            gpu_name: "H100 SXM".into(),
            gpus: 8,
            price_usd_per_gpu_hour: price,
            output_tokens_per_s: 5200.0,
            input_tokens_per_s: 15600.0,
            utilization: 0.65,
        },
        CostInputs {
            label: "llama-3.1-8b tp1 x4 (batch)".into(),
            gpu_name: "H200".into(),
            gpus: 4,
            price_usd_per_gpu_hour: price,
            output_tokens_per_s: 21000.0,
            input_tokens_per_s: 42000.0,
            utilization: 0.9,
        },
        CostInputs {
            label: "infeasible plan (no throughput)".into(),
            gpu_name: "L4".into(),
            gpus: 1,
            price_usd_per_gpu_hour: price,
            output_tokens_per_s: 0.0,
            input_tokens_per_s: 0.0,
            utilization: 0.5,
        },
    ];
    let sweep = TableSheet {
        name: "Sweep".into(),
        columns: vec![
            "rate (req/s)".into(),
            "output tokens/s".into(),
            "p99 TTFT (ms)".into(),
        ],
        rows: (1..=8)
            .map(|i| {
                let r = f64::from(i) * 2.0;
                vec![
                    CellValue::Number(r),
                    CellValue::Number(r * 240.0),
                    CellValue::Number(300.0 + 40.0 * r * r),
                ]
            })
            .collect(),
    };
    match write_cost_workbook(&out, &plans, &[sweep]) {
        Ok(()) => {
            println!("{}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
