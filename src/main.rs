//! The `servesim` command line: parse flags, call the library, print errors with their chain,
//! set the exit code (0 ok; 2 bad input or usage; 1 anything else).

mod cli;
mod commands;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(exit_code(&err))
        }
    }
}

/// 2 when the error is the user's input (a servesim input error anywhere in the chain), else 1.
fn exit_code(err: &anyhow::Error) -> u8 {
    let input = err
        .chain()
        .filter_map(|c| c.downcast_ref::<servesim::Error>())
        .any(|e| e.is_input_error());
    if input {
        2
    } else {
        1
    }
}
