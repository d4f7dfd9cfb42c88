//! Shared helpers of the end-to-end tests: where things are, and how to run the binary and tshark.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

pub use testkit::{shared_capture, workspace};

pub fn analyzer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce-analyzer"))
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("the command starts")
}

/// Every teaching sample capture (`samples/captures/*.pcapng`), in name order.
pub fn sample_captures() -> Vec<std::path::PathBuf> {
    let dir = workspace().join("samples/captures");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcapng"))
        .collect();
    files.sort();
    assert!(files.len() > 10, "the samples are in {}", dir.display());
    files
}

/// `report` of `capture` into a fresh directory, `args` before the capture: what it printed, its
/// summary.json, and the directory (removed when dropped).
pub fn report_of(capture: &Path, args: &[&str]) -> (String, Value, tempfile::TempDir) {
    let mut all: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    all.push(capture.as_os_str());
    testkit::report(analyzer(), &all)
}

/// `decode --json` of a file, one JSON value per frame.
pub fn analyzer_json(file: &Path) -> Vec<Value> {
    let out = run(analyzer().arg("decode").arg("--json").arg(file));
    assert!(
        out.status.success(),
        "roce-analyzer decode {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

pub fn require_tshark() {
    let ok = Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "tshark is not installed: run the README's test command (`cargo xtask test`), which installs it"
    );
}

/// tshark's fields per frame (first occurrence of each: the outer VLAN tag of a QinQ frame).
pub fn tshark_fields(file: &Path, decode_as: &[&str], fields: &[&str]) -> Vec<Vec<String>> {
    require_tshark();
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(file)
        .args(["-T", "fields", "-E", "occurrence=f", "-E", "separator=/t"]);
    for d in decode_as {
        cmd.args(["-d", d]);
    }
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = run(&mut cmd);
    assert!(
        out.status.success(),
        "tshark failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').map(String::from).collect())
        .collect()
}

pub use testkit::frames::{pfc_frame, v4_frame, v4_frame_on, v6_frame};

/// The rows of every `*.parquet` file under `dir` (in path order, so part-00000 first), each row a JSON
/// object of its columns: what the dataset and Spark tests compare with `decode --json` and `stats --json`.
pub fn parquet_rows(dir: &Path) -> Vec<serde_json::Map<String, Value>> {
    analyzer::output::tables::read_rows(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}
