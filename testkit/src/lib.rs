//! Helpers every test suite of the workspace shares.
//!
//! The rule they enforce: a check that did not run says so where a person sees it. `cargo test` hides what a
//! passing test prints with `println!`/`eprintln!`, so [`not_run_here`] writes to the process's standard error
//! directly (which the harness does not capture) and appends the line to the file named by
//! `ROCETRACE_NOT_RUN_FILE`, which `cargo xtask test` sets and prints at the end of the run.
//!
//! The public captures of `../shared/captures` sit beside the repository on the project's machines and CI,
//! not in a clone from the project's public home (their licences differ from ours). Tests that use them go
//! through [`shared_captures`]: absent, the test says what it did not run and passes, unless
//! `ROCETRACE_REQUIRE_SHARED_CAPTURES=1` (set by `.ci/run`) makes their absence a failure.
#![warn(missing_docs)]

pub mod frames;
pub mod live;

use std::io::Write;
use std::path::{Path, PathBuf};

/// The variable that turns absent public captures into a failure.
pub const REQUIRE_SHARED: &str = "ROCETRACE_REQUIRE_SHARED_CAPTURES";
/// The file `cargo xtask test` collects the not-run lines in.
pub const NOT_RUN_FILE: &str = "ROCETRACE_NOT_RUN_FILE";

/// The workspace root.
///
/// Taken from the running test's `CARGO_MANIFEST_DIR` (cargo sets it for every test it runs) rather than from
/// the path testkit was compiled in: a build directory seeded from another checkout keeps testkit compiled
/// there, and the tests would then read that checkout's files instead of this one's.
pub fn workspace() -> PathBuf {
    let compiled_in = Path::new(env!("CARGO_MANIFEST_DIR"));
    let running = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    running
        .as_deref()
        .into_iter()
        .flat_map(Path::ancestors)
        .chain(compiled_in.ancestors())
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]"))
        })
        .unwrap_or(compiled_in)
        .to_path_buf()
}

/// A teaching capture of `samples/captures/` by its name without extension.
pub fn sample(name: &str) -> PathBuf {
    workspace().join(format!("samples/captures/{name}.pcapng"))
}

/// Writes `text` into `root/rel`, its directories made: one file of a fixture tree laid out like a host's
/// sysfs or proc.
pub fn put_file(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().expect("a file under root"))
        .expect("make the fixture's directory");
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
}

/// Says, visibly, that `what` did not run on this machine and why.
pub fn not_run_here(what: &str) {
    let line = format!("not run here: {what}\n");
    // Straight to fd 2: the test harness captures eprintln!, not the stderr handle.
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os(NOT_RUN_FILE) {
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            let _ = writeln!(std::io::stderr(), "cannot record in {path:?}: {e}");
        }
    }
}

/// The public captures' folder, or `None` (after saying which test did not run) when a clone has none.
/// With `ROCETRACE_REQUIRE_SHARED_CAPTURES=1` their absence panics instead.
pub fn shared_captures() -> Option<PathBuf> {
    let dir = workspace().join("../shared/captures");
    if dir.is_dir() {
        return Some(dir);
    }
    // The harness names each test's thread after the test.
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let why = format!(
        "{test}: the public captures are not beside this clone ({} is absent; they are not part of the \
         project's repository)",
        dir.display()
    );
    if std::env::var(REQUIRE_SHARED).is_ok_and(|v| v == "1") {
        panic!("{why}, and {REQUIRE_SHARED}=1 requires them");
    }
    not_run_here(&why);
    None
}

/// One public capture by file name, under the rule of [`shared_captures`]. A folder that is present but
/// lacks the file is a broken checkout and panics.
pub fn shared_capture(name: &str) -> Option<PathBuf> {
    let p = shared_captures()?.join(name);
    assert!(
        p.is_file(),
        "{} is missing from the public captures",
        p.display()
    );
    Some(p)
}

/// Runs `analyzer` (a `roce-analyzer` command, its binary found by the calling suite) as `report ARGS -o DIR`
/// into a fresh directory, and returns what it printed, its summary.json and the directory (removed when
/// dropped). Panics, with what the binary said, when the report fails: a test of a report has nothing to check
/// then.
pub fn report(
    mut analyzer: std::process::Command,
    args: &[&std::ffi::OsStr],
) -> (String, serde_json::Value, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let out = analyzer
        .arg("report")
        .args(args)
        .arg("-o")
        .arg(dir.path())
        .output()
        .expect("roce-analyzer starts");
    assert!(
        out.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = std::fs::read(dir.path().join("summary.json")).expect("summary.json written");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        serde_json::from_slice(&summary).expect("summary.json is JSON"),
        dir,
    )
}
