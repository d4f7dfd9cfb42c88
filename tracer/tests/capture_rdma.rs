//! The rdma engine without an RDMA NIC: recorded completions (frames, NIC clock stamps with a wrap of the
//! counter and a re-anchoring, lost receive buffers) replayed through `roce-tracer capture --engine rdma`,
//! so through the real capture loop and pcapng writer, then read back by the analyzer's decoder and by
//! tshark. Also every error the engine can give on this machine, and `list` and `selftest` here.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use roce_capture::CaptureReader;

/// 156.25 MHz with a 48-bit counter, as many ConnectX parts report.
const KHZ: u64 = 156_250;
const MASK: u64 = (1 << 48) - 1;
const LOST: u64 = 3;

/// NIC ticks for a wall time, given an anchor.
fn ticks_at(anchor_ticks: u64, anchor_wall: u64, wall: u64) -> u64 {
    let d = i128::from(wall) - i128::from(anchor_wall);
    let t = i128::from(anchor_ticks) + d * i128::from(KHZ) / 1_000_000;
    (t.rem_euclid(i128::from(MASK) + 1)) as u64
}

/// The frames of a capture as (ts_ns, wire length, bytes).
fn records(path: &Path) -> Vec<(u64, u32, Vec<u8>)> {
    let mut r = CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push((rec.ts_ns, rec.len, rec.data.to_vec()));
    }
    out
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

/// A recording of `frames` as the sniffer would deliver them: the counter wraps halfway, the clock is
/// re-anchored after the first quarter, and `LOST` frames are reported lost in the middle. `shift_ns` moves
/// every time (to put the frames at "now" for the selftest).
fn record(frames: &[(u64, u32, Vec<u8>)], shift_ns: i128, out: &Path) {
    let mut text = format!("{{\"clock\":{{\"khz\":{KHZ},\"mask\":{MASK}}}}}\n");
    let at = |ts: u64| (i128::from(ts) + shift_ns) as u64;
    let mid = at(frames[frames.len() / 2].0);
    // The counter reaches its mask exactly at the middle frame's time.
    let (a_ticks, a_wall) = (MASK, mid);
    let first = at(frames[0].0);
    text.push_str(&format!(
        "{{\"anchor\":{{\"ticks\":{},\"wall_ns\":{first}}}}}\n",
        ticks_at(a_ticks, a_wall, first)
    ));
    for (i, (ts, len, data)) in frames.iter().enumerate() {
        if i == frames.len() / 4 {
            let wall = at(*ts);
            text.push_str(&format!(
                "{{\"anchor\":{{\"ticks\":{},\"wall_ns\":{wall}}}}}\n",
                ticks_at(a_ticks, a_wall, wall)
            ));
        }
        if i == frames.len() / 2 {
            text.push_str(&format!("{{\"lost\":{LOST}}}\n"));
        }
        text.push_str(&format!(
            "{{\"frame\":\"{}\",\"len\":{len},\"ticks\":{}}}\n",
            hex(data),
            ticks_at(a_ticks, a_wall, at(*ts))
        ));
    }
    std::fs::write(out, text).unwrap();
}

fn tracer(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(TRACER);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// The start of every capture command here.
const RDMA_CAPTURE: [&str; 6] = ["capture", "--engine", "rdma", "-i", "mlx5_0", "-q"];

/// `roce-tracer capture --engine rdma -i mlx5_0 -q -w OUT EXTRA...` fed with the recording `rec`.
fn replay_capture(rec: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = RDMA_CAPTURE.to_vec();
    args.push("-w");
    args.push(out.to_str().unwrap());
    args.extend_from_slice(extra);
    tracer(&args, &[("ROCETRACE_RDMA_REPLAY", rec)])
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn corpus_frames() -> Vec<(u64, u32, Vec<u8>)> {
    let f = records(&corpus());
    assert!(f.len() > 100, "{}", f.len());
    f
}

#[test]
fn recorded_completions_reach_the_file_with_their_times_and_losses() {
    let dir = tempfile::tempdir().unwrap();
    let want = corpus_frames();
    let rec = dir.path().join("rec.jsonl");
    record(&want, 0, &rec);
    let out = dir.path().join("cap.pcapng");
    let o = replay_capture(&rec, &out, &["-s", "65535", "--all-frames"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("{} frames written", want.len())) && err.contains("3 dropped"),
        "{err}"
    );

    let got = records(&out);
    assert_eq!(got.len(), want.len());
    // One tick is 6.4 ns: each time comes back within a tick, across the wrap and the re-anchoring.
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!((g.1, &g.2), (w.1, &w.2), "frame {}", i + 1);
        assert!(g.0.abs_diff(w.0) < 7, "frame {}: {} vs {}", i + 1, g.0, w.0);
    }
    let (views_got, reader) = frames(&out);
    let (views_want, _) = frames(&corpus());
    assert_eq!(
        views_got, views_want,
        "the analyzer decodes the same frames"
    );
    let ifc = &reader.interfaces()[0];
    assert_eq!(ifc.name.as_deref(), Some("mlx5_0"));
    let st = reader.if_stats().first().copied().unwrap_or_default();
    // Received = written + lost, as with the other engines.
    assert_eq!(st.received, Some(want.len() as u64 + LOST), "{st:?}");
    assert_eq!(
        st.dropped_iface.unwrap_or(0) + st.dropped_os.unwrap_or(0),
        LOST,
        "{st:?}"
    );

    if !have("tshark") {
        cannot_run_here("the tshark check of the rdma engine's timestamps: no tshark");
        return;
    }
    let t = Command::new("tshark")
        .args([
            "-r",
            out.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "frame.time_epoch",
        ])
        .output()
        .unwrap();
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    let epochs: Vec<u64> = String::from_utf8_lossy(&t.stdout)
        .lines()
        .map(|l| {
            let (s, frac) = l.trim().split_once('.').unwrap();
            let frac = format!("{frac:0<9}");
            s.parse::<u64>().unwrap() * 1_000_000_000 + frac[..9].parse::<u64>().unwrap()
        })
        .collect();
    assert_eq!(epochs.len(), want.len());
    for (i, (e, w)) in epochs.iter().zip(&want).enumerate() {
        assert!(
            e.abs_diff(w.0) < 7,
            "tshark frame {}: {e} vs {}",
            i + 1,
            w.0
        );
    }
}

#[test]
fn the_default_selection_and_a_filter_apply_to_the_sniffer_too() {
    let dir = tempfile::tempdir().unwrap();
    let want = corpus_frames();
    let rec = dir.path().join("rec.jsonl");
    record(&want, 0, &rec);
    let run = |extra: &[&str]| -> Vec<(u64, u32, Vec<u8>)> {
        let out = dir.path().join("f.pcapng");
        let mut args = vec!["capture", "--engine", "rdma", "-i", "mlx5_0:1", "-q", "-w"];
        args.push(out.to_str().unwrap());
        args.extend_from_slice(extra);
        let o = tracer(&args, &[("ROCETRACE_RDMA_REPLAY", &rec)]);
        assert!(o.status.success(), "{}", stderr(&o));
        records(&out)
    };
    // The default keeps RoCE, CNP, PFC and PAUSE: what the analyzer's decoder calls anything but `other`.
    let (kinds, _) = frames(&corpus());
    assert_eq!(run(&[]).len(), kinds.len());
    // Header-only by default.
    assert!(run(&[]).iter().all(|f| f.2.len() <= 256));
    // MAC Control frames (PFC, PAUSE) are never tagged.
    let pauses = run(&["--filter", "ether proto 0x8808"]);
    let want_pauses = kinds
        .iter()
        .filter(|k| {
            matches!(
                k.kind,
                roce_core::decode::Kind::Pfc | roce_core::decode::Kind::Pause
            ) && k.vlan.is_none()
        })
        .count();
    assert!(want_pauses > 0);
    assert_eq!(pauses.len(), want_pauses);

    let out = dir.path().join("bad.pcapng");
    let o = replay_capture(&rec, &out, &["--filter", "udp dst port"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("does not compile"), "{}", stderr(&o));
}

#[test]
fn the_count_and_a_signal_stop_the_rdma_engine_like_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let want = corpus_frames();
    let rec = dir.path().join("rec.jsonl");
    record(&want, 0, &rec);
    let out = dir.path().join("c.pcapng");
    let o = replay_capture(&rec, &out, &["--all-frames", "-c", "7"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(records(&out).len(), 7);

    // Ten frames, then nothing for a minute: SIGINT ends the capture with a valid file.
    let mut text: Vec<String> = std::fs::read_to_string(&rec)
        .unwrap()
        .lines()
        .take(12)
        .map(str::to_owned)
        .collect();
    text.push("{\"pause_ms\":60000}".into());
    let paused = dir.path().join("paused.jsonl");
    std::fs::write(&paused, text.join("\n") + "\n").unwrap();
    let out = dir.path().join("s.pcapng");
    let ready = dir.path().join("ready");
    let child = Command::new(TRACER)
        .args(RDMA_CAPTURE)
        .args(["--all-frames", "-w"])
        .arg(&out)
        .arg("--ready-file")
        .arg(&ready)
        .env("ROCETRACE_RDMA_REPLAY", &paused)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ready.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    signal(&child, "INT");
    let o = wait(child, 10);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("(signal)"), "{}", stderr(&o));
    assert_eq!(records(&out).len(), 10);
}

use testkit::put_file as put;

/// A sysfs tree with a RoCE port (mlx5_0:1 on ens1f0np0) and an InfiniBand one (mlx5_1:1).
fn fake_sysfs(root: &Path) -> PathBuf {
    put(root, "class/net/ens1f0np0/operstate", "up");
    put(root, "class/net/ens1f0np0/mtu", "4200");
    put(
        root,
        "class/infiniband/mlx5_0/ports/1/link_layer",
        "Ethernet",
    );
    put(root, "class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE");
    put(
        root,
        "class/infiniband/mlx5_0/ports/1/gids/3",
        "0000:0000:0000:0000:0000:ffff:0a00:0001",
    );
    put(
        root,
        "class/infiniband/mlx5_0/ports/1/gid_attrs/types/3",
        "RoCE v2",
    );
    put(
        root,
        "class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/3",
        "ens1f0np0",
    );
    put(
        root,
        "class/infiniband/mlx5_1/ports/1/link_layer",
        "InfiniBand",
    );
    root.to_path_buf()
}

fn capture_error(args: &[&str], env: &[(&str, &Path)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.pcapng");
    let mut all = vec!["capture", "--engine", "rdma", "-w", out.to_str().unwrap()];
    all.extend_from_slice(args);
    let o = tracer(&all, env);
    assert!(!o.status.success(), "{args:?} should fail");
    assert!(!out.exists(), "no file when the engine does not start");
    stderr(&o)
}

#[test]
fn every_start_error_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let root = fake_sysfs(dir.path());
    let r = root.to_str().unwrap();

    // This machine: no RDMA device (on a machine with some, the name still does not exist).
    let e = capture_error(&["-i", "mlx5_nope"], &[]);
    assert!(e.contains("no RDMA device named mlx5_nope"), "{e}");
    assert!(e.contains("roce-tracer list"), "{e}");
    if !Path::new("/sys/class/infiniband").exists() {
        assert!(e.contains("this machine has none"), "{e}");
        assert!(e.contains("modprobe mlx5_ib"), "{e}");
    }

    let e = capture_error(&["-i", "mlx5_0:x"], &[]);
    assert!(e.contains("DEVICE:PORT"), "{e}");
    let e = capture_error(&["-i", "ens1f0np0", "--sysfs-root", r], &[]);
    assert!(
        e.contains("ens1f0np0 is the netdev of mlx5_0:1, so try -i mlx5_0:1"),
        "{e}"
    );
    let e = capture_error(&["-i", "mlx5_0:2", "--sysfs-root", r], &[]);
    assert!(e.contains("mlx5_0 has no port 2 (its ports: 1)"), "{e}");
    let e = capture_error(&["-i", "mlx5_1", "--sysfs-root", r], &[]);
    assert!(
        e.contains("mlx5_1:1 is an InfiniBand port, not Ethernet"),
        "{e}"
    );
    assert!(e.contains("ibdump"), "{e}");

    // A RoCE port the kernel shows, on a host without libibverbs.
    let missing = Path::new("libibverbs.so.999-not-installed");
    let e = capture_error(
        &["-i", "mlx5_0", "--sysfs-root", r],
        &[("ROCETRACE_LIBIBVERBS", missing)],
    );
    assert!(e.contains("libibverbs is not available"), "{e}");
    assert!(e.contains("libibverbs.so.999-not-installed"), "{e}");
    assert!(
        e.contains("apt-get install libibverbs1 ibverbs-providers"),
        "{e}"
    );

    // With libibverbs: the kernel's device is not one libibverbs can open.
    let has_verbs = [
        "/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
        "/usr/lib64/libibverbs.so.1",
        "/usr/lib/libibverbs.so.1",
    ]
    .iter()
    .any(|p| Path::new(p).exists());
    if !has_verbs {
        cannot_run_here(
            "the rdma engine's check against libibverbs' device list: libibverbs.so.1 is not installed",
        );
        return;
    }
    let e = capture_error(&["-i", "mlx5_0", "--sysfs-root", r], &[]);
    assert!(
        e.contains("the kernel has mlx5_0 but libibverbs does not list it"),
        "{e}"
    );
    assert!(e.contains("ibverbs-providers"), "{e}");
}

#[test]
fn list_runs_here_and_reads_a_recorded_tree() {
    let o = tracer(&["list"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("Network interfaces (/sys/class/net):"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("lo ")),
        "{text}"
    );
    assert!(
        text.contains("RDMA devices (/sys/class/infiniband):"),
        "{text}"
    );
    if !Path::new("/sys/class/infiniband").exists() {
        assert!(text.contains("  none: no RDMA driver"), "{text}");
    }
    assert!(
        text.contains("rdma: ") && text.contains("libibverbs: "),
        "{text}"
    );

    let dir = tempfile::tempdir().unwrap();
    let root = fake_sysfs(dir.path());
    let o = tracer(&["list", "--sysfs-root", root.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("--engine rdma -i mlx5_0:1"), "{text}");
    assert!(text.contains("3:v2:10.0.0.1"), "{text}");
    assert!(text.contains("InfiniBand link layer; use ibdump"), "{text}");
}

#[test]
fn selftest_fails_plainly_here_and_judges_a_recording() {
    let e = tracer(&["selftest", "-i", "mlx5_nope", "--duration", "1s"], &[]);
    assert!(!e.status.success());
    let err = stderr(&e);
    assert!(err.contains("no RDMA device named mlx5_nope"), "{err}");
    assert!(
        err.contains("ib_write_bw"),
        "the traffic hint comes first: {err}"
    );

    // A recording stamped now passes; the same recording stamped in 2023 fails on its timestamps.
    let dir = tempfile::tempdir().unwrap();
    let want = corpus_frames();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128;
    let first = i128::from(want[0].0);
    let rec = dir.path().join("now.jsonl");
    record(&want, now - first, &rec);
    let kept = dir.path().join("kept.pcapng");
    let o = tracer(
        &[
            "selftest",
            "-i",
            "mlx5_0",
            "--duration",
            "3s",
            "-w",
            kept.to_str().unwrap(),
        ],
        &[("ROCETRACE_RDMA_REPLAY", &rec)],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(
        out.contains("PASS: ") && out.contains(" RoCE and "),
        "{out}"
    );
    assert!(kept.exists());

    let old = dir.path().join("old.jsonl");
    record(&want, 0, &old);
    let o = tracer(
        &["selftest", "-i", "mlx5_0", "--duration", "3s"],
        &[("ROCETRACE_RDMA_REPLAY", &old)],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains("FAIL: ") && out.contains("outside the capture's run"),
        "{out}"
    );
    assert!(
        stderr(&o).contains("the capture is kept in"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn counters_sample_the_ports_netdev() {
    let dir = tempfile::tempdir().unwrap();
    let root = fake_sysfs(&dir.path().join("sys"));
    put(
        &root,
        "class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer",
        "0",
    );
    put(
        &root,
        "ethtool-S/ens1f0np0",
        "NIC statistics:\n     rx_prio3_pause: 7\n",
    );
    let rec = dir.path().join("rec.jsonl");
    record(&corpus_frames(), 0, &rec);
    // Long enough for a few samples.
    let mut text = std::fs::read_to_string(&rec).unwrap();
    text.push_str("{\"pause_ms\":400}\n");
    std::fs::write(&rec, text).unwrap();
    let out = dir.path().join("c.pcapng");
    let o = replay_capture(
        &rec,
        &out,
        &[
            "--counters",
            "--interval",
            "100ms",
            "--sysfs-root",
            root.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("--counters:"), "{}", stderr(&o));
    let blocks = custom_blocks(&out);
    assert!(
        blocks
            .iter()
            .any(|b| String::from_utf8_lossy(b).contains("rx_prio3_pause")),
        "the port's netdev's ethtool statistics are sampled"
    );
}

#[test]
fn without_cap_net_raw_the_engine_says_how_to_grant_it_and_a_replay_needs_none() {
    if !have("setpriv") || !is_root() {
        cannot_run_here(
            "the rdma engine's privilege check: needs root and setpriv to drop capabilities",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.pcapng");
    let unprivileged = |env: Option<&Path>| {
        let mut c = Command::new("setpriv");
        c.args(["--bounding-set", "-all", "--", TRACER])
            .args(RDMA_CAPTURE)
            .arg("-w")
            .arg(&out);
        if let Some(rec) = env {
            c.env("ROCETRACE_RDMA_REPLAY", rec);
        }
        c.output().unwrap()
    };
    let o = unprivileged(None);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("the rdma engine needs cap_net_raw") && e.contains("setcap cap_net_raw+ep"),
        "{e}"
    );
    let rec = dir.path().join("rec.jsonl");
    record(&corpus_frames(), 0, &rec);
    let o = unprivileged(Some(&rec));
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn rotation_splits_the_sniffers_frames_and_each_file_has_its_losses() {
    let dir = tempfile::tempdir().unwrap();
    let want = corpus_frames();
    let rec = dir.path().join("rec.jsonl");
    record(&want, 0, &rec);
    let base = dir.path().join("run.pcapng");
    let o = replay_capture(&rec, &base, &["--all-frames", "--rotate-size", "4K"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let files: Vec<PathBuf> = (0..)
        .map(|i| tracer::output::rotated_path(&base, i))
        .take_while(|p| p.exists())
        .collect();
    assert!(files.len() > 2, "{} files", files.len());
    let got: Vec<_> = files.iter().flat_map(|f| records(f)).collect();
    assert_eq!(got.len(), want.len());
    // Header-only by default: the first 256 bytes of each.
    assert!(
        got.iter()
            .zip(&want)
            .all(|(g, w)| g.2 == w.2[..w.2.len().min(256)] && g.1 == w.1)
    );
    // The losses reported mid-recording show in the statistics of the file open then and of every later one.
    let mut last = CaptureReader::open(files.last().unwrap()).unwrap();
    while last.next_record().unwrap().is_some() {}
    let st = last.if_stats().first().copied().unwrap_or_default();
    assert_eq!(
        st.dropped_iface.unwrap_or(0) + st.dropped_os.unwrap_or(0),
        LOST,
        "{st:?}"
    );
}

/// Builds the stand-in libibverbs of `tests/fakeverbs/fakeverbs.c` against the installed headers; `None`,
/// with the line saying so, where the headers or a C compiler are missing.
fn fake_verbs(dir: &Path) -> Option<PathBuf> {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        cannot_run_here(
            "the rdma engine against a fake provider: no verbs.h (apt-get install libibverbs-dev)",
        );
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fakeverbs/fakeverbs.c");
    let lib = dir.join("libfakeverbs.so");
    let cc = Command::new("cc")
        .args(["-Wall", "-Werror", "-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .output();
    match cc {
        Ok(o) if o.status.success() => Some(lib),
        Ok(o) => panic!("fakeverbs.c: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            cannot_run_here(&format!(
                "the rdma engine against a fake provider: no C compiler ({e})"
            ));
            None
        }
    }
}

/// The fake provider of [`fake_verbs`], built in `dir`, with a recorded sysfs tree for its device in
/// `dir/sys`.
struct Fake {
    lib: PathBuf,
    root: PathBuf,
    dir: PathBuf,
}

impl Fake {
    /// `roce-tracer capture --engine rdma -i mlx5_0 -q` into `DIR/fake.pcapng` on the fake provider, with
    /// `env` for it and `extra` arguments; what it printed and the calls the provider logged.
    fn capture(&self, env: &[(&str, &str)], extra: &[&str]) -> (Output, String) {
        self.capture_under(&[], env, extra)
    }

    /// [`Fake::capture`] with the tracer run by `wrapper` (a program and its arguments, the tracer's path
    /// after them).
    fn capture_under(
        &self,
        wrapper: &[&str],
        env: &[(&str, &str)],
        extra: &[&str],
    ) -> (Output, String) {
        let log = self.dir.join("calls.log");
        let _ = std::fs::remove_file(&log);
        let mut c = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(TRACER);
                c
            }
            None => Command::new(TRACER),
        };
        let o = c
            .args(RDMA_CAPTURE)
            .arg("--sysfs-root")
            .arg(&self.root)
            .arg("-w")
            .arg(self.dir.join("fake.pcapng"))
            .args(extra)
            .env("ROCETRACE_LIBIBVERBS", &self.lib)
            .env("FAKEVERBS_LOG", &log)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (o, std::fs::read_to_string(&log).unwrap_or_default())
    }
}

/// The calls that undid something, in order.
fn undone_calls(calls: &str) -> Vec<&str> {
    calls.lines().filter(|l| !l.starts_with("create")).collect()
}

/// [`Fake`] in `dir`; `None` (said) where it cannot be built.
fn fake_provider(dir: &Path) -> Option<Fake> {
    Some(Fake {
        lib: fake_verbs(dir)?,
        root: fake_sysfs(&dir.join("sys")),
        dir: dir.to_path_buf(),
    })
}

/// The fake provider's frame number: the low 16 bits of the PSN.
fn fake_frame_number(data: &[u8]) -> usize {
    usize::from(u16::from_be_bytes([data[52], data[53]]))
}

/// Checks the fake provider's frames, all of them in order, as stamped by its NIC and turned into wall time:
/// within the run, and 1 us apart as the NIC stamped them (the host's clock at polling would not space them
/// so).
fn assert_stamped_by_the_fake_nic(got: &[(u64, u32, Vec<u8>)], run: std::ops::RangeInclusive<u64>) {
    let mut prev = 0;
    for (i, (ts, len, data)) in got.iter().enumerate() {
        assert_eq!((*len, data.len()), (74, 74), "frame {i}");
        assert_eq!(fake_frame_number(data), i);
        assert!(run.contains(ts), "frame {i}: {ts} not in {run:?}");
        if i > 0 {
            assert_eq!(*ts - prev, 1000, "frame {i}");
        }
        prev = *ts;
    }
}

/// Whether the file holds `text` (an interface description, say).
fn holds(path: &Path, text: &str) -> bool {
    let raw = std::fs::read(path).unwrap();
    raw.windows(text.len()).any(|w| w == text.as_bytes())
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

#[test]
fn the_sniffer_runs_through_a_fake_provider() {
    let dir = tempfile::tempdir().unwrap();
    let Some(fake) = fake_provider(dir.path()) else {
        return;
    };
    let oob = fake
        .root
        .join("class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer");
    put(
        &fake.root,
        "class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer",
        "0",
    );
    let out = dir.path().join("fake.pcapng");
    let start = now_ns();
    let (o, calls) = fake.capture(
        &[
            ("FAKEVERBS_FRAMES", "50"),
            ("FAKEVERBS_OOB_FILE", oob.to_str().unwrap()),
        ],
        &["--all-frames", "--duration", "2500ms"],
    );
    let end = now_ns();
    assert!(o.status.success(), "{}", stderr(&o));

    let got = records(&out);
    assert_eq!(got.len(), 50, "{}", stderr(&o));
    assert_stamped_by_the_fake_nic(&got, start..=end);
    let (views, reader) = frames(&out);
    assert_eq!(views.len(), 50);
    assert!(
        views
            .iter()
            .all(|v| v.kind == roce_core::decode::Kind::Roce && v.dest_qp == Some(0x11))
    );
    let st = reader.if_stats().first().copied().unwrap_or_default();
    assert_eq!(st.received, Some(50 + 5), "{st:?}");
    assert_eq!(
        st.dropped_iface.unwrap_or(0) + st.dropped_os.unwrap_or(0),
        5,
        "the out-of-buffer rise"
    );
    assert!(
        holds(
            &out,
            "device=mlx5_0:1 sniffer buffers=4096x4288 clock=nic(1000000 kHz, mask 0xffffffffffff)"
        ),
        "the interface description says how frames were stamped"
    );
    assert!(
        calls.contains("create_qp max_send_wr=0 max_send_sge=0\n"),
        "the sniffer asks for no send queue: {calls}"
    );
    // Everything made is undone, newest first.
    assert_eq!(
        undone_calls(&calls),
        [
            "destroy_flow",
            "destroy_qp",
            "dereg_mr",
            "destroy_cq",
            "destroy_comp_channel",
            "dealloc_pd",
            "close_device"
        ]
    );

    // The selftest a ConnectX user runs, on the fake provider.
    let o = Command::new(TRACER)
        .args([
            "selftest",
            "-i",
            "mlx5_0",
            "--duration",
            "1500ms",
            "--sysfs-root",
        ])
        .arg(&fake.root)
        .env("ROCETRACE_LIBIBVERBS", &fake.lib)
        .env("FAKEVERBS_FRAMES", "30")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}{}", stderr(&o));
    assert!(
        text.contains("PASS: 30 frames, 30 RoCE and 0 CNP"),
        "{text}"
    );

    // Refusals, and the undoing of what was made before them.
    const MADE_TO_PD: [&str; 2] = ["dealloc_pd", "close_device"];
    let to_qp = ["destroy_cq", "destroy_comp_channel"];
    let to_mr = ["destroy_qp"];
    let to_flow = ["destroy_qp", "dereg_mr"];
    for (var, errno, says, undone) in [
        (
            "FAKEVERBS_FLOW_ERRNO",
            "95",
            "the NIC refused the sniffer flow rule on mlx5_0:1",
            [&to_flow[..], &to_qp, &MADE_TO_PD].concat(),
        ),
        (
            "FAKEVERBS_FLOW_ERRNO",
            "1",
            "ibv_create_flow on mlx5_0:1 is not permitted",
            [&to_flow[..], &to_qp, &MADE_TO_PD].concat(),
        ),
        (
            "FAKEVERBS_QP_ERRNO",
            "1",
            "ibv_create_qp (raw packet) on mlx5_0:1 is not permitted",
            [&to_qp[..], &MADE_TO_PD].concat(),
        ),
        // Not the locked-memory limit, which root's CAP_IPC_LOCK lifts: the errno as it is.
        (
            "FAKEVERBS_MR_ERRNO",
            "14",
            "pinning 16 MiB of receive buffers on mlx5_0:1 failed: Bad address",
            [&to_mr[..], &to_qp, &MADE_TO_PD].concat(),
        ),
        // The errno is the one ibv_open_device left, not what freeing the device list after it left.
        (
            "FAKEVERBS_OPEN_ERRNO",
            "19",
            "ibv_open_device on mlx5_0:1 failed: No such device",
            Vec::new(),
        ),
    ] {
        let (o, calls) = fake.capture(&[(var, errno)], &[]);
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains(says), "{var}={errno}: {e}");
        assert!(!e.contains("Inappropriate ioctl"), "{var}={errno}: {e}");
        assert_eq!(undone_calls(&calls), undone, "{var}={errno}: {calls}");
    }

    // ENOMEM from ibv_reg_mr blames the locked-memory limit only where it binds: not for root, whose
    // CAP_IPC_LOCK lifts it, but for a process without that capability under a small limit.
    let enomem = [("FAKEVERBS_MR_ERRNO", "12")];
    let (o, _) = fake.capture(&enomem, &[]);
    let e = stderr(&o);
    assert!(
        e.contains("Cannot allocate memory") && e.contains("not the locked-memory limit"),
        "{e}"
    );
    if !is_root() || !have("setpriv") || !have("prlimit") {
        cannot_run_here(
            "the rdma engine's locked-memory advice under a binding limit: needs root, setpriv and prlimit",
        );
        return;
    }
    let bound = [
        "setpriv",
        "--bounding-set",
        "-ipc_lock",
        "prlimit",
        "--memlock=65536:65536",
        "--",
    ];
    let (o, _) = fake.capture_under(&bound, &enomem, &[]);
    let e = stderr(&o);
    assert!(
        e.contains("under a locked-memory limit of 64 KiB") && e.contains("ulimit -l unlimited"),
        "{e}"
    );
}

#[test]
fn a_failing_poll_ends_the_port_loudly_and_a_busy_one_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let Some(fake) = fake_provider(dir.path()) else {
        return;
    };
    // 50 frames, ibv_next_poll failing with `errno` on the 11th: whether the tracer succeeded, what it said,
    // and the frames written.
    let failing_at_10 = |errno: &str, duration: &str| {
        let env = [
            ("FAKEVERBS_FRAMES", "50"),
            ("FAKEVERBS_POLL_ERRNO", errno),
            ("FAKEVERBS_POLL_AT", "10"),
        ];
        let (o, _) = fake.capture(&env, &["--duration", duration]);
        let written: Vec<usize> = records(&dir.path().join("fake.pcapng"))
            .iter()
            .map(|(_, _, d)| fake_frame_number(d))
            .collect();
        (o.status.success(), stderr(&o), written)
    };
    // An error: the ten frames before it are written, and the port's capture ends with the call, the port,
    // the errno and the count, instead of going on without that frame.
    let (_, e, written) = failing_at_10("5", "5s");
    assert!(
        e.contains(
            "ibv_next_poll on mlx5_0:1 failed (Input/output error (os error 5)) after 10 completions"
        ) && e.contains("its capture ended"),
        "{e}"
    );
    assert_eq!(written, (0..10).collect::<Vec<_>>(), "{e}");
    // EBUSY (a clock update racing the poll) leaves the completion queued: every frame arrives, and
    // nothing is said.
    let (ok, e, written) = failing_at_10("16", "1500ms");
    assert!(ok, "{e}");
    assert!(!e.contains("failed") && !e.contains("EBUSY"), "{e}");
    assert_eq!(written, (0..50).collect::<Vec<_>>(), "{e}");
}

#[test]
fn a_nic_that_refuses_the_raw_counter_is_captured_with_the_best_stamps_it_gives() {
    let dir = tempfile::tempdir().unwrap();
    let Some(fake) = fake_provider(dir.path()) else {
        return;
    };
    let out = dir.path().join("fake.pcapng");
    let run = |clock: &str| {
        let env = [("FAKEVERBS_FRAMES", "50"), ("FAKEVERBS_CLOCK", clock)];
        let start = now_ns();
        let (o, calls) = fake.capture(&env, &["--duration", "1500ms"]);
        let e = stderr(&o);
        assert!(o.status.success(), "{clock}: {e}");
        (start..=now_ns(), e, calls)
    };
    let qp = "create_qp max_send_wr=0 max_send_sge=0";

    // A NIC set to real-time timestamps: the raw QP refuses a CQ that asks for the free-running counter,
    // and takes one that asks for wall-clock stamps, which the NIC writes as seconds:nanoseconds.
    let (span, e, calls) = run("real-time");
    assert_eq!(
        calls.lines().take(5).collect::<Vec<_>>(),
        [
            "create_cq timestamps=free-running",
            qp,
            "destroy_cq",
            "create_cq timestamps=wallclock",
            qp
        ],
    );
    assert!(
        e.contains(
            "roce-tracer: mlx5_0: timestamps from the NIC's stamps in wall-clock time, as the provider \
             gives them (ibv_wc_read_completion_wallclock_ns): the time of its PTP hardware clock, \
             because ibv_create_qp (raw packet) refused free-running NIC timestamps (Operation not \
             supported (os error 95)), as mlx5 does when the NIC's clock is set to real time"
        ),
        "{e}"
    );
    let got = records(&out);
    assert_eq!(got.len(), 50, "{e}");
    assert_stamped_by_the_fake_nic(&got, span);
    assert!(holds(&out, "clock=nic(wallclock)"));

    // A NIC that stamps nothing: both kinds of stamps are refused with the CQ, and the host stamps.
    let (span, e, calls) = run("none");
    assert_eq!(
        calls.lines().take(4).collect::<Vec<_>>(),
        [
            "create_cq timestamps=free-running",
            "create_cq timestamps=wallclock",
            "create_cq timestamps=none",
            qp
        ],
    );
    assert!(
        e.contains(
            "roce-tracer: mlx5_0: timestamps from the host's clock when each completion is polled"
        ) && e.contains(
            "because ibv_create_cq_ex refused free-running NIC timestamps (Operation not supported \
             (os error 95)), then ibv_create_cq_ex refused wall-clock NIC timestamps"
        ),
        "{e}"
    );
    let got = records(&out);
    assert_eq!(got.len(), 50, "{e}");
    assert!(got.iter().all(|(ts, _, _)| span.contains(ts)));
    assert!(holds(&out, "clock=host(when polled)"));
}
