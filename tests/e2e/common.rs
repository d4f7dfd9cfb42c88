//! Where things are, and how to run the binaries.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

pub use testkit::workspace;

/// `roce-analyzer`, built for these tests.
pub fn analyzer() -> Command {
    Command::new(end_to_end::binary("analyzer", "roce-analyzer"))
}

/// Runs `cmd` to its end.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("the command starts")
}

/// The rows of every Parquet file under `dir`, as JSON objects.
pub fn parquet_rows(dir: &Path) -> Vec<serde_json::Map<String, Value>> {
    analyzer::output::tables::read_rows(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}
