//! What the benches say about the machine they ran on: their numbers mean little without it, and the
//! machine is shared, so the load at the time is part of the record.

/// Logical cores, 0 when the system does not say.
pub fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

/// The processor's model name from /proc/cpuinfo.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// "N cores of MODEL", the start of a machine line.
pub fn cores_of_cpu() -> String {
    format!("{} cores of {}", cpu_count(), cpu_model())
}

/// "Linux RELEASE", or nothing when /proc does not say.
pub fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| format!("Linux {}", k.trim()))
        .unwrap_or_default()
}

/// The 1, 5 and 15 minute load averages, space-separated.
pub fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}
