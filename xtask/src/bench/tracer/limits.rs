//! The loss-free limit, with a faster sender than tcpreplay: `tracer/examples/blast` sends the corpus
//! replay's frames through an AF_PACKET socket, each engine first flat out, and only when that loses frames,
//! a bisection on the paced rate.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::rig::{Netns, rx_packets, start_capture, stop_capture};

/// Frames per trial of the loss-free search: a few seconds at the rates reached here.
const BLAST_FRAMES: u64 = 3_000_000;
/// Trials of the bisection when the fastest sender causes loss.
const BLAST_STEPS: usize = 6;

/// One trial of an engine against the blasting sender.
pub struct BlastTrial {
    engine: &'static str,
    /// The rate asked for (`None`: as fast as the socket takes frames).
    asked: Option<f64>,
    /// What the sender reached.
    rate: f64,
    /// Frames the veth delivered to the tracer's side (`vb`'s receive counter): what the capture could see.
    delivered: u64,
    captured: u64,
    dropped: u64,
}

impl BlastTrial {
    fn lossless(&self) -> bool {
        self.dropped == 0 && self.captured >= self.delivered
    }
}

/// Captures `BLAST_FRAMES` frames of `replay` sent by the blast example (in the sender's namespace, at
/// `rate` or flat out) with `engine`, and counts what arrived, what was written and what was reported lost.
fn blast_trial(
    tracer: &Path,
    blast: &Path,
    replay: &Path,
    dir: &Path,
    engine: &'static str,
    rate: Option<f64>,
) -> Result<BlastTrial> {
    let ns = Netns::new()?;
    let out = dir.join(format!("blast-{engine}.pcapng"));
    let child = start_capture(&ns, tracer, engine, &out, dir)?;
    let before = rx_packets(&ns)?;
    let mut send = ns.sender_cmd(&blast.to_string_lossy());
    send.arg("va").arg(replay).arg(BLAST_FRAMES.to_string());
    if let Some(r) = rate {
        send.arg(format!("{r:.0}"));
    }
    let sent = send.output()?;
    if !sent.status.success() {
        bail!("blast failed: {}", String::from_utf8_lossy(&sent.stderr));
    }
    let text = String::from_utf8_lossy(&sent.stdout);
    let seconds: f64 = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("seconds="))
        .and_then(|v| v.parse().ok())
        .context("blast's output")?;
    let delivered = rx_packets(&ns)? - before;
    // The capture's own queues drain before the stop.
    std::thread::sleep(Duration::from_millis(1500));
    let (captured, dropped) = stop_capture(child, &out)?;
    Ok(BlastTrial {
        engine,
        asked: rate,
        rate: BLAST_FRAMES as f64 / seconds.max(1e-9),
        delivered,
        captured,
        dropped,
    })
}

/// Each engine against the blast sender: flat out first; only if that loses frames, a bisection on the
/// paced rate for the highest one without loss.
pub fn loss_free_limits(
    tracer: &Path,
    blast: &Path,
    replay: &Path,
    dir: &Path,
) -> Result<Vec<BlastTrial>> {
    let mut out = Vec::new();
    for engine in ["pcap", "ebpf"] {
        eprintln!("xtask: loss-free limit, {engine} engine");
        let flat = blast_trial(tracer, blast, replay, dir, engine, None)?;
        let (mut low, mut high) = (0.0, flat.rate);
        let lossy = !flat.lossless();
        out.push(flat);
        if lossy {
            for _ in 0..BLAST_STEPS {
                let mid = (low + high) / 2.0;
                let t = blast_trial(tracer, blast, replay, dir, engine, Some(mid))?;
                if t.lossless() {
                    low = mid;
                } else {
                    high = mid;
                }
                out.push(t);
            }
        }
    }
    Ok(out)
}

pub fn render(trials: &[BlastTrial]) -> String {
    let mut s = format!(
        "\n**Loss-free limit, with a faster sender**: `tracer/examples/blast` sends the corpus replay's \
         frames from the sender's namespace through an AF_PACKET socket, {BLAST_FRAMES} per trial in \
         batches of 64 per `sendmmsg`, past the qdisc; each engine first flat out, and only when that loses \
         frames, a bisection on the paced rate. Delivered is `vb`'s receive counter: what reached the \
         capture point.\n\n| engine | rate asked | sender rate | delivered | captured | reported dropped | \
         unaccounted | lossless |\n|---|---:|---:|---:|---:|---:|---:|---|\n"
    );
    for t in trials {
        s.push_str(&format!(
            "| {} | {} | {:.2} M frames/s | {} | {} | {} | {} | {} |\n",
            t.engine,
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
    for engine in ["pcap", "ebpf"] {
        let mine: Vec<&BlastTrial> = trials.iter().filter(|t| t.engine == engine).collect();
        let best = mine
            .iter()
            .filter(|t| t.lossless())
            .map(|t| t.rate)
            .fold(0.0, f64::max);
        let flat_lossless = mine.first().is_some_and(|t| t.lossless());
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
