//! Writes a sample cost workbook: `cargo run --example cost_workbook -- OUT.xlsx`.
//!
//! The sample model (`servesim::report::xlsx::sample_model`): three candidates on two GPU
//! types; scripts/check-xlsx.sh checks its formulas under LibreOffice.

use std::path::PathBuf;
use std::process::ExitCode;

use servesim::report::xlsx::{sample_model, write_cost_workbook};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(out), None) = (args.next().map(PathBuf::from), args.next()) else {
        eprintln!("usage: cost_workbook OUT.xlsx");
        return ExitCode::from(2);
    };
    match write_cost_workbook(&out, &sample_model(), &[]) {
        Ok(()) => {
            println!("wrote {}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
