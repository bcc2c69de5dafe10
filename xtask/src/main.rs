//! Developer and CI tasks for the mcp-gateway workspace: `cargo xtask <task>`.
//!
//! - `test`: every check CI runs, in order, stopping at the first failure.

use std::process::ExitCode;

mod layering;
mod test;

const USAGE: &str = "usage: cargo xtask <task>

tasks:
  test    fmt, clippy, layering check, all tests, docs (what CI runs)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") if args.len() == 1 => test::run(),
        Some("help" | "--help" | "-h") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}
