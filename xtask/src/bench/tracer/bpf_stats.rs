//! What the kernel counts of a BPF program's runs while `kernel.bpf_stats_enabled` is on, read through
//! bpftool: how the live probe's run time per frame is measured.

use std::process::Command;

use anyhow::Result;

/// Ids of the loaded BPF programs named `name`, from `bpftool prog show`, whose first line per program reads
/// `ID: TYPE  name NAME  tag ...`.
pub fn prog_ids(name: &str) -> Vec<u64> {
    let Ok(out) = Command::new("bpftool").args(["prog", "show"]).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (id, rest) = l.split_once(':')?;
            let mut words = rest.split_whitespace();
            words.find(|&w| w == "name")?;
            (words.next()? == name).then(|| id.trim().parse().ok())?
        })
        .collect()
}

/// (run_time_ns, run_cnt) of a program, which `bpftool prog show` prints while kernel.bpf_stats_enabled is
/// on.
fn prog_run_stats(id: u64) -> Option<(u64, u64)> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "id", &id.to_string()])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || text.trim().is_empty() {
        return None;
    }
    // bpftool leaves both out while they are zero.
    let value = |key: &str| -> u64 {
        let mut words = text.split_whitespace();
        words
            .find(|&w| w == key)
            .and_then(|_| words.next()?.parse().ok())
            .unwrap_or(0)
    };
    Some((value("run_time_ns"), value("run_cnt")))
}

/// Turns kernel.bpf_stats_enabled on for its lifetime and restores the old value.
pub struct BpfStats(String);

impl BpfStats {
    pub fn enable() -> Result<BpfStats> {
        let old = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")?
            .trim()
            .to_string();
        std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1")?;
        Ok(BpfStats(old))
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", &self.0);
    }
}

/// (run_time_ns, run_cnt) of the one program in `ids`, or None.
pub fn one_prog_stats(ids: &[u64]) -> Option<(u64, u64)> {
    match ids {
        [id] => prog_run_stats(*id),
        _ => None,
    }
}

pub fn per_run(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<f64> {
    match (before, after) {
        (Some((t0, n0)), Some((t1, n1))) if n1 > n0 => Some((t1 - t0) as f64 / (n1 - n0) as f64),
        _ => None,
    }
}
