//! The loss-free limit, with a faster sender than tcpreplay: `tracer/examples/blast` sends the corpus
//! replay's frames through an AF_PACKET socket, each engine first flat out, and only when that loses frames,
//! a bisection on the paced rate.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::rig::{Netns, rx_packets, start_capture_with, stop_capture};

/// Frames per trial of the loss-free search: a few seconds at the rates reached here.
pub const BLAST_FRAMES: u64 = 3_000_000;
/// Trials of the bisection when the fastest sender causes loss.
const BLAST_STEPS: usize = 6;

/// One trial of an engine against the blasting sender.
pub struct BlastTrial {
    /// What was measured: the engine, and its options when they matter.
    pub label: String,
    /// The rate asked for, over all senders (`None`: as fast as the socket takes frames).
    pub asked: Option<f64>,
    /// What the senders reached together.
    pub rate: f64,
    /// Frames the veth delivered to the tracer's side (`vb`'s receive counter): what the capture could see.
    pub delivered: u64,
    pub captured: u64,
    pub dropped: u64,
}

impl BlastTrial {
    pub fn lossless(&self) -> bool {
        self.dropped == 0 && self.captured >= self.delivered
    }
}

/// What a search for the loss-free limit runs.
pub struct Setup<'a> {
    pub tracer: &'a Path,
    pub blast: &'a Path,
    pub replay: &'a Path,
    pub dir: &'a Path,
    pub engine: &'static str,
    /// More options for the tracer.
    pub extra: &'a [&'a str],
    /// Transmit and receive queues of each end of the veth pair.
    pub queues: u32,
    /// One sender per entry, pinned to that CPU when given; they share the frames and the rate equally.
    pub senders: &'a [Option<usize>],
    pub label: String,
}

/// Captures `BLAST_FRAMES` frames of the replay sent by the blast example (in the sender's namespace, at
/// `rate` or flat out, split among the senders) and counts what arrived, what was written and what was
/// reported lost.
fn blast_trial(setup: &Setup<'_>, rate: Option<f64>) -> Result<BlastTrial> {
    let ns = Netns::with_queues(setup.queues)?;
    let out = setup.dir.join(format!("blast-{}.pcapng", setup.engine));
    let child = start_capture_with(
        &ns,
        setup.tracer,
        setup.engine,
        setup.extra,
        &out,
        setup.dir,
    )?;
    let before = rx_packets(&ns)?;
    let n = setup.senders.len().max(1) as u64;
    let mut running = Vec::new();
    for cpu in setup.senders {
        let mut send = match cpu {
            Some(c) => {
                let mut t = ns.sender_cmd("taskset");
                t.args(["-c", &c.to_string()]).arg(setup.blast);
                t
            }
            None => ns.sender_cmd(&setup.blast.to_string_lossy()),
        };
        send.arg("va")
            .arg(setup.replay)
            .arg((BLAST_FRAMES / n).to_string());
        if let Some(r) = rate {
            send.arg(format!("{:.0}", r / n as f64));
        }
        running.push(send.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?);
    }
    let mut seconds: f64 = 0.0;
    for child in running {
        let sent = child.wait_with_output()?;
        if !sent.status.success() {
            bail!("blast failed: {}", String::from_utf8_lossy(&sent.stderr));
        }
        let text = String::from_utf8_lossy(&sent.stdout);
        let s: f64 = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("seconds="))
            .and_then(|v| v.parse().ok())
            .context("blast's output")?;
        seconds = seconds.max(s);
    }
    let delivered = rx_packets(&ns)? - before;
    // The capture's own queues drain before the stop.
    std::thread::sleep(Duration::from_millis(1500));
    let (captured, dropped) = stop_capture(child, &out)?;
    Ok(BlastTrial {
        label: setup.label.clone(),
        asked: rate,
        rate: (BLAST_FRAMES / n * n) as f64 / seconds.max(1e-9),
        delivered,
        captured,
        dropped,
    })
}

/// Flat out first; only if that loses frames, a bisection on the paced rate for the highest one without
/// loss. Every trial is returned, the flat-out one first.
pub fn search(setup: &Setup<'_>) -> Result<Vec<BlastTrial>> {
    let flat = blast_trial(setup, None)?;
    let (mut low, mut high) = (0.0, flat.rate);
    let lossy = !flat.lossless();
    let mut out = vec![flat];
    if lossy {
        for _ in 0..BLAST_STEPS {
            let mid = (low + high) / 2.0;
            let t = blast_trial(setup, Some(mid))?;
            if t.lossless() {
                low = mid;
            } else {
                high = mid;
            }
            out.push(t);
        }
    }
    Ok(out)
}

/// The highest rate of `trials` without loss, and whether that was the sender's fastest (flat out).
pub fn best(trials: &[&BlastTrial]) -> (f64, bool) {
    let best = trials
        .iter()
        .filter(|t| t.lossless())
        .map(|t| t.rate)
        .fold(0.0, f64::max);
    let flat_lossless = trials
        .iter()
        .find(|t| t.asked.is_none())
        .is_some_and(|t| t.lossless());
    (best, flat_lossless)
}

/// Each engine against one blast sender.
pub fn loss_free_limits(
    tracer: &Path,
    blast: &Path,
    replay: &Path,
    dir: &Path,
) -> Result<Vec<BlastTrial>> {
    let mut out = Vec::new();
    for engine in ["pcap", "ebpf"] {
        eprintln!("xtask: loss-free limit, {engine} engine");
        out.extend(search(&Setup {
            tracer,
            blast,
            replay,
            dir,
            engine,
            extra: &[],
            queues: 1,
            senders: &[None],
            label: engine.to_string(),
        })?);
    }
    Ok(out)
}

/// The table rows of `trials`.
pub fn rows(trials: &[BlastTrial]) -> String {
    let mut s = String::new();
    for t in trials {
        s.push_str(&format!(
            "| {} | {} | {:.2} M frames/s | {} | {} | {} | {} | {} |\n",
            t.label,
            t.asked
                .map_or("flat out".to_string(), |r| format!("{:.2} M/s", r / 1e6)),
            t.rate / 1e6,
            t.delivered,
            t.captured,
            t.dropped,
            t.delivered.saturating_sub(t.captured + t.dropped),
            if t.lossless() { "yes" } else { "no" }
        ));
    }
    s
}

pub fn render(trials: &[BlastTrial]) -> String {
    let mut s = format!(
        "\n**Loss-free limit, with a faster sender**: `tracer/examples/blast` sends the corpus replay's \
         frames from the sender's namespace through an AF_PACKET socket, {BLAST_FRAMES} per trial in \
         batches of 64 per `sendmmsg`, past the qdisc; each engine first flat out, and only when that loses \
         frames, a bisection on the paced rate. Delivered is `vb`'s receive counter: what reached the \
         capture point.\n\n{HEADER}"
    );
    s.push_str(&rows(trials));
    for engine in ["pcap", "ebpf"] {
        let mine: Vec<&BlastTrial> = trials.iter().filter(|t| t.label == engine).collect();
        let (best, flat_lossless) = best(&mine);
        s.push_str(&format!(
            "\n{engine}: {}.",
            if flat_lossless {
                format!(
                    "no loss at the fastest this sender goes with it attached, {:.2} M frames/s; its limit is higher",
                    best / 1e6
                )
            } else {
                format!("highest rate without loss {:.2} M frames/s", best / 1e6)
            }
        ));
    }
    s.push('\n');
    s
}

/// The head of the trials' table.
pub const HEADER: &str = "| engine | rate asked | sender rate | delivered | captured | reported dropped | \
    unaccounted | lossless |\n|---|---:|---:|---:|---:|---:|---:|---|\n";
