//! `cargo xtask fuzz`: the fuzz targets on their committed seeds, for as long as asked.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::shell::sh;
use crate::workspace::root;

pub fn run(args: &[String]) -> Result<()> {
    let (seconds, targets) = parse(args)?;
    fuzz(seconds, &targets)
}

fn parse(args: &[String]) -> Result<(u64, Vec<String>)> {
    let mut seconds = 20;
    let mut targets = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--seconds" {
            seconds = it
                .next()
                .context("--seconds needs a number")?
                .parse()
                .context("--seconds needs a number")?;
        } else {
            targets.push(a.clone());
        }
    }
    Ok((seconds, targets))
}

/// Runs each fuzz target for `seconds` on the committed seed corpus (copied to a scratch corpus, so runs
/// never dirty the work tree). cargo-fuzz needs the nightly toolchain; `install` checks both.
pub fn fuzz(seconds: u64, only: &[String]) -> Result<()> {
    let fuzz_dir = root().join("fuzz");
    let out = Command::new("cargo")
        .args(["+nightly", "fuzz", "list"])
        .current_dir(&fuzz_dir)
        .output()
        .context("running cargo +nightly fuzz list")?;
    if !out.status.success() {
        bail!(
            "cargo +nightly fuzz list failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let targets: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|t| !t.is_empty() && (only.is_empty() || only.iter().any(|o| o == t)))
        .map(String::from)
        .collect();
    if targets.is_empty() {
        bail!("no fuzz targets to run");
    }
    // Fuzz builds use nightly and sanitizer flags: keep them out of the main target directory.
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|d| d.with_file_name("fuzz-target"))
        .unwrap_or_else(|| fuzz_dir.join("target"));
    build_fuzz_targets(&fuzz_dir, &target_dir)?;
    let scratch = std::env::temp_dir().join("rocetrace-fuzz-corpus");
    for t in &targets {
        let seeds = fuzz_dir.join("seeds").join(t);
        let corpus = scratch.join(t);
        std::fs::create_dir_all(&corpus)?;
        if seeds.is_dir() {
            for e in std::fs::read_dir(&seeds)? {
                let e = e?;
                std::fs::copy(e.path(), corpus.join(e.file_name()))?;
            }
        }
        sh(Command::new("cargo")
            .args(["+nightly", "fuzz", "run", t])
            .arg(&corpus)
            .args(["--", &format!("-max_total_time={seconds}")])
            .env("CARGO_TARGET_DIR", &target_dir)
            .current_dir(&fuzz_dir))?;
    }
    Ok(())
}

/// Builds every fuzz target in one cargo run before any of them runs, retrying once: CI once lost a run to the
/// linker dying of SIGBUS while linking the second target (a transient of the machine, e.g. memory or disk
/// pressure, not of our code); a second failure is real and stops the run with the free space shown.
fn build_fuzz_targets(fuzz_dir: &Path, target_dir: &Path) -> Result<()> {
    let build = || {
        sh(Command::new("cargo")
            .args(["+nightly", "fuzz", "build"])
            .env("CARGO_TARGET_DIR", target_dir)
            .current_dir(fuzz_dir))
    };
    if let Err(first) = build() {
        eprintln!("xtask: building the fuzz targets failed ({first:#}); trying once more");
        let _ = Command::new("df").arg("-h").arg(fuzz_dir).status();
        build().context("building the fuzz targets failed twice")?;
    }
    Ok(())
}
