//! A measurement, not a check: the fastest sender we have here (tcpreplay at top speed into a veth pair)
//! against each engine, with the loss the capture reports and the tracer's CPU time per frame. Run it as root
//! on an idle machine with `cargo test -p tracer --test capture_rate -- --ignored --nocapture`.

mod common;

use std::time::Instant;

use common::*;

/// CPU time (user + system) of a process so far, in clock ticks, from procfs.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[test]
#[ignore = "benchmark, minutes long: run with --ignored to refresh BENCHMARKS.md"]
fn capture_rate_per_engine() {
    if !require_netns("capture_rate_per_engine") {
        return;
    }
    let ticks_per_s = 100.0; // USER_HZ on Linux
    let dir = tempfile::tempdir().unwrap();
    let replay = dir.path().join("replay.pcap");
    let per_pass = replayable(&corpus(), &replay);
    let passes = 2000u32;
    let sent = per_pass as u64 * u64::from(passes);
    for engine in ["pcap", "ebpf"] {
        let ns = Netns::new("rate");
        let out = dir.path().join(format!("{engine}.pcapng"));
        let child = ns.start_tracer(
            dir.path(),
            &["-i", "vb", "-w", out.to_str().unwrap(), "--engine", engine],
        );
        let before = cpu_ticks(child.id()).unwrap_or(0);
        let t = Instant::now();
        ns.replay(&replay, passes);
        let secs = t.elapsed().as_secs_f64();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let after = cpu_ticks(child.id()).unwrap_or(0);
        signal(&child, "INT");
        let result = wait(child, 60);
        assert!(result.status.success());
        let (got, reader) = frames(&out);
        let st = reader.if_stats().first().copied().unwrap_or_default();
        let dropped = st.dropped_iface.unwrap_or(0) + st.dropped_os.unwrap_or(0);
        let cpu_s = (after.saturating_sub(before)) as f64 / ticks_per_s;
        println!(
            "{engine}: sent {sent} frames in {secs:.2} s ({:.0} frames/s), captured {}, reported dropped {dropped}, \
             unaccounted {}, tracer CPU {:.0} ns/frame",
            sent as f64 / secs,
            got.len(),
            sent as i64 - got.len() as i64 - dropped as i64,
            cpu_s * 1e9 / got.len().max(1) as f64
        );
    }
}
