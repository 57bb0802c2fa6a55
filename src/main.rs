//! The `servesim` command line: parse flags, call the library, print errors with their chain,
//! set the exit code (0 ok; 2 bad input or usage; 1 anything else).

mod cli;
mod commands;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output went away (`servesim validate | head`): stop quietly, as
        // a Unix filter does; nothing is lost that anyone was reading.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            // A closed standard error must not turn the error into a panic.
            let mut stderr = std::io::stderr().lock();
            let _ = writeln!(stderr, "error: {err}");
            for cause in err.chain().skip(1) {
                let _ = writeln!(stderr, "  caused by: {cause}");
            }
            ExitCode::from(exit_code(&err))
        }
    }
}

/// Whether the error is a write to a closed pipe (standard output read by `head`, say).
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        let io = match c.downcast_ref::<servesim::Error>() {
            Some(servesim::Error::Io { err, .. }) => Some(err),
            _ => c.downcast_ref::<std::io::Error>(),
        };
        io.is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_pipe_is_a_quiet_stop_and_other_io_errors_are_not() {
        let pipe = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(is_broken_pipe(&pipe));
        assert!(is_broken_pipe(&pipe.context("writing the table")));
        let exporter = anyhow::Error::new(servesim::Error::io(
            "summary.json",
            std::io::Error::from(std::io::ErrorKind::BrokenPipe),
        ));
        assert!(is_broken_pipe(&exporter));
        let denied = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        assert!(!is_broken_pipe(&denied));
        assert_eq!(exit_code(&denied), 1);
    }
}
