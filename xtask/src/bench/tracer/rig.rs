//! The rig every live measurement uses: a sender's and the tracer's network namespaces joined by a veth
//! pair, and `roce-tracer capture` started in the tracer's and stopped with what it wrote counted.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use roce_capture::CaptureReader;
use roce_core::decode::{Decoder, Kind};

use crate::shell::sh;

/// Two network namespaces joined by the veth pair `va` ↔ `vb`: the tracer's, holding `vb`, and the
/// sender's, holding `va`, as the issue sets the benchmark up. Both are deleted on drop.
pub struct Netns {
    capture: String,
    sender: String,
}

impl Netns {
    pub fn new() -> Result<Netns> {
        Netns::with_queues(1)
    }

    /// The pair with `queues` transmit and receive queues on each end (a veth has one unless asked).
    pub fn with_queues(queues: u32) -> Result<Netns> {
        let capture = format!("rtbench{}", std::process::id());
        let ns = Netns {
            sender: format!("{capture}s"),
            capture,
        };
        for name in [&ns.capture, &ns.sender] {
            let _ = Command::new("ip").args(["netns", "del", name]).output();
            sh(Command::new("ip").args(["netns", "add", name]))?;
        }
        let (c, s) = (ns.capture.as_str(), ns.sender.as_str());
        let q = queues.to_string();
        let add: Vec<&str> = if queues > 1 {
            vec![
                "-n",
                c,
                "link",
                "add",
                "name",
                "va",
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                "vb",
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
            ]
        } else {
            vec![
                "-n", c, "link", "add", "va", "type", "veth", "peer", "name", "vb",
            ]
        };
        for args in [
            &add[..],
            &["-n", c, "link", "set", "va", "netns", s],
            &["-n", s, "link", "set", "va", "up"],
            &["-n", c, "link", "set", "vb", "up"],
        ] {
            sh(Command::new("ip").args(args))?;
        }
        for name in [c, s] {
            for key in [
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ] {
                let _ = in_ns(name, "sysctl").args(["-qw", key]).output();
            }
        }
        Ok(ns)
    }

    /// A command in the tracer's namespace.
    pub fn cmd(&self, prog: &str) -> Command {
        in_ns(&self.capture, prog)
    }

    /// A command in the sender's namespace.
    pub fn sender_cmd(&self, prog: &str) -> Command {
        in_ns(&self.sender, prog)
    }
}

fn in_ns(name: &str, prog: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", name, prog]);
    c
}

impl Drop for Netns {
    fn drop(&mut self) {
        for name in [&self.capture, &self.sender] {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", name]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-KILL", pid]).output();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", name]).output();
        }
    }
}

fn wait_ready(child: &mut Child, ready: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.exists() {
        if let Some(status) = child.try_wait()? {
            bail!("roce-tracer exited before it was ready ({status})");
        }
        if Instant::now() > deadline {
            bail!("roce-tracer never became ready");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Starts `roce-tracer capture` on `vb` in the capture namespace and waits until its probes are attached.
pub fn start_capture(
    ns: &Netns,
    tracer: &Path,
    engine: &str,
    out: &Path,
    dir: &Path,
) -> Result<Child> {
    start_capture_with(ns, tracer, engine, &[], out, dir)
}

/// [`start_capture`] with more options for the tracer.
pub fn start_capture_with(
    ns: &Netns,
    tracer: &Path,
    engine: &str,
    extra: &[&str],
    out: &Path,
    dir: &Path,
) -> Result<Child> {
    let ready = dir.join("ready");
    let _ = std::fs::remove_file(&ready);
    let mut child = ns
        .cmd(&tracer.to_string_lossy())
        .args(["capture", "-q", "-i", "vb", "--engine", engine])
        .args(extra)
        .arg("-w")
        .arg(out)
        .arg("--ready-file")
        .arg(&ready)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting roce-tracer")?;
    wait_ready(&mut child, &ready)?;
    Ok(child)
}

/// Sends `signal` (`INT`, `STOP`, `CONT`) to a capture.
pub fn signal(child: &Child, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status();
}

/// Stops a capture with SIGINT, and returns the frames its file holds that are not `other` and the losses
/// its statistics block reports.
pub fn stop_capture(child: Child, out: &Path) -> Result<(u64, u64)> {
    signal(&child, "INT");
    capture_result(child, out)
}

/// Waits for a capture to exit (by itself, or after a signal), then counts as [`stop_capture`] does.
pub fn capture_result(child: Child, out: &Path) -> Result<(u64, u64)> {
    wait_capture(child)?;
    count_capture(out)
}

/// Waits for a capture to exit; an error if it failed.
pub fn wait_capture(child: Child) -> Result<()> {
    let result = child.wait_with_output()?;
    if !result.status.success() {
        bail!(
            "roce-tracer failed: {}",
            String::from_utf8_lossy(&result.stderr)
        );
    }
    Ok(())
}

/// The frames a capture file holds that are not `other`, and the losses its statistics block reports.
pub fn count_capture(out: &Path) -> Result<(u64, u64)> {
    let mut reader = CaptureReader::open(out)?;
    let decoder = Decoder::default();
    let (mut i, mut captured) = (0, 0u64);
    while let Some(rec) = reader.next_record()? {
        i += 1;
        if decoder.decode(i, &rec).kind != Kind::Other {
            captured += 1;
        }
    }
    let st = reader.if_stats().first().copied().unwrap_or_default();
    Ok((
        captured,
        st.dropped_iface.unwrap_or(0) + st.dropped_os.unwrap_or(0),
    ))
}

pub fn rx_packets(ns: &Netns) -> Result<u64> {
    let out = ns
        .cmd("cat")
        .arg("/sys/class/net/vb/statistics/rx_packets")
        .output()?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .context("vb's rx_packets")
}
