//! `cargo xtask samples`: regenerates every committed capture from its generator, byte for byte.

use std::fs::File;
use std::io::BufWriter;

use anyhow::{Context, Result};

use crate::workspace::root;

pub fn run() -> Result<()> {
    let dir = root().join("samples").join("corpus");
    std::fs::create_dir_all(&dir)?;
    let ng = dir.join("corpus.pcapng");
    let n = samples::corpus::write_pcapng(BufWriter::new(File::create(&ng)?))
        .with_context(|| format!("writing {}", ng.display()))?;
    eprintln!("xtask: wrote {} ({n} frames)", ng.display());
    let pcap = dir.join("corpus.pcap");
    let n = samples::corpus::write_pcap(BufWriter::new(File::create(&pcap)?))
        .with_context(|| format!("writing {}", pcap.display()))?;
    eprintln!("xtask: wrote {} ({n} frames)", pcap.display());

    // The teaching samples: one capture and one truth file per scenario.
    let scenarios = root().join("samples").join("scenarios");
    let out = root().join("samples").join("captures");
    for path in samples::sim::scenario_files(&scenarios)
        .with_context(|| format!("listing {}", scenarios.display()))?
    {
        let w = samples::sim::write_sample(&path, &out)
            .with_context(|| format!("simulating {}", path.display()))?;
        let files: Vec<String> = w.captures.iter().map(|p| p.display().to_string()).collect();
        eprintln!(
            "xtask: wrote {} ({} frames)",
            files.join(", "),
            w.truth.totals.captured_frames
        );
    }
    Ok(())
}
