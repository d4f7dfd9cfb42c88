//! The eBPF probe's own cost, out of the live path: `tracer/examples/probe_cost.rs` runs the ingress
//! program through `BPF_PROG_TEST_RUN` (the kernel times it), pinned to one core, several rounds, the best
//! kept and the median shown beside it, because other work on the machine only ever adds time; the ring
//! either drained between batches of runs or read meanwhile from the other core, by aya's reader (space
//! handed back per record) and by the capture's (per batch). Also what verifying the programs costs, with
//! the size of their JIT code.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Rounds of the probe-cost example per ring size.
const PROBE_ROUNDS: usize = 5;
/// A ring that fits in the caches, measured beside the default to show what the ring's memory costs.
const SMALL_RING: u32 = 4 << 20;

/// One case of the probe-cost example, over every round.
pub struct ProbeCase {
    case: String,
    ring_bytes: u64,
    /// Who read the ring during the runs: "" (nobody: drained between batches), "record" or "batch".
    reader: String,
    bests: Vec<u64>,
    medians: Vec<u64>,
}

pub fn probe_cost(example: &Path) -> Result<Vec<ProbeCase>> {
    let mut cases: Vec<ProbeCase> = Vec::new();
    for round in 0..PROBE_ROUNDS {
        // Alternate the ring sizes and readers so that a noisy moment does not land on one of them only.
        for (ring, reader) in [
            (None, None),
            (Some(SMALL_RING), None),
            (None, Some("record")),
            (None, Some("batch")),
        ] {
            eprintln!("xtask: probe cost, round {}", round + 1);
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", "0"]).arg(example);
            if let Some(r) = ring {
                cmd.args(["--ring-bytes", &r.to_string()]);
            }
            if let Some(r) = reader {
                cmd.args(["--reader", r]);
            }
            let out = cmd.output().context("running probe_cost")?;
            if !out.status.success() {
                bail!(
                    "probe_cost failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let (numbers, case) = line
                    .split_once(" case=")
                    .with_context(|| format!("probe_cost printed {line:?}"))?;
                let get = |key: &str| -> Result<u64> {
                    numbers
                        .split_whitespace()
                        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                        .and_then(|v| v.parse().ok())
                        .with_context(|| format!("no {key} in {line:?}"))
                };
                let case = case.to_string();
                let ring_bytes = get("ring_bytes")?;
                let best = get("best_ns")?;
                let median = get("median_ns")?;
                let reader = numbers
                    .split_whitespace()
                    .find_map(|kv| kv.strip_prefix("reader="))
                    .unwrap_or_default()
                    .to_string();
                match cases
                    .iter_mut()
                    .find(|c| c.case == case && c.ring_bytes == ring_bytes && c.reader == reader)
                {
                    Some(c) => {
                        c.bests.push(best);
                        c.medians.push(median);
                    }
                    None => cases.push(ProbeCase {
                        case,
                        ring_bytes,
                        reader,
                        bests: vec![best],
                        medians: vec![median],
                    }),
                }
            }
        }
    }
    Ok(cases)
}

/// `probe_cost --verifier`: per configuration and program, the instructions the verifier processed, the
/// JIT code's size and the load time, as printed (`key=value` pairs).
pub fn verifier_costs(example: &Path) -> Result<Vec<String>> {
    let out = Command::new(example)
        .arg("--verifier")
        .output()
        .context("running probe_cost --verifier")?;
    if !out.status.success() {
        bail!(
            "probe_cost --verifier failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

/// The two tables of this part of the section: the probe's cost per frame, and the verifier's.
pub fn render(probe: &[ProbeCase], verifier: &[String]) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "**The probe's own cost per frame** (`BPF_PROG_TEST_RUN` on core 0, one 1 KiB RoCEv2 RDMA WRITE FIRST \
         frame, {PROBE_ROUNDS} rounds of 20 kernel averages over 10 000 runs; best and median of the rounds' \
         best averages):\n\n"
    ));
    s.push_str(
        "| case | ring | ring read during the runs | best ns/frame | median ns/frame |\n\
         |---|---|---|---:|---:|\n",
    );
    for c in probe {
        let mut b = c.bests.clone();
        b.sort_unstable();
        let best = b.first().copied().unwrap_or(0);
        let median = b.get(b.len() / 2).copied().unwrap_or(0);
        let reader = match c.reader.as_str() {
            "" => "no (drained between batches)",
            "record" => "from core 1, aya's reader (per record)",
            "batch" => "from core 1, the capture's reader (per batch)",
            other => other,
        };
        s.push_str(&format!(
            "| {} | {} MiB | {reader} | {best} | {median} |\n",
            c.case,
            c.ring_bytes >> 20
        ));
    }
    s.push_str(
        "\n**Verifying and compiling the probe** (`probe_cost --verifier`: the configuration is a load-time \
         constant, so each is verified on its own; instructions the verifier processed, and the JIT code):\n\n\
         | snap length | headers only | program | verified instructions | JIT bytes | load of both, ms |\n\
         |---:|---|---|---:|---:|---:|\n",
    );
    for line in verifier {
        let get = |key: &str| {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .unwrap_or("?")
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            get("snaplen"),
            if get("headers_only") == "1" {
                "yes"
            } else {
                "no"
            },
            get("program"),
            get("verified_insns"),
            get("jited_bytes"),
            get("load_ms_both"),
        ));
    }
    s
}
