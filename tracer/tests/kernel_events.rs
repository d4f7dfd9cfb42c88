//! `--kernel-events`: RoCEv2 frames sent to an address of the namespace where nothing listens on UDP 4791
//! are dropped by the kernel, and the capture's `DROP` block must count them, with either engine.

mod common;

use analyzer::sink::PcapWriter;
use analyzer::source::LinkType;
use common::*;
use roce_wire::build::{IpSpec, RoceFrame};
use roce_wire::{BthRepr, ExtHeaders, Opcode};

const SENT: u32 = 40;

/// `SENT` RoCEv2 SEND frames from 10.77.0.1 to 10.77.0.2 (vb's address), as a pcap for tcpreplay.
fn write_frames(path: &std::path::Path) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = PcapWriter::new(std::io::BufWriter::new(file), LinkType::ETHERNET, 65535).unwrap();
    let payload = [0x42u8; 64];
    for psn in 0..SENT {
        let frame = RoceFrame {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            vlan: None,
            ip: IpSpec::V4 {
                src: [10, 77, 0, 1],
                dst: [10, 77, 0, 2],
                dscp: 26,
                ecn: 2,
                ttl: 64,
                ident: psn as u16,
            },
            sport: 49152,
            bth: BthRepr {
                opcode: Opcode::RC_SEND_ONLY,
                se: false,
                migreq: true,
                pad_count: 0,
                tver: 0,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: 0x11,
                ack_req: false,
                psn,
            },
            ext: ExtHeaders::default(),
            payload: &payload,
        };
        let mut buf = [0u8; 256];
        let n = frame.emit(&mut buf).unwrap();
        w.write_packet(u64::from(psn) * 1000, &buf[..n], n as u32)
            .unwrap();
    }
    w.into_inner().unwrap();
}

/// The tracepoint systems this kernel has, seen from a namespace (where `ip netns exec` remounts /sys, so
/// tracefs is mounted afresh for the look).
fn trace_systems(ns: &Netns) -> Vec<String> {
    let out = ns
        .cmd("sh")
        .args([
            "-c",
            "mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null; ls /sys/kernel/tracing/events",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn drops_with(engine: &str) {
    let what = format!("kernel_events_count_dropped_roce_{engine}");
    if !require_netns(&what) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let frames_path = dir.path().join("roce.pcap");
    write_frames(&frames_path);
    let ns = Netns::new(&format!("ke{}", &engine[..1]));
    for args in [
        &["link", "set", "vb", "address", "02:00:00:00:00:02"][..],
        &["addr", "add", "10.77.0.2/24", "dev", "vb"],
    ] {
        let out = ns.cmd("ip").args(args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}");
    }
    // Reverse-path filtering would drop the frames earlier, under another reason.
    for key in [
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.vb.rp_filter=0",
    ] {
        let _ = ns.cmd("sysctl").args(["-qw", key]).output();
    }
    let out = dir.path().join("cap.pcapng");
    let child = ns.start_tracer(
        dir.path(),
        &[
            "-i",
            "vb",
            "--engine",
            engine,
            "-w",
            out.to_str().unwrap(),
            "--kernel-events",
        ],
    );
    let result = ns.replay_and_stop(child, &frames_path, 1, 15);
    let stderr = String::from_utf8_lossy(&result.stderr);

    // Every requested tracepoint is listed, and those this kernel lacks are named as unavailable.
    let line = stderr
        .lines()
        .find(|l| l.contains("kernel events:"))
        .unwrap_or_else(|| panic!("no tracepoint line in {stderr}"));
    let systems = trace_systems(&ns);
    assert!(systems.iter().any(|s| s == "skb"), "{systems:?}");
    let unavailable = line
        .split("unavailable on this kernel: ")
        .nth(1)
        .unwrap_or("");
    for (system, name) in [
        ("rdma_cma", "rdma_cma:cm_qp_create"),
        ("ib_mad", "ib_mad:*"),
    ] {
        assert!(line.contains(name), "{name} not listed: {line}");
        if !systems.iter().any(|s| s == system) {
            assert!(
                unavailable.contains(name),
                "{name} not listed as unavailable: {line}"
            );
        }
    }

    let (captured, _) = frames(&out);
    let ours = captured.iter().filter(|f| f.dest_qp == Some(0x11)).count();
    assert_eq!(ours, SENT as usize, "captured {ours} of {SENT}");
    let drops: Vec<serde_json::Value> = custom_blocks(&out)
        .iter()
        .filter_map(|b| tracer::blocks::decode(b))
        .filter(|(k, _)| *k == tracer::blocks::DROPS)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(drops.len(), 1, "one DROP block without rotation");
    let rows = drops[0]["drops"].as_array().expect("drops array");
    let no_socket: u64 = rows
        .iter()
        .filter(|r| r["protocol"] == "ipv4" && r["reason"] == "NO_SOCKET")
        .filter_map(|r| r["count"].as_u64())
        .sum();
    assert!(
        no_socket >= u64::from(SENT),
        "{no_socket} ipv4 NO_SOCKET drops for {SENT} frames sent: {rows:?}"
    );
}

#[test]
fn pcap_engine_counts_dropped_roce() {
    drops_with("pcap");
}

#[test]
fn ebpf_engine_counts_dropped_roce() {
    drops_with("ebpf");
}
