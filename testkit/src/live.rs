//! The live-capture harness the tracer's tests and the end-to-end tests share: a network namespace with a veth
//! pair, `roce-tracer` run inside it, `tcpreplay` sending into it, and the rules for tests that need root.
//!
//! Most such tests need root (namespaces, raw sockets, eBPF): they are the privileged suite, gated by
//! [`privileged`]. Without root a plain `cargo test` says which of them did not run and passes; `cargo xtask
//! test` runs them in a step of its own as root (the way aya runs its integration tests), where a missing
//! root fails. A tool they need that is missing (`tcpreplay`, `tshark`, ...) prints `SKIP-REASON: ...` and
//! fails, unless `ROCETRACE_ALLOW_SKIP=1` says a skip is acceptable on this machine: a silent pass would
//! hide that the live path was never exercised.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Whether the test may run; panics (fails the test) with the reason otherwise, unless skips are allowed.
pub fn require(what: &str, ok: bool, reason: &str) -> bool {
    if ok {
        return true;
    }
    println!("SKIP-REASON: {what}: {reason}");
    eprintln!("SKIP-REASON: {what}: {reason}");
    if std::env::var("ROCETRACE_ALLOW_SKIP").is_ok_and(|v| v == "1") {
        cannot_run_here(&format!("{what}: {reason}"));
        return false;
    }
    panic!("{what} cannot run here: {reason} (set ROCETRACE_ALLOW_SKIP=1 to accept the skip)");
}

/// Says that a check cannot run on this machine (a kernel feature it lacks), though the rest of the test
/// did: nobody should believe a check ran when it did not.
pub fn cannot_run_here(what: &str) {
    crate::not_run_here(what);
}

/// How the privileged tests behave, set by `cargo xtask test`: `later` in its workspace step (they pass
/// without running, since its next step runs them), `required` in that next step (without root they fail).
/// Unset, as in a plain `cargo test`: they run as root and say they did not run otherwise.
pub const PRIVILEGED_ENV: &str = "ROCETRACE_PRIVILEGED";

/// Whether a test that needs root runs now; see [`PRIVILEGED_ENV`].
pub fn privileged(what: &str) -> bool {
    match std::env::var(PRIVILEGED_ENV).as_deref() {
        Ok("later") => false,
        Ok("required") => {
            assert!(
                is_root(),
                "{what} needs root, and {PRIVILEGED_ENV}=required runs the privileged tests"
            );
            true
        }
        _ if is_root() => true,
        _ => {
            cannot_run_here(&format!(
                "{what}: needs root (network namespaces, captures, eBPF); `cargo xtask test` runs the \
                 privileged tests as root"
            ));
            false
        }
    }
}

/// Whether the test runs as root.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Whether `tool` is on the PATH.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Root and the tools a netns test uses.
pub fn require_netns(what: &str) -> bool {
    privileged(what)
        && require(what, have("ip"), "needs iproute2 (`ip`)")
        && require(
            what,
            have("tcpreplay"),
            "needs tcpreplay (cargo xtask install)",
        )
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().expect("run command");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace holding the veth pair `va` ↔ `vb`; deleted on drop (which removes the pair too).
#[derive(Debug)]
pub struct Netns {
    /// The namespace's name (`ip netns`), unique to the test process and its tag.
    pub name: String,
    /// The `roce-tracer` binary the namespace's captures run.
    tracer: PathBuf,
}

impl Netns {
    /// A namespace tagged `tag` (unique within the test process) whose captures run the `tracer` binary.
    pub fn new(tag: &str, tracer: &Path) -> Netns {
        let name = format!("rt{}{tag}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run_ok(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns {
            name,
            tracer: tracer.to_path_buf(),
        };
        for args in [
            &["link", "add", "va", "type", "veth", "peer", "name", "vb"][..],
            &["link", "set", "lo", "up"],
            &["link", "set", "va", "up"],
            &["link", "set", "vb", "up"],
        ] {
            run_ok(Command::new("ip").args(["-n", &ns.name]).args(args));
        }
        // No IPv6 neighbour discovery or router solicitations on the pair: only replayed frames travel.
        for key in [
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ] {
            let _ = ns.cmd("sysctl").args(["-qw", key]).output();
        }
        ns
    }

    /// Sets the MTU of the pair `va` ↔ `vb`, for frames longer than Ethernet's 1500 bytes of payload.
    pub fn set_mtu(&self, mtu: u32) {
        for dev in ["va", "vb"] {
            run_ok(
                Command::new("ip")
                    .args(["-n", &self.name, "link", "set", dev, "mtu"])
                    .arg(mtu.to_string()),
            );
        }
    }

    /// Adds a second veth pair, `a` ↔ `b`, both up.
    pub fn add_pair(&self, a: &str, b: &str) {
        for args in [
            &["link", "add", a, "type", "veth", "peer", "name", b][..],
            &["link", "set", a, "up"],
            &["link", "set", b, "up"],
        ] {
            run_ok(Command::new("ip").args(["-n", &self.name]).args(args));
        }
    }

    /// An interface's index inside the namespace.
    pub fn ifindex(&self, dev: &str) -> u32 {
        let out = Command::new("ip")
            .args(["-n", &self.name, "-j", "link", "show", dev])
            .output()
            .expect("run ip");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j output");
        v[0]["ifindex"].as_u64().expect("ifindex") as u32
    }

    /// Frames `dev` has received so far, as the kernel counts them.
    pub fn rx_packets(&self, dev: &str) -> u64 {
        let out = Command::new("ip")
            .args(["-n", &self.name, "-s", "-j", "link", "show", dev])
            .output()
            .expect("run ip");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j output");
        v[0]["stats64"]["rx"]["packets"]
            .as_u64()
            .expect("rx packets")
    }

    /// A command run inside the namespace.
    pub fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, prog]);
        c
    }

    /// `roce-tracer capture` inside the namespace, its output kept for [`wait`]; the caller adds the rest.
    pub fn tracer(&self) -> Command {
        let mut c = self.cmd(&self.tracer.to_string_lossy());
        c.arg("capture")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Starts the tracer inside the namespace with `args` after `capture`, and waits for its ready file.
    pub fn start_tracer(&self, dir: &Path, args: &[&str]) -> Child {
        let mut c = self.tracer();
        c.args(args);
        self.start_when_ready(&mut c, dir)
    }

    /// Spawns `cmd` (from [`Netns::tracer`], its arguments given) quiet and with a ready file in `dir`, and
    /// returns once the probes are attached. Not for a `-- CMD` line: the ready file's options go last.
    pub fn start_when_ready(&self, cmd: &mut Command, dir: &Path) -> Child {
        let ready = dir.join("ready");
        let _ = std::fs::remove_file(&ready);
        let mut child = cmd
            .arg("--ready-file")
            .arg(&ready)
            .arg("-q")
            .spawn()
            .expect("start roce-tracer");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ready.exists() {
            if let Ok(Some(status)) = child.try_wait() {
                let out = child.wait_with_output().expect("output");
                panic!(
                    "roce-tracer exited before it was ready ({status}): {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            assert!(Instant::now() < deadline, "roce-tracer never became ready");
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    /// [`Netns::start_tracer`] capturing `vb` into `out`, with `extra` arguments: the setup nearly every
    /// replay test shares.
    pub fn capture_on_vb(&self, dir: &Path, out: &Path, extra: &[&str]) -> Child {
        let out = out.to_string_lossy();
        let mut args = vec!["-i", "vb", "-w", &out];
        args.extend_from_slice(extra);
        self.start_tracer(dir, &args)
    }

    /// Replays `pcap` `loops` times into a tracer already capturing on `vb`, lets the last frames reach the
    /// capture, stops the tracer with SIGINT and returns its output once it has exited cleanly.
    pub fn replay_and_stop(
        &self,
        child: Child,
        pcap: &Path,
        loops: u32,
        timeout_secs: u64,
    ) -> Output {
        self.replay(pcap, loops);
        stop(child, timeout_secs)
    }

    /// Replays a pcap into `va` once at the pace of its timestamps, as the traffic went by when it was
    /// captured: what a capture's timing-dependent analysis (rates, the DCQCN model) needs to see again.
    pub fn replay_paced(&self, pcap: &Path) {
        self.tcpreplay(&["-i", "va"], pcap);
    }

    /// Replays a pcap into `va` as fast as possible, `loops` times.
    pub fn replay(&self, pcap: &Path, loops: u32) {
        self.replay_into("va", pcap, loops);
    }

    /// Replays a pcap into `dev` as fast as possible, `loops` times.
    pub fn replay_into(&self, dev: &str, pcap: &Path, loops: u32) {
        self.tcpreplay(&["-t", "-i", dev, &format!("--loop={loops}")], pcap);
    }

    /// Runs tcpreplay quietly in the namespace with `args` over `pcap`, and fails the test if it fails.
    fn tcpreplay(&self, args: &[&str], pcap: &Path) {
        let out = self
            .cmd("tcpreplay")
            .arg("-q")
            .args(args)
            .arg(pcap)
            .output()
            .expect("run tcpreplay");
        assert!(
            out.status.success(),
            "tcpreplay failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // A failed test may leave its tracer running inside: it would keep the namespace (and its probes)
        // alive after the name is gone.
        if let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-KILL", pid]).output();
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Waits until `done` holds, polling; `secs` is a cap that only catches a hang, and `what` says what never
/// happened when it fires.
pub fn wait_until(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what}: not within {secs} s, the cap on a hang"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `sig` to the tracer. `ip netns exec` runs it as its own child in the same process, so the pid is
/// the tracer's.
pub fn signal(child: &Child, sig: &str) {
    run_ok(Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]));
}

/// Lets the last frames reach a capture, stops the tracer with SIGINT and returns its output once it has
/// exited cleanly (`secs` caps a hang).
pub fn stop(child: Child, secs: u64) -> Output {
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, "INT");
    let result = wait(child, secs);
    assert!(
        result.status.success(),
        "roce-tracer failed: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    result
}

/// Writes the Ethernet records of capture `src` that `keep` accepts to a classic pcap `dst` that tcpreplay
/// sends, and returns how many. A record cut by a snap length goes back on the wire at its captured length,
/// or with `whole`, padded with zeros to its length on the wire (its headers say that length, its ICRC is
/// then wrong, which a capture cut at a snap length cannot check anyway).
pub fn write_replay(
    src: &Path,
    dst: &Path,
    whole: bool,
    mut keep: impl FnMut(u64, &roce_capture::Record<'_>) -> bool,
) -> usize {
    use roce_capture::{CaptureReader, LinkType};
    let mut reader = CaptureReader::open(src).expect("open source");
    let file = std::fs::File::create(dst).expect("create replay file");
    let mut w = roce_capture::write::PcapWriter::new(
        std::io::BufWriter::new(file),
        LinkType::ETHERNET,
        65535,
    )
    .unwrap();
    let (mut n, mut i) = (0, 0);
    while let Some(rec) = reader.next_record().expect("read") {
        i += 1;
        if rec.link != LinkType::ETHERNET || !keep(i, &rec) {
            continue;
        }
        if whole && rec.len > rec.caplen {
            let mut frame = rec.data.to_vec();
            frame.resize(rec.len as usize, 0);
            w.write_packet(rec.ts_ns, &frame, rec.len).unwrap();
        } else {
            w.write_packet(rec.ts_ns, rec.data, rec.caplen).unwrap();
        }
        n += 1;
    }
    w.into_inner().unwrap();
    n
}

/// Waits for the tracer's exit. `secs` is a cap that only catches a hang: a test that proves the tracer
/// does not wait for something makes that something take longer than the cap.
pub fn wait(child: Child, secs: u64) -> Output {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut child = child;
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "roce-tracer did not exit within {secs} s, the cap on a hang: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
