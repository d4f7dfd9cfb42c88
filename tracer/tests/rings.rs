//! The eBPF engine's rings, one per CPU, live: a veth pair with two transmit and two receive queues, a
//! sender pinned to each of two CPUs (so the probe runs on both, each writing into its own CPU's ring),
//! and the capture read back frame by frame. Every frame is unique (a QP per sender, a PSN per frame), so
//! "every frame once" is checked frame by frame, and each ring's counts against what its CPU's sender sent.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use roce_capture::LinkType;
use roce_capture::write::PcapWriter;
use roce_core::decode::{Decoder, Kind};
use roce_wire::{BthRepr, ExtHeaders, Opcode};

/// Frames each sender sends.
const PER_SENDER: u32 = 20_000;

/// The QP of sender `k`'s frames.
fn qp_of(k: usize) -> u32 {
    0x100 + k as u32
}

/// `PER_SENDER` RoCEv2 SEND ONLY frames to QP `qp_of(k)`, PSNs 0, 1, ..., as a pcap tcpreplay sends.
fn write_sender(k: usize, path: &Path) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = PcapWriter::new(std::io::BufWriter::new(file), LinkType::ETHERNET, 65535).unwrap();
    for psn in 0..PER_SENDER {
        let frame = testkit::frames::v4_frame(
            1 + k as u8,
            9,
            2,
            BthRepr::new(Opcode::RC_SEND_ONLY, qp_of(k), psn),
            ExtHeaders::default(),
            &[0x5a; 64],
        );
        w.write_packet(u64::from(psn), &frame, frame.len() as u32)
            .unwrap();
    }
    w.into_inner().unwrap();
}

/// The first two online CPUs, or why the test cannot use two.
fn two_cpus() -> Option<[u32; 2]> {
    let online = aya::util::online_cpus().ok()?;
    match online.as_slice() {
        [a, b, ..] => Some([*a, *b]),
        _ => None,
    }
}

/// What the capture holds: per (QP, PSN) how often, the timestamps in file order, and the statistics.
struct Capture {
    seen: BTreeMap<(u32, u32), u32>,
    stamps: Vec<u64>,
    received: Option<u64>,
    dropped: u64,
    rings: Vec<serde_json::Value>,
}

fn read_back(path: &Path) -> Capture {
    let decoder = Decoder::default();
    let mut seen = BTreeMap::new();
    let mut stamps = Vec::new();
    let mut n = 0;
    let reader = testkit::frames::for_each_frame(path, |rec| {
        n += 1;
        let f = decoder.decode(n, rec);
        assert_eq!(f.kind, Kind::Roce, "frame {n}");
        let bth = f.bth().expect("a BTH");
        *seen.entry((bth.dest_qp, bth.psn)).or_insert(0) += 1;
        stamps.push(rec.ts_ns);
    });
    let st = reader.if_stats().first().copied().unwrap_or_default();
    let prob = custom_blocks(path)
        .iter()
        .filter_map(|b| raw_record(b))
        .find(|(kind, _)| kind == b"PROB")
        .map(|(_, v)| v)
        .expect("a PROB block");
    Capture {
        seen,
        stamps,
        received: st.received,
        dropped: st.dropped_iface.unwrap_or(0) + st.dropped_os.unwrap_or(0),
        rings: prob["rings"].as_array().cloned().unwrap_or_default(),
    }
}

/// The namespace's second veth pair, `qa` ↔ `qb`, with two queues each way.
fn multiqueue_pair(ns: &Netns) {
    for args in [
        &[
            "link",
            "add",
            "name",
            "qa",
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
            "type",
            "veth",
            "peer",
            "name",
            "qb",
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
        ][..],
        &["link", "set", "dev", "qa", "up"],
        &["link", "set", "dev", "qb", "up"],
    ] {
        let out = Command::new("ip")
            .args(["-n", &ns.name])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
    }
}

/// Captures `qb` with `extra` options while each sender replays its file into `qa` pinned to its CPU, both
/// at once, and returns what the file holds.
fn capture_two_senders(tag: &str, cpus: [u32; 2], extra: &[&str]) -> Capture {
    let dir = tempfile::tempdir().unwrap();
    let ns = netns(tag);
    multiqueue_pair(&ns);
    let files: Vec<_> = (0..2)
        .map(|k| {
            let p = dir.path().join(format!("sender{k}.pcap"));
            write_sender(k, &p);
            p
        })
        .collect();
    let out = dir.path().join("cap.pcapng");
    let mut args = vec!["-i", "qb", "-w", out.to_str().unwrap(), "--engine", "ebpf"];
    args.extend_from_slice(extra);
    let child = ns.start_tracer(dir.path(), &args);
    let senders: Vec<_> = files
        .iter()
        .zip(cpus)
        .map(|(file, cpu)| {
            ns.cmd("taskset")
                .args(["-c", &cpu.to_string(), "tcpreplay", "-q", "-t", "-i", "qa"])
                .arg(file)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for s in senders {
        let out = s.wait_with_output().unwrap();
        assert!(out.status.success(), "tcpreplay: {out:?}");
    }
    stop(child, 30);
    read_back(&out)
}

/// The ring the probe used on `cpu`, from the PROB block's rows.
fn ring_of(rings: &[serde_json::Value], cpu: u32) -> &serde_json::Value {
    rings
        .iter()
        .find(|r| {
            r["cpus"]
                .as_array()
                .is_some_and(|c| c.iter().any(|x| x.as_u64() == Some(u64::from(cpu))))
        })
        .unwrap_or_else(|| panic!("no ring for CPU {cpu} in {rings:?}"))
}

fn field(v: &serde_json::Value, name: &str) -> u64 {
    v[name].as_u64().unwrap_or_else(|| panic!("{name} in {v}"))
}

fn prerequisites(what: &str) -> Option<[u32; 2]> {
    if !require_netns(what) || !require(what, have("taskset"), "needs taskset (util-linux)") {
        return None;
    }
    let cpus = two_cpus();
    if cpus.is_none() {
        cannot_run_here(&format!("{what}: needs two online CPUs"));
    }
    cpus
}

/// Two CPUs' frames, read by one reader and by two: each frame once, in timestamp order, and each ring
/// holding exactly its CPU's sender's frames.
#[test]
fn two_cpus_rings_are_merged_in_time_order_every_frame_once() {
    let what = "two_cpus_rings_are_merged_in_time_order_every_frame_once";
    let Some(cpus) = prerequisites(what) else {
        return;
    };
    for threads in ["1", "2"] {
        let got = capture_two_senders(&format!("m{threads}"), cpus, &["--threads", threads]);
        let sent = 2 * u64::from(PER_SENDER);
        for k in 0..2 {
            for psn in 0..PER_SENDER {
                assert_eq!(
                    got.seen.get(&(qp_of(k), psn)).copied(),
                    Some(1),
                    "--threads {threads}: QP {:#x} PSN {psn}",
                    qp_of(k)
                );
            }
        }
        assert_eq!(got.stamps.len() as u64, sent, "--threads {threads}");
        let disorder = got.stamps.windows(2).filter(|w| w[1] < w[0]).count();
        assert_eq!(disorder, 0, "--threads {threads}: frames out of time order");
        assert_eq!((got.received, got.dropped), (Some(sent), 0));
        // Each sender's CPU wrote into its own ring, and the reader read all of it.
        for (k, &cpu) in cpus.iter().enumerate() {
            let ring = ring_of(&got.rings, cpu);
            for (name, want) in [
                ("emitted", u64::from(PER_SENDER)),
                ("read", u64::from(PER_SENDER)),
                ("lost", 0),
                ("late", 0),
            ] {
                assert_eq!(
                    field(ring, name),
                    want,
                    "--threads {threads}, sender {k}: {name}"
                );
            }
        }
    }
}

/// Rings of 8 KiB, which a burst overflows at once: the loss each ring reports is exactly what its CPU's
/// sender sent and the file lacks, and the interface's statistics add up to what was sent.
#[test]
fn tiny_rings_report_each_rings_exact_loss() {
    let what = "tiny_rings_report_each_rings_exact_loss";
    let Some(cpus) = prerequisites(what) else {
        return;
    };
    let got = capture_two_senders("mt", cpus, &["--threads", "2", "--ring-bytes", "8192"]);
    let sent = 2 * u64::from(PER_SENDER);
    let mut lost = 0;
    for (k, &cpu) in cpus.iter().enumerate() {
        let ring = ring_of(&got.rings, cpu);
        assert_eq!(field(ring, "bytes"), 8192, "{ring}");
        let written = got.seen.keys().filter(|(qp, _)| *qp == qp_of(k)).count() as u64;
        assert_eq!(field(ring, "read"), written, "sender {k}: {ring}");
        assert_eq!(field(ring, "emitted"), written, "sender {k}: {ring}");
        assert_eq!(
            written + field(ring, "lost"),
            u64::from(PER_SENDER),
            "sender {k}: written + lost != sent: {ring}"
        );
        lost += field(ring, "lost");
    }
    assert!(got.seen.values().all(|&n| n == 1), "a frame written twice");
    assert!(
        lost > 0,
        "8 KiB rings should overflow under {sent} frames at full speed"
    );
    assert_eq!((got.received, got.dropped), (Some(sent), lost));
}
