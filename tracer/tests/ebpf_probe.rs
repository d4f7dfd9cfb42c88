//! The eBPF probe, run by the kernel on crafted frames through `BPF_PROG_TEST_RUN` (no NIC, no namespace),
//! checked against the analyzer's decoder (which reads the BTH through roce-wire); and the eBPF engine end
//! to end on a veth pair.

mod common;

use std::collections::BTreeMap;

use analyzer::decode::{Decoder, Kind};
use analyzer::source::{LinkType, Record};
use aya::TestRunOptions;
use aya::programs::{SchedClassifier, TestRun as _};
use std::process::Command;

use common::*;
use roce_wire::build::{IpSpec, RoceFrame, Vlan, emit_mac_control};
use roce_wire::ext::{DethRepr, RethRepr};
use roce_wire::pfc::{MacControlRepr, PfcRepr};
use roce_wire::{BthRepr, ExtHeaders, Opcode};
use tracer::engine::ebpf::{self, RingRecord};
use tracer_common::Config;

fn roce(
    ip: IpSpec,
    vlan: Option<Vlan>,
    opcode: Opcode,
    qp: u32,
    psn: u32,
    payload: usize,
) -> Vec<u8> {
    let ext = if opcode == Opcode::RC_RDMA_WRITE_FIRST {
        ExtHeaders {
            reth: Some(RethRepr {
                va: 0x1000,
                rkey: 0x42,
                dma_len: 8192,
            }),
            ..ExtHeaders::default()
        }
    } else if opcode == Opcode::UD_SEND_ONLY {
        ExtHeaders {
            deth: Some(DethRepr {
                qkey: 0x1111_2222,
                src_qp: 0x99,
            }),
            ..ExtHeaders::default()
        }
    } else {
        ExtHeaders::default()
    };
    let body = vec![0xa5u8; payload];
    let f = RoceFrame {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        vlan,
        ip,
        sport: 49999,
        bth: BthRepr {
            migreq: true,
            becn: opcode == Opcode::CNP,
            ..BthRepr::new(opcode, qp, psn)
        },
        ext,
        payload: if opcode == Opcode::CNP {
            &[0; 16]
        } else {
            &body
        },
    };
    let mut buf = vec![0u8; 2048];
    let n = f.emit(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

fn v4(ecn: u8) -> IpSpec {
    IpSpec::V4 {
        src: [192, 168, 1, 1],
        dst: [192, 168, 1, 2],
        dscp: 26,
        ecn,
        ttl: 64,
        ident: 3,
    }
}

fn v6(ecn: u8) -> IpSpec {
    IpSpec::V6 {
        src: [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        dst: [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        dscp: 26,
        ecn,
        flow_label: 5,
        hop_limit: 64,
    }
}

/// Every case the probe must tell apart, with a name for failure messages.
fn cases() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = vec![
        (
            "rc write first v4 CE",
            roce(v4(3), None, Opcode::RC_RDMA_WRITE_FIRST, 0x10, 100, 256),
        ),
        (
            "rc send only v4 ECT0",
            roce(v4(2), None, Opcode::RC_SEND_ONLY, 0x10, 101, 64),
        ),
        (
            "tagged pcp 3",
            roce(
                v4(2),
                Some(Vlan {
                    pcp: 3,
                    dei: false,
                    vid: 10,
                }),
                Opcode::RC_SEND_ONLY,
                0x20,
                7,
                64,
            ),
        ),
        (
            "ud send only v6",
            roce(v6(1), None, Opcode::UD_SEND_ONLY, 0x30, 9, 128),
        ),
        ("cnp v6", roce(v6(1), None, Opcode::CNP, 0x10, 0, 0)),
        (
            "cnp v4 tagged",
            roce(
                v4(0),
                Some(Vlan {
                    pcp: 6,
                    dei: false,
                    vid: 10,
                }),
                Opcode::CNP,
                0x20,
                0,
                0,
            ),
        ),
    ];
    let mut buf = [0u8; 128];
    let pfc = MacControlRepr::Pfc(PfcRepr {
        enable: 0b0000_1001,
        quanta: [0xffff, 0, 0, 0, 0, 0, 0, 0],
    });
    let n = emit_mac_control([2, 0, 0, 0, 0, 9], None, &pfc, &mut buf).unwrap();
    out.push(("pfc xoff 0, xon 3", buf[..n].to_vec()));
    let pause = MacControlRepr::Pause { quanta: 0x100 };
    let n = emit_mac_control([2, 0, 0, 0, 0, 9], None, &pause, &mut buf).unwrap();
    out.push(("pause", buf[..n].to_vec()));
    // Cut inside the BTH: RoCE by its UDP port, no BTH.
    let mut cut = roce(v4(0), None, Opcode::RC_SEND_ONLY, 0x40, 1, 64);
    cut.truncate(14 + 20 + 8 + 6);
    out.push(("truncated in the BTH", cut));
    // Not RoCE: UDP to 4792.
    let mut other = roce(v4(0), None, Opcode::RC_SEND_ONLY, 0x50, 1, 64);
    other[14 + 20 + 3] = 0xb8;
    out.push(("udp 4792", other));
    // Not RoCE: ARP.
    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.extend_from_slice(&[0; 46]);
    out.push(("arp", arp));
    out
}

fn analyzer_kind(data: &[u8]) -> Kind {
    let rec = Record {
        iface: 0,
        link: LinkType::ETHERNET,
        ts_ns: 0,
        caplen: data.len() as u32,
        len: data.len() as u32,
        data,
        offset: 0,
    };
    Decoder::default().decode(1, &rec).kind
}

fn load_or_skip(what: &str, config: Config, ring: Option<u32>) -> Option<aya::Ebpf> {
    if !require(what, is_root(), "needs root to load eBPF programs") {
        return None;
    }
    match ebpf::load_probe(config, ring) {
        Ok(e) => Some(e),
        Err(e) => {
            let mut msg = e.to_string();
            let mut cause: Option<&dyn std::error::Error> = std::error::Error::source(&e);
            while let Some(c) = cause {
                msg.push_str(&format!(": {c}"));
                cause = c.source();
            }
            require(what, false, &format!("the probe does not load: {msg}"));
            None
        }
    }
}

#[test]
fn probe_agrees_with_the_analyzer_on_crafted_frames() {
    let Some(mut bpf) = load_or_skip(
        "probe_agrees_with_the_analyzer_on_crafted_frames",
        Config {
            snaplen: 2048,
            all_frames: 0,
        },
        None,
    ) else {
        return;
    };
    let mut ring = ebpf::take_ring(&mut bpf).unwrap();
    let cases = cases();
    // What the per-QP and per-priority maps must hold, computed from the analyzer's decode.
    let mut want_qp: BTreeMap<u32, (u64, u64, u64, u64)> = BTreeMap::new();
    let mut want_prio: BTreeMap<Option<u8>, (u64, u64)> = BTreeMap::new();
    for (name, frame) in &cases {
        let prog: &mut SchedClassifier =
            bpf.program_mut(ebpf::INGRESS).unwrap().try_into().unwrap();
        let result = prog
            .test_run(TestRunOptions {
                data_in: Some(frame),
                ..TestRunOptions::default()
            })
            .unwrap_or_else(|e| panic!("{name}: test run failed: {e}"));
        // TC_ACT_UNSPEC / TCX_NEXT: the probe never decides a frame's fate.
        assert_eq!(result.return_value as i32, -1, "{name}");

        let rec = ring
            .next()
            .map(|item| RingRecord::parse(&item).expect("record"));
        let kind = analyzer_kind(frame);
        if kind == Kind::Other {
            assert!(rec.is_none(), "{name}: not RoCE, yet sent to userspace");
            continue;
        }
        let rec = rec.unwrap_or_else(|| panic!("{name}: no ring record"));
        assert_eq!(
            rec.kind, kind as u32,
            "{name}: kernel kind vs analyzer kind"
        );
        assert_eq!(rec.data, *frame, "{name}: captured bytes");
        assert_eq!(rec.wire_len as usize, frame.len(), "{name}");
        assert!(rec.ts_ns > 0, "{name}");

        // The analyzer's view of the same bytes gives the expected counters.
        let r = Record {
            iface: 0,
            link: LinkType::ETHERNET,
            ts_ns: 0,
            caplen: frame.len() as u32,
            len: frame.len() as u32,
            data: frame,
            offset: 0,
        };
        let f = Decoder::default().decode(1, &r);
        let ce = u64::from(f.ip.is_some_and(|i| i.ecn == 3));
        if let Some(bth) = f.bth() {
            let e = want_qp.entry(bth.dest_qp).or_default();
            if f.kind == Kind::Cnp {
                e.3 += 1;
            } else {
                e.0 += 1;
                e.1 += frame.len() as u64;
                e.2 += ce;
            }
        }
        match f.kind {
            Kind::Roce | Kind::Cnp => want_prio.entry(f.pcp).or_default().0 += 1,
            Kind::Pfc => {
                if let Some(MacControlRepr::Pfc(p)) = f.mac_control {
                    for prio in 0..8u8 {
                        if p.enable & (1 << prio) != 0 {
                            want_prio.entry(Some(prio)).or_default().1 += 1;
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let st = ebpf::probe_stats(&bpf).unwrap();
    assert_eq!(st.seen, cases.len() as u64);
    assert_eq!(st.ring_full, 0);
    assert_eq!(st.emitted, st.matched);
    let got_qp: BTreeMap<u32, (u64, u64, u64, u64)> = st
        .qps
        .iter()
        .map(|q| (q.dest_qp, (q.packets, q.bytes, q.ce, q.cnps)))
        .collect();
    assert_eq!(got_qp, want_qp);
    let got_prio: BTreeMap<Option<u8>, (u64, u64)> = st
        .prios
        .iter()
        .filter(|p| p.roce_packets + p.pfc_frames > 0)
        .map(|p| (p.priority, (p.roce_packets, p.pfc_frames)))
        .collect();
    assert_eq!(got_prio, want_prio);
    let xoff: u64 = st.prios.iter().map(|p| p.pfc_xoff).sum();
    let xon: u64 = st.prios.iter().map(|p| p.pfc_xon).sum();
    assert_eq!(
        (xoff, xon),
        (1, 1),
        "PFC naming priorities 0 (time 0xffff) and 3 (time 0)"
    );
    let pauses: u64 = st.prios.iter().map(|p| p.pause_frames).sum();
    assert_eq!(pauses, 1);
}

#[test]
fn snaplen_cuts_the_copy_not_the_counting() {
    let Some(mut bpf) = load_or_skip(
        "snaplen_cuts_the_copy_not_the_counting",
        Config {
            snaplen: 60,
            all_frames: 0,
        },
        None,
    ) else {
        return;
    };
    let mut ring = ebpf::take_ring(&mut bpf).unwrap();
    let frame = roce(v4(3), None, Opcode::RC_SEND_ONLY, 0x77, 5, 900);
    let prog: &mut SchedClassifier = bpf.program_mut(ebpf::EGRESS).unwrap().try_into().unwrap();
    prog.test_run(TestRunOptions {
        data_in: Some(&frame),
        ..TestRunOptions::default()
    })
    .unwrap();
    let rec = ring.next().map(|i| RingRecord::parse(&i).unwrap()).unwrap();
    assert_eq!(rec.data, frame[..60]);
    assert_eq!(rec.wire_len as usize, frame.len());
    assert_ne!(rec.flags & tracer_common::flag::EGRESS, 0);
    let st = ebpf::probe_stats(&bpf).unwrap();
    assert_eq!(st.qps.len(), 1);
    assert_eq!(st.qps[0].bytes, frame.len() as u64);
    assert_eq!(st.qps[0].ce, 1);
}

/// The capture tests of this binary take turns: they count the probe's TCX links machine-wide.
static CAPTURES: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_capture_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    CAPTURES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Programs named `tracer_*` that hang off a BPF link anywhere (TCX links are per interface; only this test
/// makes them, and the test-run tests in this binary load programs without links).
fn tracer_links() -> usize {
    let out = Command::new("bpftool")
        .args(["-j", "link", "show"])
        .output()
        .unwrap();
    let links: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    links
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| l["prog_id"].as_u64())
                .filter(|id| {
                    let p = Command::new("bpftool")
                        .args(["-j", "prog", "show", "id", &id.to_string()])
                        .output()
                        .unwrap();
                    let prog: serde_json::Value =
                        serde_json::from_slice(&p.stdout).unwrap_or_default();
                    prog["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("tracer_"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Neither a tc filter, a clsact qdisc nor a TCX link of ours is left.
fn assert_nothing_attached(ns: &Netns) {
    for dir in ["ingress", "egress"] {
        let out = ns
            .cmd("tc")
            .args(["filter", "show", "dev", "vb", dir])
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).trim().is_empty(),
            "tc filter left on {dir}"
        );
    }
    let q = ns
        .cmd("tc")
        .args(["qdisc", "show", "dev", "vb"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&q.stdout).contains("clsact"),
        "clsact left"
    );
    assert_eq!(tracer_links(), 0, "a TCX link of the probe is left");
}

#[test]
fn ebpf_engine_captures_the_corpus_and_leaves_nothing_behind() {
    if !require_netns("ebpf_engine_captures_the_corpus_and_leaves_nothing_behind")
        || !require(
            "ebpf_engine_captures_the_corpus_and_leaves_nothing_behind",
            have("bpftool"),
            "needs bpftool",
        )
    {
        return;
    }
    let _turn = one_capture_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let ns = Netns::new("eb");
    let replay = dir.path().join("replay.pcap");
    let sent = replayable(&corpus(), &replay);
    let out = dir.path().join("cap.pcapng");
    let child = ns.start_tracer(
        dir.path(),
        &[
            "-i",
            "vb",
            "-w",
            out.to_str().unwrap(),
            "--engine",
            "ebpf",
            "-s",
            "2048",
        ],
    );
    ns.replay_and_stop(child, &replay, 1, 20);
    let (want, _) = frames(&replay);
    let (got, reader) = frames(&out);
    assert_eq!(got.len(), sent);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "frame {} differs", i + 1);
    }
    assert_eq!(stats_view(&stats(&out)), stats_view(&stats(&replay)));
    let st = reader.if_stats().first().copied().unwrap_or_default();
    assert_eq!(st.received, Some(sent as u64));
    assert_nothing_attached(&ns);

    // After SIGKILL too: the TCX links die with the process.
    let child = ns.start_tracer(
        dir.path(),
        &[
            "-i",
            "vb",
            "-w",
            dir.path().join("k.pcapng").to_str().unwrap(),
            "--engine",
            "ebpf",
        ],
    );
    assert_eq!(tracer_links(), 2, "ingress and egress links while running");
    signal(&child, "KILL");
    let _ = wait(child, 10);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_nothing_attached(&ns);
}

#[test]
fn ring_overflow_is_counted_frame_for_frame() {
    if !require_netns("ring_overflow_is_counted_frame_for_frame") {
        return;
    }
    let _turn = one_capture_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let ns = Netns::new("lo");
    let replay = dir.path().join("replay.pcap");
    let per_pass = replayable(&corpus(), &replay);
    let passes = 40;
    let sent = per_pass * passes as usize;
    let out = dir.path().join("cap.pcapng");
    // A 16 KiB ring holds 7 records of 2 KiB: a burst at full speed overflows it.
    let child = ns.start_tracer(
        dir.path(),
        &[
            "-i",
            "vb",
            "-w",
            out.to_str().unwrap(),
            "--engine",
            "ebpf",
            "-s",
            "2048",
            "--ring-bytes",
            "16384",
        ],
    );
    ns.replay_and_stop(child, &replay, passes, 20);
    let (got, reader) = frames(&out);
    let st = reader.if_stats().first().copied().unwrap_or_default();
    let dropped = st.dropped_iface.unwrap_or(0) + st.dropped_os.unwrap_or(0);
    assert_eq!(
        got.len() as u64 + dropped,
        sent as u64,
        "captured {} + dropped {dropped} != sent {sent}",
        got.len()
    );
    assert_eq!(st.received, Some(sent as u64));
    assert!(
        dropped > 0,
        "a 16 KiB ring should overflow under {sent} back-to-back frames"
    );
}

/// The probe's own cost per frame, measured by the kernel over many runs of one RoCE frame (the issue's
/// target is 150 ns). A measurement, not a check: run it with `cargo test -p tracer --test ebpf_probe --
/// --ignored --nocapture` on an idle machine.
#[test]
#[ignore = "benchmark (needs kernel.bpf_stats_enabled): run with --ignored to refresh BENCHMARKS.md"]
fn probe_cost_per_frame() {
    // Snap length 0 counts only; 256 also copies the headers to the ring.
    for snaplen in [0u32, 256] {
        let Some(mut bpf) = load_or_skip(
            "probe_cost_per_frame",
            Config {
                snaplen,
                all_frames: 0,
            },
            None,
        ) else {
            return;
        };
        let mut ring = ebpf::take_ring(&mut bpf).unwrap();
        let frame = roce(v4(2), None, Opcode::RC_RDMA_WRITE_FIRST, 0x10, 1, 1024);
        let prog: &mut SchedClassifier =
            bpf.program_mut(ebpf::INGRESS).unwrap().try_into().unwrap();
        let mut best = u128::MAX;
        for _ in 0..20 {
            let r = prog
                .test_run(TestRunOptions {
                    data_in: Some(&frame),
                    repeat: 10_000,
                    ..TestRunOptions::default()
                })
                .unwrap();
            while ring.next().is_some() {}
            best = best.min(r.duration.as_nanos());
        }
        println!(
            "probe: snaplen {snaplen}: {best} ns per frame (best of 20 kernel averages over 10000 runs)"
        );
    }
}
