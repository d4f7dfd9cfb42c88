//! `cargo xtask test`: the one command CI and a newcomer run. It installs what a fresh Debian machine lacks,
//! then runs formatting, lints, every test, the tracer's privileged tests and short fuzz runs, failing on the
//! first step that fails, and ends by saying which checks this machine could not run.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::shell::{cargo, is_root, sh};
use crate::workspace::target_dir;
use crate::{fuzz_task, install};

/// Tests append a line here for each check this machine cannot run (`testkit::not_run_here`), because
/// `cargo test` hides the output of tests that pass; the test command prints the file at the end.
fn not_run_here_file() -> PathBuf {
    target_dir().join("tmp").join("not-run-here.txt")
}

pub fn run(args: &[String]) -> Result<()> {
    let mut install = true;
    let mut fuzz_seconds = 15u64;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--no-install" => install = false,
            "--fuzz-seconds" => {
                fuzz_seconds = it
                    .next()
                    .context("--fuzz-seconds needs a number")?
                    .parse()
                    .context("--fuzz-seconds needs a number")?
            }
            other => bail!("unknown option {other:?} for test"),
        }
    }
    if install {
        install::ensure_all()?;
    }
    sh(cargo().args(["fmt", "--all", "--check"]))?;
    sh(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    let not_run = not_run_here_file();
    // A missing file is the expected case; any other problem shows up when the tests write it.
    let _ = std::fs::remove_file(&not_run);
    // The tracer's privileged tests wait for their own step, right after.
    sh(cargo()
        .args(["test", "--workspace", "--no-fail-fast"])
        .env("ROCETRACE_NOT_RUN_FILE", &not_run)
        .env(PRIVILEGED, "later"))?;
    privileged_tests(&not_run)?;
    // A missing file means every check ran.
    let not_run = std::fs::read_to_string(&not_run).unwrap_or_default();
    if fuzz_seconds > 0 {
        fuzz_task::fuzz(fuzz_seconds, &[])?;
    }
    eprint!("{}", ending(&not_run));
    Ok(())
}

/// The last lines of a run that passed, from the checks the tests said they could not run: a run that
/// left checks out must not end like a full pass, so its last line counts them and points at their list.
fn ending(not_run: &str) -> String {
    let lines: Vec<&str> = not_run.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return "xtask: every check ran on this machine\nxtask: every step passed\n".to_owned();
    }
    let mut s =
        "xtask: checks this machine cannot run (the tests ran everything else):\n".to_owned();
    for line in &lines {
        s.push_str(&format!("  - {line}\n"));
    }
    let n = lines.len();
    let checks = if n == 1 { "check" } else { "checks" };
    s.push_str(&format!(
        "xtask: every step passed, but {n} {checks} did not run here (listed above): not a full pass\n"
    ));
    s
}

/// How the tracer's privileged tests behave (see `tracer/tests/common`): `later` or `required`.
const PRIVILEGED: &str = "ROCETRACE_PRIVILEGED";

/// The tracer's tests that need root (network namespaces, captures, eBPF), as aya runs its integration
/// tests: in a step of their own, as root. A root xtask runs them directly; otherwise cargo runs each test
/// binary through `sudo -E`, so that only the tests run as root, not the build. Without root they fail.
fn privileged_tests(not_run: &Path) -> Result<()> {
    // The tracer's own suite, and the end-to-end tests that capture live (the module `live` of end-to-end's
    // test binary; the rest of that binary ran in the workspace step).
    for args in [
        &["test", "-p", "tracer", "--tests", "--no-fail-fast"][..],
        &[
            "test",
            "-p",
            "end-to-end",
            "--test",
            "e2e",
            "--no-fail-fast",
            "--",
            "live::",
        ],
    ] {
        privileged_step(args, not_run)?;
    }
    Ok(())
}

fn privileged_step(args: &[&str], not_run: &Path) -> Result<()> {
    let mut cmd = cargo();
    cmd.args(args);
    if !is_root() {
        let sudo = Command::new("sudo").arg("-V").output();
        if !sudo.is_ok_and(|o| o.status.success()) {
            // Said where every other check that did not run is said, not a failure of the whole run.
            let line = "the tracer's privileged tests (network namespaces, captures, eBPF): xtask is not \
                        root and sudo is missing; run `cargo xtask test` as root\n";
            std::fs::create_dir_all(not_run.parent().unwrap_or(Path::new(".")))?;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(not_run)?;
            std::io::Write::write_all(&mut f, line.as_bytes())?;
            return Ok(());
        }
        cmd.args(["--config", "target.'cfg(all())'.runner = 'sudo -E'"]);
    }
    sh(cmd
        .env("ROCETRACE_NOT_RUN_FILE", not_run)
        .env(PRIVILEGED, "required"))
}

#[cfg(test)]
mod tests {
    use super::ending;

    #[test]
    fn a_full_run_ends_as_a_full_pass() {
        assert_eq!(
            ending(""),
            "xtask: every check ran on this machine\nxtask: every step passed\n"
        );
    }

    #[test]
    fn a_run_that_left_checks_out_says_how_many_last() {
        let text = ending(
            "the tracer's privileged tests (...): xtask is not root and sudo is missing\nspark: no java\n",
        );
        let last = text.lines().last().unwrap();
        assert_eq!(
            last,
            "xtask: every step passed, but 2 checks did not run here (listed above): not a full pass"
        );
        assert!(text.contains("  - spark: no java\n"), "{text}");
        assert!(text.contains("  - the tracer's privileged tests"), "{text}");
        assert!(
            ending("one\n")
                .ends_with("but 1 check did not run here (listed above): not a full pass\n")
        );
    }
}
