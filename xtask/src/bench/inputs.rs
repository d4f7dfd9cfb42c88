//! What the analyzer benches run on: the release analyzer, and the bulk capture, generated once under the
//! target directory and kept for later runs (generating 5 M frames takes longer than measuring them).

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::Command;

use anyhow::Result;
use samples::bulk::{self, BulkSpec};

use crate::shell::sh;
use crate::workspace::target_dir;

/// The analyzer as users run it: the release binary, plus whatever `extra` cargo arguments add.
pub fn build_release_analyzer(extra: &[&str]) -> Result<()> {
    sh(Command::new("cargo")
        .args([
            "build",
            "--release",
            "-p",
            "analyzer",
            "--bin",
            "roce-analyzer",
        ])
        .args(extra))
}

/// The release analyzer [`build_release_analyzer`] built.
pub fn release_analyzer() -> PathBuf {
    target_dir().join("release").join("roce-analyzer")
}

/// The bulk capture of `spec` under the target's bench directory, generated once and kept for later runs.
pub fn bulk_capture(spec: &BulkSpec) -> Result<PathBuf> {
    let dir = target_dir().join("bench");
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(format!("bulk-{}.pcap", spec.frames));
    if !file.exists() {
        eprintln!(
            "xtask: generating {} ({} frames)",
            file.display(),
            spec.frames
        );
        let tmp = file.with_extension("tmp");
        let counts = bulk::write(BufWriter::with_capacity(1 << 20, File::create(&tmp)?), spec)?;
        std::fs::rename(&tmp, &file)?;
        eprintln!("xtask: wrote {counts:?}");
    }
    Ok(file)
}
