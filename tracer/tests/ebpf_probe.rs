//! The eBPF probe, run by the kernel on crafted frames through `BPF_PROG_TEST_RUN` (no NIC, no namespace),
//! checked against the analyzer's decoder (which reads the BTH through roce-wire); and the eBPF engine end
//! to end on a veth pair.

mod common;

use std::collections::BTreeMap;

use aya::TestRunOptions;
use aya::programs::{SchedClassifier, TestRun as _};
use roce_capture::{LinkType, Record};
use roce_core::decode::{Decoder, Kind};
use std::process::Command;

use common::*;
use roce_wire::build::{IpSpec, RoceFrame, Vlan, emit_mac_control};
use roce_wire::ext::{DethRepr, RethRepr};
use roce_wire::pfc::{MacControlRepr, PfcRepr};
use roce_wire::{BthRepr, ExtHeaders, Opcode};
use tracer::engine::ebpf::{self, RingRecord};
use tracer::engine::rings::RingPlan;
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
    testkit::frames::emit(&f)
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
    // QinQ: an 802.1ad service tag (PCP 5) outside the 802.1Q one (PCP 3); the outer tag's PCP is the
    // priority, as the analyzer reads it.
    let mut qinq = roce(
        v4(2),
        Some(Vlan {
            pcp: 3,
            dei: false,
            vid: 10,
        }),
        Opcode::RC_SEND_ONLY,
        0x60,
        8,
        64,
    );
    qinq.splice(12..12, [0x88, 0xa8, 0xa0, 0x14]);
    out.push(("qinq outer pcp 5", qinq));
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
        speed_bps: None,
        ts_ns: 0,
        caplen: data.len() as u32,
        len: data.len() as u32,
        data,
        offset: 0,
    };
    Decoder::default().decode(1, &rec).kind
}

/// A probe configuration for `BPF_PROG_TEST_RUN`: nothing reads the ring while the program runs, so no
/// wakeups are asked for.
fn config(snaplen: u32) -> Config {
    Config {
        snaplen,
        all_frames: 0,
        wakeup_bytes: 0,
        headers_only: 0,
    }
}

/// The probe loaded with one ring of `ring` bytes (the default budget when `None`) shared by every CPU:
/// a test run happens on whichever CPU the test thread is on.
fn load_or_skip(what: &str, config: Config, ring: Option<u32>) -> Option<ebpf::LoadedProbe> {
    if !privileged(what) {
        return None;
    }
    let cpus = aya::util::nr_cpus().expect("the possible CPUs");
    let plan = RingPlan::shared(ring.unwrap_or(ebpf::DEFAULT_RING_BYTES), cpus);
    match ebpf::load_probe(config, plan) {
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

/// Program `name` of the loaded probe.
fn program<'a>(bpf: &'a mut ebpf::LoadedProbe, name: &str) -> &'a mut SchedClassifier {
    bpf.ebpf.program_mut(name).unwrap().try_into().unwrap()
}

/// Runs program `name` once on `frame` through `BPF_PROG_TEST_RUN` and returns the record it put in the
/// ring, if any.
fn run_once(
    bpf: &mut ebpf::LoadedProbe,
    ring: &mut aya::maps::RingBuf<aya::maps::MapData>,
    name: &str,
    frame: &[u8],
) -> Option<RingRecord> {
    let prog = program(bpf, name);
    prog.test_run(TestRunOptions {
        data_in: Some(frame),
        ..TestRunOptions::default()
    })
    .unwrap();
    ring.next().map(|i| RingRecord::parse(&i).unwrap())
}

#[test]
fn probe_agrees_with_the_analyzer_on_crafted_frames() {
    let Some(mut bpf) = load_or_skip(
        "probe_agrees_with_the_analyzer_on_crafted_frames",
        config(2048),
        None,
    ) else {
        return;
    };
    let mut ring = bpf.take_ring(0).unwrap();
    let cases = cases();
    // What the per-QP and per-priority maps must hold, computed from the analyzer's decode.
    let mut want_qp: BTreeMap<u32, (u64, u64, u64, u64)> = BTreeMap::new();
    let mut want_prio: BTreeMap<Option<u8>, (u64, u64)> = BTreeMap::new();
    for (name, frame) in &cases {
        let prog = program(&mut bpf, ebpf::INGRESS);
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
            speed_bps: None,
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
    let st = ebpf::probe_stats(&bpf.ebpf, &bpf.plan, &Default::default()).unwrap();
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
    let Some(mut bpf) = load_or_skip("snaplen_cuts_the_copy_not_the_counting", config(60), None)
    else {
        return;
    };
    let mut ring = bpf.take_ring(0).unwrap();
    let frame = roce(v4(3), None, Opcode::RC_SEND_ONLY, 0x77, 5, 900);
    let rec = run_once(&mut bpf, &mut ring, ebpf::EGRESS, &frame).unwrap();
    assert_eq!(rec.data, frame[..60]);
    assert_eq!(rec.wire_len as usize, frame.len());
    assert_ne!(rec.flags & tracer_common::flag::EGRESS, 0);
    let st = ebpf::probe_stats(&bpf.ebpf, &bpf.plan, &Default::default()).unwrap();
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
    let ns = netns("eb");
    let replay = dir.path().join("replay.pcap");
    let sent = replayable(&corpus(), &replay);
    let out = dir.path().join("cap.pcapng");
    let child = ns.capture_on_vb(dir.path(), &out, &["--engine", "ebpf", "-s", "2048"]);
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
    let child = ns.capture_on_vb(
        dir.path(),
        &dir.path().join("k.pcapng"),
        &["--engine", "ebpf"],
    );
    assert_eq!(tracer_links(), 2, "ingress and egress links while running");
    signal(&child, "KILL");
    let _ = wait(child, 10);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_nothing_attached(&ns);
}

/// Kernels before 6.6 have no TCX: there the probes are netlink tc filters under a clsact qdisc, and those
/// outlive a process killed with SIGKILL. The tracer is forced onto that path here: a clean exit removes
/// the filters and the qdisc; after SIGKILL the next start removes the leftovers (so each frame is captured
/// once, not twice) and leaves nothing behind at its own exit.
#[test]
fn netlink_filters_are_removed_at_exit_and_after_sigkill_at_the_next_start() {
    let name = "netlink_filters_are_removed_at_exit_and_after_sigkill_at_the_next_start";
    if !require_netns(name) || !require(name, have("bpftool"), "needs bpftool") {
        return;
    }
    let _turn = one_capture_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let ns = netns("nl");
    let start = |out: &std::path::Path| {
        let mut c = ns.tracer();
        c.env(tracer::engine::ebpf::FORCE_NETLINK_ENV, "1")
            .args(["-i", "vb", "--engine", "ebpf", "-s", "2048", "-w"])
            .arg(out);
        ns.start_when_ready(&mut c, dir.path())
    };
    let ours = |hook: &str| {
        let out = ns
            .cmd("tc")
            .args(["filter", "show", "dev", "vb", hook])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("tracer_"))
            .count()
    };

    let child = start(&dir.path().join("a.pcapng"));
    assert_eq!(
        (ours("ingress"), ours("egress")),
        (1, 1),
        "netlink filters while running"
    );
    assert_eq!(tracer_links(), 0, "forced onto the netlink path, not TCX");
    signal(&child, "INT");
    assert!(wait(child, 20).status.success());
    assert_nothing_attached(&ns);

    let child = start(&dir.path().join("b.pcapng"));
    signal(&child, "KILL");
    let _ = wait(child, 10);
    assert_eq!(ours("ingress"), 1, "a netlink filter outlives SIGKILL");

    let replay = dir.path().join("replay.pcap");
    let sent = replayable(&corpus(), &replay);
    let out = dir.path().join("c.pcapng");
    let child = start(&out);
    assert_eq!(
        (ours("ingress"), ours("egress")),
        (1, 1),
        "the leftover filters were replaced, not joined"
    );
    ns.replay_and_stop(child, &replay, 1, 20);
    let (got, _) = frames(&out);
    assert_eq!(got.len(), sent, "each frame once");
    assert_nothing_attached(&ns);
}

/// A snap length beyond what a ring record holds is capped, said so at start, and the file's interface
/// block states the cap, so nobody takes a 2048-byte copy of a jumbo frame for the whole frame.
#[test]
fn an_ebpf_snap_length_above_the_record_is_capped_and_said_so() {
    if !require_netns("an_ebpf_snap_length_above_the_record_is_capped_and_said_so") {
        return;
    }
    let _turn = one_capture_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let ns = netns("sl");
    let out = dir.path().join("cap.pcapng");
    let child = ns
        .tracer()
        .args(["-q", "-i", "vb", "--engine", "ebpf", "-s", "9000"])
        .args(["--duration", "300ms", "-w"])
        .arg(&out)
        .spawn()
        .expect("start roce-tracer");
    let result = wait(child, 20);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "{stderr}");
    assert!(stderr.contains("-s 9000 becomes 2048"), "{stderr}");
    let (_, reader) = frames(&out);
    assert_eq!(reader.interfaces()[0].snaplen, 2048);
}

/// Every teaching capture through the probe: its parser, not libpcap's, decides what is kept, so each
/// sample's mix of tags, CNPs and PFC frames must survive it as the corpus does.
#[test]
fn ebpf_engine_captures_every_sample_exactly() {
    if !require_netns("ebpf_engine_captures_every_sample_exactly") {
        return;
    }
    let _turn = one_capture_at_a_time();
    every_sample_comes_back_unchanged("ebpf", &["-s", "2048"]);
}

#[test]
fn ring_overflow_is_counted_frame_for_frame() {
    if !require_netns("ring_overflow_is_counted_frame_for_frame") {
        return;
    }
    let _turn = one_capture_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let ns = netns("lo");
    let replay = dir.path().join("replay.pcap");
    let per_pass = replayable(&corpus(), &replay);
    let passes = 40;
    let sent = per_pass * passes as usize;
    let out = dir.path().join("cap.pcapng");
    // A 16 KiB ring holds 7 records of 2 KiB: a burst at full speed overflows it.
    let child = ns.capture_on_vb(
        dir.path(),
        &out,
        &["--engine", "ebpf", "-s", "2048", "--ring-bytes", "16384"],
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

/// Offset of `tstamp` in `struct __sk_buff` (the context a test run takes), and the struct's size.
const SKB_TSTAMP: usize = 152;
const SKB_LEN: usize = 192;

/// The probe's clock, CLOCK_MONOTONIC (std's `Instant` reads it too, but does not show its value).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// On ingress the probe takes the stack's receive stamp when there is one and marks the record; without one,
/// and always on egress (where a stamp is a delivery time), it reads the monotonic clock.
#[test]
fn receive_stamps_are_used_on_ingress_only() {
    let Some(mut bpf) = load_or_skip("receive_stamps_are_used_on_ingress_only", config(256), None)
    else {
        return;
    };
    let mut ring = bpf.take_ring(0).unwrap();
    let frame = roce(v4(2), None, Opcode::RC_SEND_ONLY, 0x10, 1, 64);
    let stamp: u64 = 1_700_000_000_123_456_789;
    let mut stamped = [0u8; SKB_LEN];
    stamped[SKB_TSTAMP..SKB_TSTAMP + 8].copy_from_slice(&stamp.to_ne_bytes());
    let unstamped = [0u8; SKB_LEN];
    let mut run = |prog_name: &str, ctx: &[u8]| -> RingRecord {
        program(&mut bpf, prog_name)
            .test_run(TestRunOptions {
                data_in: Some(&frame),
                ctx_in: Some(ctx),
                ..TestRunOptions::default()
            })
            .unwrap();
        ring.next().map(|i| RingRecord::parse(&i).unwrap()).unwrap()
    };
    let offset = tracer::sys::monotonic_to_realtime_offset();

    let rec = run(ebpf::INGRESS, &stamped);
    assert_ne!(rec.flags & tracer_common::flag::TS_REALTIME, 0);
    assert_eq!(rec.ts_ns, stamp);
    assert_eq!(
        rec.wall_ns(offset),
        stamp,
        "a receive stamp is wall-clock time"
    );

    for (prog_name, ctx) in [(ebpf::INGRESS, &unstamped), (ebpf::EGRESS, &stamped)] {
        let before = monotonic_ns();
        let rec = run(prog_name, ctx);
        let after = monotonic_ns();
        assert_eq!(
            rec.flags & tracer_common::flag::TS_REALTIME,
            0,
            "{prog_name}"
        );
        assert!(
            (before..=after).contains(&rec.ts_ns),
            "{prog_name}: {} not in {before}..={after}",
            rec.ts_ns
        );
        assert_eq!(rec.wall_ns(offset), rec.ts_ns + offset);
    }
}

/// A full ring is counted per interface as well as in total. A test run's frame arrives on loopback.
#[test]
fn ring_losses_are_counted_per_interface_in_the_probe() {
    let Some(mut bpf) = load_or_skip(
        "ring_losses_are_counted_per_interface_in_the_probe",
        config(256),
        Some(4096),
    ) else {
        return;
    };
    let _ring = bpf.take_ring(0).unwrap();
    let frame = roce(v4(2), None, Opcode::RC_SEND_ONLY, 0x10, 1, 512);
    let prog = program(&mut bpf, ebpf::INGRESS);
    prog.test_run(TestRunOptions {
        data_in: Some(&frame),
        repeat: 100,
        ..TestRunOptions::default()
    })
    .unwrap();
    let st = ebpf::probe_stats(&bpf.ebpf, &bpf.plan, &Default::default()).unwrap();
    assert_eq!(st.emitted + st.ring_full, 100);
    // 4096 bytes hold about 13 records of 296 bytes.
    assert!((10..=14).contains(&st.emitted), "{st:?}");
    let by_if = ebpf::ring_full_by_ifindex(&bpf.ebpf).unwrap();
    assert_eq!(
        by_if.into_iter().collect::<Vec<_>>(),
        vec![(1, st.ring_full)]
    );
}

/// Two interfaces, each driven into ring overflow in turn: each interface's statistics block holds its own
/// losses, and captured + dropped equals what was sent to that interface.
#[test]
fn ring_losses_are_reported_per_interface() {
    if !require_netns("ring_losses_are_reported_per_interface") {
        return;
    }
    let _turn = one_capture_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let ns = netns("l2");
    ns.add_pair("vc", "vd");
    let replay = dir.path().join("replay.pcap");
    let per_pass = replayable(&corpus(), &replay) as u64;
    let out = dir.path().join("cap.pcapng");
    let child = ns.capture_on_vb(
        dir.path(),
        &out,
        &[
            "-i",
            "vd",
            "--engine",
            "ebpf",
            "-s",
            "2048",
            "--ring-bytes",
            "16384",
        ],
    );
    let (passes_b, passes_d) = (40u32, 15u32);
    ns.replay_into("vc", &replay, passes_d);
    ns.replay_and_stop(child, &replay, passes_b, 20);
    let sent = [
        per_pass * u64::from(passes_b),
        per_pass * u64::from(passes_d),
    ];
    let got = frames_per_iface(&out, 2);
    let (_, reader) = frames(&out);
    let stats = reader.if_stats();
    assert_eq!(stats.len(), 2);
    for i in 0..2 {
        let dropped = stats[i].dropped_iface.unwrap_or(0) + stats[i].dropped_os.unwrap_or(0);
        assert_eq!(
            got[i] + dropped,
            sent[i],
            "interface {i}: captured {} + dropped {dropped} != sent {}",
            got[i],
            sent[i]
        );
        assert_eq!(stats[i].received, Some(sent[i]), "interface {i}");
        assert!(dropped > 0, "interface {i}: a 16 KiB ring should overflow");
    }
}

/// `--filter` with the eBPF engine narrows what the probe selected: a filter on one host of a sample keeps
/// exactly that host's frames, the same ones the pcap engine keeps with the same filter.
#[test]
fn filter_narrows_the_ebpf_capture_like_the_pcap_one() {
    if !require_netns("filter_narrows_the_ebpf_capture_like_the_pcap_one") {
        return;
    }
    let _turn = one_capture_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let replay = dir.path().join("replay.pcap");
    let sent = replayable(&sample("incast_dcqcn"), &replay);
    let host: std::net::IpAddr = "10.0.0.1".parse().unwrap();
    let (all, _) = frames(&replay);
    let want: Vec<FrameView> = all
        .iter()
        .filter(|f| f.src == Some(host) || f.dst == Some(host))
        .cloned()
        .collect();
    // One sender's data, its ACKs and its CNPs; every frame of the sample is tagged (VLAN 100).
    assert!(
        want.len() > 100 && want.len() < sent / 2,
        "{} of {sent}",
        want.len()
    );
    for engine in ["ebpf", "pcap"] {
        let ns = netns(&format!("f{}", &engine[..1]));
        let out = dir.path().join(format!("{engine}.pcapng"));
        let child = ns.capture_on_vb(
            dir.path(),
            &out,
            &["--engine", engine, "--filter", "vlan and host 10.0.0.1"],
        );
        ns.replay_and_stop(child, &replay, 1, 20);
        let (got, reader) = frames(&out);
        assert_eq!(got.len(), want.len(), "{engine}: frame count");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{engine}: frame {} differs", i + 1);
        }
        let st = reader.if_stats().first().copied().unwrap_or_default();
        assert_eq!(st.received, Some(want.len() as u64), "{engine}: {st:?}");
        // The interface description (an option of the interface block, stored as text) names the filter.
        let bytes = std::fs::read(&out).unwrap();
        let needle = b"filter=vlan and host 10.0.0.1";
        assert!(
            bytes.windows(needle.len()).any(|w| w == needle),
            "{engine}: the interface description does not name the filter"
        );
    }
}

/// The probe submits records without waking the reader until a sixteenth of the ring waits: a trickle of
/// frames must still reach the file, through the reader's poll timeout, not when the ring fills. Three
/// frames never fill it: were they left waiting for a wakeup, `-c 3` would never be reached and the tracer
/// would run until the wait's cap.
#[test]
fn a_trickle_reaches_the_file_without_wakeups() {
    if !require_netns("a_trickle_reaches_the_file_without_wakeups") {
        return;
    }
    let _turn = one_capture_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let ns = netns("tw");
    let all = dir.path().join("all.pcap");
    replayable(&corpus(), &all);
    let three = dir.path().join("three.pcap");
    first_records(&all, &three, 3);
    let out = dir.path().join("cap.pcapng");
    let child = ns.capture_on_vb(dir.path(), &out, &["--engine", "ebpf", "-c", "3"]);
    ns.replay(&three, 1);
    let result = wait(child, 60);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let (got, _) = frames(&out);
    assert_eq!(got.len(), 3);
}

/// A CM REQ MAD (the first 72 bytes matter to the analyzer: its local QPN and starting PSN), padded to the
/// MAD's 256 bytes.
fn cm_req_mad(local_qpn: u32, starting_psn: u32) -> Vec<u8> {
    let mut mad = vec![0u8; roce_wire::mad::MAD_LEN];
    mad[..4].copy_from_slice(&[1, roce_wire::mad::MGMT_CLASS_CM, 2, 3]);
    mad[16..18].copy_from_slice(&roce_wire::mad::attr::REQ.to_be_bytes());
    mad[24..28].copy_from_slice(&0x1234_5678u32.to_be_bytes());
    mad[56..59].copy_from_slice(&local_qpn.to_be_bytes()[1..]);
    mad[68..71].copy_from_slice(&starting_psn.to_be_bytes()[1..]);
    mad
}

/// A UD SEND ONLY to `dest_qp` carrying `mad`.
fn ud_to(dest_qp: u32, mad: &[u8]) -> Vec<u8> {
    let f = RoceFrame {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        vlan: None,
        ip: v4(0),
        sport: 49999,
        bth: BthRepr::new(Opcode::UD_SEND_ONLY, dest_qp, 0),
        ext: ExtHeaders {
            deth: Some(DethRepr {
                qkey: 0x8001_0000,
                src_qp: 1,
            }),
            ..ExtHeaders::default()
        },
        payload: mad,
    };
    testkit::frames::emit(&f)
}

/// With `headers_only` (the default snap length) the probe copies each frame's headers rounded up, and the
/// analyzer decodes the short record as it decodes the whole frame, payload length on the wire included; a
/// CM MAD keeps the snap length's bytes, enough for the analyzer's pairing to read its QP number and PSN.
#[test]
fn header_copies_decode_like_whole_frames_and_cm_mads_keep_their_bytes() {
    let what = "header_copies_decode_like_whole_frames_and_cm_mads_keep_their_bytes";
    let headers_only = Config {
        headers_only: 1,
        ..config(256)
    };
    assert!(ebpf::headers_only(256) && !ebpf::headers_only(257));
    let Some(mut bpf) = load_or_skip(what, headers_only, None) else {
        return;
    };
    let mut ring = bpf.take_ring(0).unwrap();
    let mut run = |frame: &[u8]| run_once(&mut bpf, &mut ring, ebpf::INGRESS, frame);
    let decode = |data: &[u8], len: usize| -> String {
        let rec = Record {
            iface: 0,
            link: LinkType::ETHERNET,
            speed_bps: None,
            ts_ns: 0,
            caplen: data.len() as u32,
            len: len as u32,
            data,
            offset: 0,
        };
        let f = Decoder::default().decode(1, &rec);
        let roce = f.roce.as_ref().map(|r| {
            (
                r.packet.bth,
                r.packet.ext,
                r.packet.header_len,
                r.packet.payload_len,
            )
        });
        format!(
            "{:?} {:?} {:?} {:?} {roce:?} {:?}",
            f.kind, f.vlan, f.pcp, f.ip, f.mac_control
        )
    };
    let mut big = roce(v4(3), None, Opcode::RC_RDMA_WRITE_FIRST, 0x10, 100, 1024);
    let mut cases = cases();
    cases.push(("rc write first, 1 KiB", std::mem::take(&mut big)));
    let mut shorter = 0;
    for (name, frame) in &cases {
        let Some(rec) = run(frame) else {
            assert_eq!(analyzer_kind(frame), Kind::Other, "{name}: no record");
            continue;
        };
        let s = tracer_common::classify(&frame[..], None);
        let want = tracer_common::copy_len(&s, frame.len() as u32, &headers_only);
        assert_eq!(rec.data, frame[..want], "{name}: copied bytes");
        assert!(
            want >= tracer_common::header_len(&s).min(frame.len()),
            "{name}"
        );
        shorter += usize::from(want < frame.len().min(256));
        assert_eq!(
            decode(&rec.data, frame.len()),
            decode(frame, frame.len()),
            "{name}: decoded"
        );
    }
    assert!(
        shorter >= 3,
        "only {shorter} frames were copied shorter than before"
    );

    // A CM REQ to QP 1: 322 bytes on the wire, the snap length's 256 copied, the MAD's fields readable.
    let mad = cm_req_mad(0x00ab_cdef, 0x0012_3456);
    let frame = ud_to(roce_wire::mad::QP1, &mad);
    let rec = run(&frame).unwrap();
    assert_eq!(rec.data, frame[..256]);
    let offset = 14 + 20 + 8 + 12 + 8;
    assert_eq!(
        roce_wire::mad::parse_cm(&rec.data[offset..]).unwrap(),
        Some(roce_wire::mad::CmMessage::Req {
            local_comm_id: 0x1234_5678,
            local_qpn: 0x00ab_cdef,
            starting_psn: 0x0012_3456,
        })
    );
    // The same datagram to another QP: headers only (62 bytes, rounded up to 64).
    let rec = run(&ud_to(2, &mad)).unwrap();
    assert_eq!(rec.data.len(), 64);

    // The user's snap length stays the upper bound, for a MAD too.
    let Some(mut bpf) = load_or_skip(
        what,
        Config {
            headers_only: 1,
            ..config(60)
        },
        None,
    ) else {
        return;
    };
    let mut ring = bpf.take_ring(0).unwrap();
    let rec = run_once(&mut bpf, &mut ring, ebpf::INGRESS, &frame).unwrap();
    assert_eq!(rec.data, frame[..60]);
}

/// At the default snap length the eBPF engine copies headers only: the file still decodes to the replayed
/// frames and gives the same `stats`, and frames are shorter than 256 bytes where their headers allow.
#[test]
fn the_default_snap_length_keeps_what_the_analyzer_reads() {
    let what = "the_default_snap_length_keeps_what_the_analyzer_reads";
    if !require_netns(what) {
        return;
    }
    let _turn = one_capture_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let ns = netns("ds");
    let replay = dir.path().join("replay.pcap");
    let sent = replayable(&corpus(), &replay);
    let out = dir.path().join("cap.pcapng");
    let child = ns.capture_on_vb(dir.path(), &out, &["--engine", "ebpf"]);
    ns.replay_and_stop(child, &replay, 1, 20);
    let (want, _) = frames(&replay);
    let (got, _) = frames(&out);
    assert_eq!(got.len(), sent);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "frame {} differs", i + 1);
    }
    assert_eq!(stats_view(&stats(&out)), stats_view(&stats(&replay)));
    // Caplens: never above the snap length (plus a tag the kernel removed and userspace put back), and
    // fewer bytes in all than the 256 a frame of before.
    let mut reader = roce_capture::CaptureReader::open(&out).unwrap();
    let (mut n, mut shorter, mut bytes, mut before) = (0, 0, 0u64, 0u64);
    while let Some(rec) = reader.next_record().unwrap() {
        n += 1;
        assert!(rec.caplen <= 256 + 4, "record {n}: caplen {}", rec.caplen);
        shorter += usize::from(rec.caplen < rec.len.min(256));
        bytes += u64::from(rec.caplen);
        before += u64::from(rec.len.min(256));
    }
    // The corpus is mostly short frames, which stay whole; its data frames are cut.
    assert!(
        shorter > n / 4,
        "only {shorter} of {n} records were cut short"
    );
    assert!(bytes < before, "{bytes} bytes captured, {before} before");
    eprintln!("{shorter} of {n} records cut short; {bytes} bytes captured instead of {before}");
}
