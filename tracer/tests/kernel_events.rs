//! `--kernel-events`:
//! - RoCEv2 frames sent to an address of the namespace where nothing listens on UDP 4791 are dropped by the
//!   kernel; the capture's `DROP` block must count them, and its `EVNT` blocks must hold the same drops spread
//!   over their intervals, with either engine.
//! - Every program of the eBPF object passes the verifier of this kernel.
//! - The generic recorder, attached with `--tracepoint` to tracepoints this kernel has (a process forking
//!   and exec'ing), delivers exactly the events the test caused, with their fields, process and time.
//! - The format files of the RDMA tracepoints (fixtures in the layout the kernel prints, from the kernel's
//!   headers) give the recorder the right offsets, and its records decode to the right fields.
//!
//! This kernel, like CI's, has no RDMA tracepoints (CONFIG_INFINIBAND is off): attaching the real ones
//! cannot run here, and the tests say so; they check instead that those tracepoints are listed as
//! unavailable and that the capture goes on.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use roce_capture::LinkType;
use roce_capture::write::PcapWriter;
use roce_wire::build::{IpSpec, RoceFrame};
use roce_wire::{BthRepr, ExtHeaders, Opcode};
use serde_json::Value;
use tracer::kevents::{self, TraceSpec};
use tracer_common::kevents::{
    BYTES_LEN, FIELD_DATA_LOC, FIELD_SIGNED, MODE_COUNT, TRACE_EVENT_LEN,
};

const SENT: u32 = 40;

/// `SENT` RoCEv2 SEND frames from 10.77.0.1 to 10.77.0.2 (vb's address), as a pcap for tcpreplay.
fn write_frames(path: &Path) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = PcapWriter::new(std::io::BufWriter::new(file), LinkType::ETHERNET, 65535).unwrap();
    let payload = [0x42u8; 64];
    let v6 = |last: u8| {
        let mut a = [0u8; 16];
        a[..2].copy_from_slice(&[0xfd, 0x77]);
        a[15] = last;
        a
    };
    let (src6, dst6) = (v6(1), v6(2));
    for psn in 0..SENT {
        // RoCEv2 over IPv4 to QP 0x11 and over IPv6 to QP 0x12, each followed by its twin: the same datagram
        // to UDP port 9999, dropped the same way but not RoCEv2, so the drop counter must leave it out.
        let v4 = IpSpec::V4 {
            src: [10, 77, 0, 1],
            dst: [10, 77, 0, 2],
            dscp: 26,
            ecn: 2,
            ttl: 64,
            ident: psn as u16,
        };
        let v6 = IpSpec::V6 {
            src: src6,
            dst: dst6,
            dscp: 26,
            ecn: 2,
            flow_label: psn,
            hop_limit: 64,
        };
        for (ip, qp, port_at) in [(v4, 0x11, 14 + 20 + 2), (v6, 0x12, 14 + 40 + 2)] {
            let frame = RoceFrame {
                src_mac: [2, 0, 0, 0, 0, 1],
                dst_mac: [2, 0, 0, 0, 0, 2],
                vlan: None,
                ip,
                sport: 49152,
                bth: BthRepr::new(Opcode::RC_SEND_ONLY, qp, psn),
                ext: ExtHeaders::default(),
                payload: &payload,
            };
            let mut buf = testkit::frames::emit(&frame);
            let n = buf.len();
            let ts = u64::from(psn) * 1000 + u64::from(qp - 0x11) * 400;
            w.write_packet(ts, &buf, n as u32).unwrap();
            buf[port_at..port_at + 2].copy_from_slice(&9999u16.to_be_bytes());
            w.write_packet(ts + 200, &buf, n as u32).unwrap();
        }
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

/// The capture's records of one type, decoded.
fn records(path: &Path, kind: [u8; 4]) -> Vec<Value> {
    custom_blocks(path)
        .iter()
        .filter_map(|b| raw_record(b))
        .filter(|(k, _)| *k == kind)
        .map(|(_, v)| v)
        .collect()
}

/// The RDMA tracepoints must be listed in the start line: as attached where the kernel has them, as
/// unavailable (and not fatal) where it does not. Says so, naming `test`, when the real ones cannot be tried
/// here.
fn check_rdma_listing(test: &str, line: &str, systems: &[String]) {
    let unavailable = line
        .split("unavailable on this kernel: ")
        .nth(1)
        .unwrap_or("");
    for spec in kevents::rdma_specs() {
        let name = spec.name();
        assert!(line.contains(&name), "{name} not listed: {line}");
        if systems.contains(&spec.system) {
            println!("{name}: this kernel has the {} system", spec.system);
        } else {
            assert!(
                unavailable.contains(&name),
                "{name} not listed as unavailable: {line}"
            );
        }
    }
    if !systems.iter().any(|s| s == "rdma_cma") {
        cannot_run_here(&format!(
            "{test}: attaching the RDMA tracepoints: this kernel has no rdma_cma tracepoints \
             (CONFIG_INFINIBAND off); checked that they are listed as unavailable and that the capture went \
             on without them"
        ));
    }
}

/// The drop tests one at a time: `skb:kfree_skb` counts the whole host's drops, so two of them running
/// together would each count the other's frames.
static DROP_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn drops_with(engine: &str) {
    let what = format!("kernel_events_count_dropped_roce_{engine}");
    if !require_netns(&what) {
        return;
    }
    let _turn = DROP_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let frames_path = dir.path().join("roce.pcap");
    write_frames(&frames_path);
    let ns = netns(&format!("ke{}", &engine[..1]));
    for args in [
        &["link", "set", "vb", "address", "02:00:00:00:00:02"][..],
        &["addr", "add", "10.77.0.2/24", "dev", "vb"],
    ] {
        let out = ns.cmd("ip").args(args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}");
    }
    // Reverse-path filtering would drop the frames earlier, under another reason. IPv6 on vb only, with
    // the address the IPv6 frames go to.
    for key in [
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.vb.rp_filter=0",
        "net.ipv6.conf.vb.disable_ipv6=0",
    ] {
        let _ = ns.cmd("sysctl").args(["-qw", key]).output();
    }
    let out = ns
        .cmd("ip")
        .args(["-6", "addr", "add", "fd77::2/64", "dev", "vb", "nodad"])
        .output()
        .unwrap();
    assert!(out.status.success(), "ip -6 addr add");
    let out = dir.path().join("cap.pcapng");
    let child = ns.capture_on_vb(
        dir.path(),
        &out,
        &["--engine", engine, "--kernel-events", "--interval", "200ms"],
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
    assert!(line.contains("attached skb:kfree_skb"), "{line}");
    check_rdma_listing(&what, line, &systems);

    let (captured, _) = frames(&out);
    let ours = captured.iter().filter(|f| f.dest_qp == Some(0x11)).count();
    assert_eq!(ours, SENT as usize, "captured {ours} of {SENT}");
    let drops = records(&out, roce_capture::blocks::DROPS);
    assert_eq!(drops.len(), 1, "one DROP block without rotation");
    let no_socket = |rows: &Value| -> u64 {
        rows.as_array()
            .expect("drops array")
            .iter()
            .filter(|r| r["protocol"] == "ipv4" && r["reason"] == "NO_SOCKET")
            .filter_map(|r| r["count"].as_u64())
            .sum()
    };
    let total = no_socket(&drops[0]["drops"]);
    if drops[0]["ip"] == "rocev2" {
        // Only the RoCEv2 datagrams, not their twins to port 9999.
        assert!(line_says(
            &stderr,
            "IPv4/IPv6 drops counted for RoCEv2 (UDP 4791) only"
        ));
        assert_eq!(
            total,
            u64::from(SENT),
            "ipv4 NO_SOCKET drops for {SENT} RoCEv2 and {SENT} other datagrams: {}",
            drops[0]
        );
        // The same over IPv6, whatever reason the kernel gives (a zero UDP checksum may be refused before
        // the socket lookup), and nothing else: neighbour discovery and the twins are not RoCEv2.
        let v6: u64 = drops[0]["drops"]
            .as_array()
            .expect("drops array")
            .iter()
            .filter(|r| r["protocol"] == "ipv6")
            .filter_map(|r| r["count"].as_u64())
            .sum();
        assert_eq!(v6, u64::from(SENT), "ipv6 drops: {}", drops[0]);
    } else {
        cannot_run_here(&format!(
            "{what}: this kernel's sk_buff layout could not be read, so every IP drop is counted: {stderr}"
        ));
        assert!(total >= 2 * u64::from(SENT), "{}", drops[0]);
    }

    // The same drops, spread over the EVNT blocks' intervals: together they are exactly the file's total,
    // and the intervals follow each other without gaps.
    let events = records(&out, roce_capture::blocks::EVENTS);
    assert!(events.len() >= 2, "{} EVNT blocks", events.len());
    let per_interval: u64 = events.iter().map(|e| no_socket(&e["drops"])).sum();
    assert_eq!(per_interval, total, "EVNT drops vs the DROP total");
    for pair in events.windows(2) {
        assert_eq!(pair[0]["to_ns"], pair[1]["from_ns"], "contiguous intervals");
    }
    // The frames' own times (wall clock) fall inside the intervals that counted drops.
    let with_drops: Vec<&Value> = events
        .iter()
        .filter(|e| no_socket(&e["drops"]) > 0)
        .collect();
    let first = with_drops.first().expect("an interval with drops")["from_ns"]
        .as_u64()
        .unwrap();
    let last = with_drops.last().unwrap()["to_ns"].as_u64().unwrap();
    let reader_stats = stats(&out);
    let (f0, f1) = (
        reader_stats.capture.first_ns.unwrap(),
        reader_stats.capture.last_ns.unwrap(),
    );
    assert!(
        first <= f1 && f0 <= last,
        "frames at [{f0}, {f1}] but drops counted in [{first}, {last}]"
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

/// Every program in the object loads, i.e. passes this kernel's verifier: the packet probe, the drop
/// counter and each copy of the recorder (loading one does not attach it).
#[test]
fn every_program_passes_the_verifier() {
    let what = "kernel_events_every_program_passes_the_verifier";
    if !privileged(what) {
        return;
    }
    let object = tracer::engine::ebpf::probe_object().expect("the probe object is built");
    let mut ebpf = aya::EbpfLoader::new().load(object).expect("object loads");
    let mut loaded = Vec::new();
    for (name, prog) in ebpf.programs_mut() {
        let result = match prog {
            aya::programs::Program::TracePoint(p) => p.load(),
            aya::programs::Program::SchedClassifier(p) => p.load(),
            other => panic!("{name}: unexpected program type {:?}", other.prog_type()),
        };
        if let Err(e) = result {
            panic!("{name} does not load: {e:#?}");
        }
        loaded.push(name.to_string());
    }
    loaded.sort();
    let recorders: Vec<String> = (0..tracer_common::kevents::MAX_TRACEPOINTS)
        .map(kevents::trace_program)
        .collect();
    for want in recorders.iter().map(String::as_str).chain([
        tracer_common::KFREE_SKB_PROGRAM,
        "tracer_ingress",
        "tracer_egress",
    ]) {
        assert!(loaded.iter().any(|l| l == want), "{want} in {loaded:?}");
    }
    println!("loaded {} programs: {}", loaded.len(), loaded.join(", "));
}

fn line_says(stderr: &str, what: &str) -> bool {
    stderr.lines().any(|l| l.contains(what))
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// This thread's id and name (what `bpf_get_current_pid_tgid` and `bpf_get_current_comm` see).
fn this_thread() -> (u32, String) {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap();
    (tid, comm.trim_end().to_string())
}

/// The recorder attached to `sched:sched_process_exec`, `task:task_newtask` and `signal:signal_generate`:
/// the test forks and execs a program with a name of its own three times and queues itself a signal after
/// each, and the capture must hold exactly those events, with the processes, names, field values and
/// times the test knows.
#[test]
fn recorder_delivers_exactly_the_events_caused() {
    let what = "kernel_events_recorder_delivers_exactly_the_events_caused";
    if !require_netns(what) {
        return;
    }
    const RUNS: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    // A name no other process has, short enough to be a whole comm (15 bytes).
    let name = format!("rtkx{}", std::process::id());
    let program = dir.path().join(&name);
    std::fs::copy("/bin/true", &program).unwrap();
    let oom_score_adj: i64 = std::fs::read_to_string("/proc/self/oom_score_adj")
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let ns = netns("kr");
    let out = dir.path().join("cap.pcapng");
    let child = ns.capture_on_vb(
        dir.path(),
        &out,
        &[
            "--kernel-events",
            "--interval",
            "200ms",
            "--tracepoint",
            "sched:sched_process_exec:pid,old_pid,filename",
            "--tracepoint",
            "task:task_newtask:pid,comm,clone_flags,oom_score_adj,no_such_field",
            "--tracepoint",
            "signal:signal_generate:sig,code,pid,result,comm",
        ],
    );
    let (tid, thread_comm) = this_thread();
    let before = now_ns();
    let mut pids = BTreeSet::new();
    for _ in 0..RUNS {
        let mut c = std::process::Command::new(&program).spawn().unwrap();
        pids.insert(c.id());
        assert!(c.wait().unwrap().success());
        // A queued signal to this process, which ignores it: `code` is SI_QUEUE, a negative int.
        // SAFETY: sigqueue with a plain value; SIGWINCH's default action is to ignore it.
        let rc = unsafe {
            libc::sigqueue(
                libc::getpid(),
                libc::SIGWINCH,
                libc::sigval {
                    sival_ptr: std::ptr::null_mut(),
                },
            )
        };
        assert_eq!(rc, 0);
    }
    let after = now_ns();
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, "INT");
    let result = wait(child, 15);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("kernel events:"))
        .unwrap_or_else(|| panic!("no tracepoint line in {stderr}"));
    assert!(
        line.contains("sched:sched_process_exec") && line.contains("task:task_newtask"),
        "{line}"
    );
    assert!(
        line.contains("task:task_newtask without no_such_field"),
        "a missing field is named, not fatal: {line}"
    );
    check_rdma_listing(
        "recorder_delivers_exactly_the_events_caused",
        line,
        &trace_systems(&ns),
    );

    let blocks = records(&out, roce_capture::blocks::EVENTS);
    assert!(blocks.len() >= 2, "{} EVNT blocks", blocks.len());
    let header = &blocks[0]["tracepoints"];
    let attached: Vec<&str> = header["attached"]
        .as_array()
        .expect("the first block lists the tracepoints")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        attached.contains(&"sched:sched_process_exec") && attached.contains(&"task:task_newtask"),
        "{attached:?}"
    );
    assert!(
        blocks[1].get("tracepoints").is_none(),
        "only the first block"
    );
    let mut events: Vec<(&Value, &Value)> = Vec::new();
    for b in &blocks {
        assert_eq!(b["lost"], 0, "nothing lost: {b}");
        for e in b["events"].as_array().unwrap() {
            events.push((b, e));
        }
    }

    // Exec: the new program's process, under its new name, once per run.
    let execs: Vec<&(&Value, &Value)> = events
        .iter()
        .filter(|(_, e)| e["tracepoint"] == "sched:sched_process_exec" && e["comm"] == name)
        .collect();
    assert_eq!(execs.len(), RUNS, "{execs:?}");
    let exec_pids: BTreeSet<u32> = execs
        .iter()
        .map(|(_, e)| e["pid"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(exec_pids, pids);
    let path = program.to_str().unwrap();
    let recorded_path = &path[..path.len().min(BYTES_LEN)];
    for (_, e) in &execs {
        assert_eq!(e["tid"], e["pid"]);
        assert_eq!(e["fields"]["pid"], e["pid"]);
        assert_eq!(e["fields"]["old_pid"], e["pid"]);
        assert_eq!(e["fields"]["filename"], recorded_path, "__data_loc string");
    }

    // Fork: fired in this thread, naming each child, with the fields as the kernel filled them. (Later, this
    // thread also forks the `kill` that stops the tracer: not one of the runs.)
    let forks: Vec<&(&Value, &Value)> = events
        .iter()
        .filter(|(_, e)| {
            e["tracepoint"] == "task:task_newtask"
                && e["tid"] == tid
                && e["ts_ns"].as_u64().unwrap() <= after
        })
        .collect();
    assert_eq!(forks.len(), RUNS, "{forks:?}");
    let fork_children: BTreeSet<u32> = forks
        .iter()
        .map(|(_, e)| e["fields"]["pid"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(fork_children, pids);
    for (_, e) in &forks {
        assert_eq!(e["pid"], std::process::id());
        assert_eq!(e["comm"], thread_comm.as_str());
        assert_eq!(e["fields"]["comm"], thread_comm.as_str(), "char[16] field");
        assert_eq!(e["fields"]["oom_score_adj"], oom_score_adj, "signed short");
        // std spawns through posix_spawn, which glibc implements as a clone sharing the parent's memory
        // until the exec: the 8-byte field holds exactly those flags.
        let flags = e["fields"]["clone_flags"].as_u64().unwrap();
        let vfork = (libc::CLONE_VM | libc::CLONE_VFORK) as u64;
        assert_eq!(flags & vfork, vfork, "clone_flags {flags:#x}");
        assert!(e["fields"].get("no_such_field").is_none());
    }

    // Signals: sent by this thread to this process, ignored, with SI_QUEUE sign-extended from 4 bytes.
    let signals: Vec<&(&Value, &Value)> = events
        .iter()
        .filter(|(_, e)| {
            e["tracepoint"] == "signal:signal_generate"
                && e["tid"] == tid
                && e["fields"]["sig"] == libc::SIGWINCH
        })
        .collect();
    assert_eq!(signals.len(), RUNS, "{signals:?}");
    let process_comm = std::fs::read_to_string("/proc/self/comm").unwrap();
    for (_, e) in &signals {
        assert_eq!(e["fields"]["code"], libc::SI_QUEUE, "a negative int");
        assert_eq!(e["fields"]["pid"], std::process::id());
        assert_eq!(e["fields"]["result"], 1, "TRACE_SIGNAL_IGNORED");
        assert_eq!(e["fields"]["comm"], process_comm.trim_end());
        assert_eq!(e["comm"], thread_comm.as_str());
    }

    // Times are on the packets' clock (wall-clock ns) and inside their blocks' intervals.
    for (b, e) in execs.iter().chain(&forks).chain(&signals) {
        let ts = e["ts_ns"].as_u64().unwrap();
        let slack = 5_000_000;
        assert!(
            ts + slack >= before && ts <= after + slack,
            "event at {ts}, caused in [{before}, {after}]"
        );
        let (from, to) = (b["from_ns"].as_u64().unwrap(), b["to_ns"].as_u64().unwrap());
        assert!(
            ts + 1_000_000 >= from && ts <= to,
            "{ts} outside [{from}, {to}]"
        );
    }
}

// Format files as this kernel prints them (`events/SYSTEM/EVENT/format`), laid out after the RDMA
// tracepoint headers of Linux 6.x: drivers/infiniband/core/cma_trace.h, include/trace/events/ib_mad.h and
// include/trace/events/rdma_core.h. Offsets follow the C layout of each TP_STRUCT__entry after the 8-byte
// common header.

const COMMON: &str = "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
    \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
    \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
    \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n";

fn format_file(name: &str, id: u32, fields: &[(&str, u32, u32, bool)], print: &str) -> String {
    let mut s = format!("name: {name}\nID: {id}\nformat:\n{COMMON}");
    for (decl, offset, size, signed) in fields {
        s.push_str(&format!(
            "\tfield:{decl};\toffset:{offset};\tsize:{size};\tsigned:{};\n",
            u8::from(*signed)
        ));
    }
    s.push_str(&format!("\nprint fmt: {print}\n"));
    s
}

fn cm_qp_create() -> String {
    format_file(
        "cm_qp_create",
        1732,
        &[
            ("u32 cm_id", 8, 4, false),
            ("u32 pd_id", 12, 4, false),
            ("u32 tos", 16, 4, false),
            ("u32 qp_num", 20, 4, false),
            ("u32 send_wr", 24, 4, false),
            ("u32 recv_wr", 28, 4, false),
            ("int rc", 32, 4, true),
            ("unsigned long qp_type", 40, 8, false),
            ("unsigned char srcaddr[28]", 48, 28, false),
            ("unsigned char dstaddr[28]", 76, 28, false),
        ],
        r#""cm.id=%u src=%pISpc dst=%pISpc tos=%u pd.id=%u qp_type=%s send_wr=%u recv_wr=%u qp_num=%u rc=%d", REC->cm_id, REC->srcaddr, REC->dstaddr, REC->tos, REC->pd_id, __print_symbolic(REC->qp_type, { 0, "SMI" }, { 1, "GSI" }, { 2, "RC" }, { 3, "UC" }, { 4, "UD" }, { 5, "RAW_IPV6" }, { 6, "RAW_ETHERTYPE" }, { 8, "RAW_PACKET" }, { 9, "XRC_INI" }, { 10, "XRC_TGT" }), REC->send_wr, REC->recv_wr, REC->qp_num, REC->rc"#,
    )
}

fn cma_qp_class(name: &str, id: u32) -> String {
    format_file(
        name,
        id,
        &[
            ("u32 cm_id", 8, 4, false),
            ("u32 tos", 12, 4, false),
            ("u32 qp_num", 16, 4, false),
            ("unsigned char srcaddr[28]", 20, 28, false),
            ("unsigned char dstaddr[28]", 48, 28, false),
        ],
        r#""cm.id=%u src=%pISpc dst=%pISpc tos=%u qp_num=%u", REC->cm_id, REC->srcaddr, REC->dstaddr, REC->tos, REC->qp_num"#,
    )
}

fn cm_event_handler(with_status: bool) -> String {
    let mut fields = vec![
        ("u32 cm_id", 8, 4, false),
        ("u32 tos", 12, 4, false),
        ("unsigned long event", 16, 8, false),
    ];
    if with_status {
        fields.push(("int status", 24, 4, true));
        fields.push(("unsigned char srcaddr[28]", 28, 28, false));
        fields.push(("unsigned char dstaddr[28]", 56, 28, false));
    } else {
        fields.push(("unsigned char srcaddr[28]", 24, 28, false));
        fields.push(("unsigned char dstaddr[28]", 52, 28, false));
    }
    format_file(
        "cm_event_handler",
        1740,
        &fields,
        r#""cm.id=%u src=%pISpc dst=%pISpc tos=%u %s (%lu/%d)", REC->cm_id, REC->srcaddr, REC->dstaddr, REC->tos, __print_symbolic(REC->event, { 0, "ADDR_RESOLVED" }, { 1, "ADDR_ERROR" }, { 2, "ROUTE_RESOLVED" }, { 3, "ROUTE_ERROR" }, { 4, "CONNECT_REQUEST" }, { 5, "CONNECT_RESPONSE" }, { 6, "CONNECT_ERROR" }, { 7, "UNREACHABLE" }, { 8, "REJECTED" }, { 9, "ESTABLISHED" }, { 10, "DISCONNECTED" }, { 11, "DEVICE_REMOVAL" }, { 12, "MULTICAST_JOIN" }, { 13, "MULTICAST_ERROR" }, { 14, "ADDR_CHANGE" }, { 15, "TIMEWAIT_EXIT" }), REC->event, REC->status"#,
    )
}

fn mad_send_template(name: &str, id: u32) -> String {
    format_file(
        name,
        id,
        &[
            ("u8 base_version", 8, 1, false),
            ("u8 mgmt_class", 9, 1, false),
            ("u8 class_version", 10, 1, false),
            ("u8 port_num", 11, 1, false),
            ("u32 qp_num", 12, 4, false),
            ("u8 method", 16, 1, false),
            ("u8 sl", 17, 1, false),
            ("u16 attr_id", 18, 2, false),
            ("u32 attr_mod", 20, 4, false),
            ("u64 wrtid", 24, 8, false),
            ("u64 tid", 32, 8, false),
            ("u16 status", 40, 2, false),
            ("u16 class_specific", 42, 2, false),
            ("u32 length", 44, 4, false),
            ("u32 dlid", 48, 4, false),
            ("u32 rqpn", 52, 4, false),
            ("u32 rqkey", 56, 4, false),
            ("u32 dev_index", 60, 4, false),
            ("void * agent_priv", 64, 8, false),
            ("unsigned long timeout", 72, 8, false),
            ("int retries_left", 80, 4, true),
            ("int max_retries", 84, 4, true),
            ("int retry", 88, 4, true),
            ("u16 pkey", 92, 2, false),
        ],
        r#""%d:%d QP%d agent %p: wrtid 0x%llx; %d/%d retries(%d); timeout %lu length %d : hdr : base_ver 0x%x class 0x%x class_ver 0x%x method 0x%x status 0x%x class_specific 0x%x tid 0x%llx attr_id 0x%x attr_mod 0x%x  => dlid 0x%08x sl %d pkey 0x%x rpqn 0x%x rqpkey 0x%x", REC->dev_index, REC->port_num, REC->qp_num, REC->agent_priv, be64_to_cpu(REC->wrtid), REC->retries_left, REC->max_retries, REC->retry, REC->timeout, REC->length, REC->base_version, REC->mgmt_class, REC->class_version, REC->method, be16_to_cpu(REC->status), be16_to_cpu(REC->class_specific), be64_to_cpu(REC->tid), be16_to_cpu(REC->attr_id), be32_to_cpu(REC->attr_mod), be32_to_cpu(REC->dlid), REC->sl, REC->pkey, REC->rqpn, REC->rqkey"#,
    )
}

fn mad_recv_done_handler() -> String {
    format_file(
        "ib_mad_recv_done_handler",
        1701,
        &[
            ("u8 base_version", 8, 1, false),
            ("u8 mgmt_class", 9, 1, false),
            ("u8 class_version", 10, 1, false),
            ("u8 port_num", 11, 1, false),
            ("u32 qp_num", 12, 4, false),
            ("u16 status", 16, 2, false),
            ("u16 class_specific", 18, 2, false),
            ("u32 length", 20, 4, false),
            ("u64 tid", 24, 8, false),
            ("u8 method", 32, 1, false),
            ("u8 sl", 33, 1, false),
            ("u16 attr_id", 34, 2, false),
            ("u32 attr_mod", 36, 4, false),
            ("u16 src_qp", 40, 2, false),
            ("u16 wc_status", 42, 2, false),
            ("u32 slid", 44, 4, false),
            ("u32 dev_index", 48, 4, false),
            ("u16 pkey", 52, 2, false),
        ],
        r#""%d:%d QP%d : RECV WC Status %d : length %d : hdr : base_ver 0x%02x class 0x%02x class_ver 0x%02x method 0x%02x status 0x%04x class_specific 0x%04x tid 0x%016llx attr_id 0x%04x attr_mod 0x%08x slid 0x%08x src QP%d, sl %d pkey 0x%04x", REC->dev_index, REC->port_num, REC->qp_num, REC->wc_status, REC->length, REC->base_version, REC->mgmt_class, REC->class_version, REC->method, be16_to_cpu(REC->status), be16_to_cpu(REC->class_specific), be64_to_cpu(REC->tid), be16_to_cpu(REC->attr_id), be32_to_cpu(REC->attr_mod), REC->slid, REC->src_qp, REC->sl, REC->pkey"#,
    )
}

fn mad_send_done_handler() -> String {
    format_file(
        "ib_mad_send_done_handler",
        1700,
        &[
            ("u8 port_num", 8, 1, false),
            ("u8 base_version", 9, 1, false),
            ("u8 mgmt_class", 10, 1, false),
            ("u8 class_version", 11, 1, false),
            ("u32 qp_num", 12, 4, false),
            ("u64 wrtid", 16, 8, false),
            ("u16 status", 24, 2, false),
            ("u16 wc_status", 26, 2, false),
            ("u32 length", 28, 4, false),
            ("void * agent_priv", 32, 8, false),
            ("unsigned long timeout", 40, 8, false),
            ("u32 dev_index", 48, 4, false),
            ("int retries_left", 52, 4, true),
            ("int max_retries", 56, 4, true),
            ("int retry", 60, 4, true),
            ("u8 method", 64, 1, false),
        ],
        r#""%d:%d QP%d : SEND WC Status %d : agent %p: wrtid 0x%llx %d/%d retries(%d) timeout %lu length %d: hdr : base_ver 0x%x class 0x%x class_ver 0x%x method 0x%x status 0x%x", REC->dev_index, REC->port_num, REC->qp_num, REC->wc_status, REC->agent_priv, be64_to_cpu(REC->wrtid), REC->retries_left, REC->max_retries, REC->retry, REC->timeout, REC->length, REC->base_version, REC->mgmt_class, REC->class_version, REC->method, be16_to_cpu(REC->status)"#,
    )
}

fn cq_poll() -> String {
    format_file(
        "cq_poll",
        1650,
        &[
            ("u32 cq_id", 8, 4, false),
            ("int requested", 12, 4, true),
            ("int rc", 16, 4, true),
        ],
        r#""cq.id=%u requested %d, returned %d", REC->cq_id, REC->requested, REC->rc"#,
    )
}

/// Each RDMA tracepoint `--kernel-events` asks for, with its fixture.
fn fixtures() -> Vec<(TraceSpec, String)> {
    kevents::rdma_specs()
        .into_iter()
        .map(|spec| {
            let text = match spec.name().as_str() {
                "rdma_cma:cm_qp_create" => cm_qp_create(),
                "rdma_cma:cm_send_req" => cma_qp_class("cm_send_req", 1720),
                "rdma_cma:cm_send_rep" => cma_qp_class("cm_send_rep", 1721),
                "rdma_cma:cm_event_handler" => cm_event_handler(true),
                "ib_mad:ib_mad_ib_send_mad" => mad_send_template("ib_mad_ib_send_mad", 1698),
                "ib_mad:ib_mad_error_handler" => mad_send_template("ib_mad_error_handler", 1697),
                "ib_mad:ib_mad_recv_done_handler" => mad_recv_done_handler(),
                "ib_mad:ib_mad_send_done_handler" => mad_send_done_handler(),
                "rdma_core:cq_poll" => cq_poll(),
                other => panic!("no fixture for {other}"),
            };
            (spec, text)
        })
        .collect()
}

/// A recorder record as the eBPF program writes it (tracer_common::kevents::TraceEvent, native endian).
fn record(
    slot: u32,
    pid: u32,
    tid: u32,
    comm: &str,
    ts: u64,
    values: &[u64],
    bytes: &[&[u8]],
) -> Vec<u8> {
    let mut r = Vec::with_capacity(TRACE_EVENT_LEN);
    r.extend_from_slice(&ts.to_ne_bytes());
    r.extend_from_slice(&((u64::from(pid) << 32) | u64::from(tid)).to_ne_bytes());
    r.extend_from_slice(&slot.to_ne_bytes());
    r.extend_from_slice(&[0; 4]);
    let mut c = [0u8; 16];
    c[..comm.len()].copy_from_slice(comm.as_bytes());
    r.extend_from_slice(&c);
    for i in 0..6 {
        r.extend_from_slice(&values.get(i).copied().unwrap_or(0).to_ne_bytes());
    }
    for i in 0..2 {
        let mut b = [0u8; BYTES_LEN];
        if let Some(src) = bytes.get(i) {
            b[..src.len()].copy_from_slice(src);
        }
        r.extend_from_slice(&b);
    }
    assert_eq!(r.len(), TRACE_EVENT_LEN);
    r
}

fn sockaddr_in(ip: [u8; 4], port: u16) -> [u8; 28] {
    let mut a = [0u8; 28];
    a[..2].copy_from_slice(&2u16.to_ne_bytes());
    a[2..4].copy_from_slice(&port.to_be_bytes());
    a[4..8].copy_from_slice(&ip);
    a
}

#[test]
fn rdma_format_files_give_the_recorder_its_offsets() {
    let fixtures = fixtures();
    assert_eq!(fixtures.len(), kevents::rdma_specs().len());
    let mut resolved = Vec::new();
    for (slot, (spec, text)) in fixtures.iter().enumerate() {
        let r = kevents::resolve(spec, text, slot as u32)
            .unwrap_or_else(|e| panic!("{}: {e}", spec.name()));
        assert!(r.missing.is_empty(), "{}: {:?}", r.name, r.missing);
        assert_eq!(r.config.slot, slot as u32);
        resolved.push(r);
    }
    let by_name = |n: &str| resolved.iter().find(|r| r.name == n).unwrap();
    let offsets = |r: &kevents::Resolved| -> Vec<(u16, u8, u8)> {
        r.config
            .fields
            .iter()
            .take(r.ints.len())
            .map(|f| (f.offset, f.size, f.flags))
            .collect()
    };

    let qp = by_name("rdma_cma:cm_qp_create");
    assert_eq!(qp.id, 1732);
    // qp_num, qp_type (unsigned long), rc (int, signed), cm_id, tos, pd_id.
    assert_eq!(
        offsets(qp),
        [
            (20, 4, 0),
            (40, 8, 0),
            (32, 4, FIELD_SIGNED),
            (8, 4, 0),
            (16, 4, 0),
            (12, 4, 0)
        ]
    );
    assert_eq!(
        (qp.config.bytes[0].offset, qp.config.bytes[0].size),
        (48, 28)
    );
    assert_eq!(
        (qp.config.bytes[1].offset, qp.config.bytes[1].size),
        (76, 28)
    );
    assert!(qp.bytes.iter().all(|b| b.sockaddr));
    assert_eq!(qp.ints[1].symbols.get(&2).map(String::as_str), Some("RC"));

    let ev = by_name("rdma_cma:cm_event_handler");
    assert_eq!(offsets(ev)[..2], [(16, 8, 0), (24, 4, FIELD_SIGNED)]);
    assert_eq!(
        ev.ints[0].symbols.get(&9).map(String::as_str),
        Some("ESTABLISHED")
    );

    let req = by_name("rdma_cma:cm_send_req");
    assert_eq!(offsets(req)[0], (16, 4, 0));
    assert_eq!(req.config.bytes[0].offset, 20);

    let send = by_name("ib_mad:ib_mad_ib_send_mad");
    // mgmt_class, method, attr_id, status, qp_num, rqpn.
    assert_eq!(
        offsets(send),
        [
            (9, 1, 0),
            (16, 1, 0),
            (18, 2, 0),
            (40, 2, 0),
            (12, 4, 0),
            (52, 4, 0)
        ]
    );
    assert!(send.ints[2].big_endian && send.ints[3].big_endian && !send.ints[0].big_endian);
    let recv = by_name("ib_mad:ib_mad_recv_done_handler");
    assert_eq!(
        offsets(recv),
        [
            (9, 1, 0),
            (32, 1, 0),
            (34, 2, 0),
            (16, 2, 0),
            (40, 2, 0),
            (42, 2, 0)
        ]
    );
    let done = by_name("ib_mad:ib_mad_send_done_handler");
    assert_eq!(offsets(done)[..2], [(10, 1, 0), (64, 1, 0)]);

    let poll = by_name("rdma_core:cq_poll");
    assert_eq!(poll.config.mode, MODE_COUNT);
    assert_eq!(offsets(poll), [(8, 4, 0), (16, 4, FIELD_SIGNED)]);
    assert_eq!((poll.config.count_key, poll.config.count_sum), (0, 1));

    // Records decode into the fields by name, addresses and names included, on the packets' clock.
    let offset = 1_700_000_000_000_000_000;
    let slot = |n: &str| resolved.iter().position(|r| r.name == n).unwrap() as u32;
    let src = sockaddr_in([10, 0, 0, 1], 4791);
    let dst = sockaddr_in([10, 0, 0, 2], 18515);
    let rec = record(
        slot("rdma_cma:cm_qp_create"),
        4242,
        4243,
        "nvme-rdma",
        5_000,
        &[0x1a2b, 2, 0, 7, 106, 3],
        &[&src, &dst],
    );
    let e = kevents::decode_event(&resolved, &rec, offset).unwrap();
    assert_eq!(e.ts_ns, offset + 5_000);
    assert_eq!(
        (e.tracepoint.as_str(), e.pid, e.tid, e.comm.as_str()),
        ("rdma_cma:cm_qp_create", 4242, 4243, "nvme-rdma")
    );
    assert_eq!(e.fields["qp_num"], 0x1a2b);
    assert_eq!(e.fields["qp_type_name"], "RC");
    assert_eq!(e.fields["rc"], 0);
    assert_eq!(e.fields["srcaddr"], "10.0.0.1:4791");
    assert_eq!(e.fields["dstaddr"], "10.0.0.2:18515");

    // A failed connection: status is a negative errno, sign-extended by the program.
    let rec = record(
        slot("rdma_cma:cm_event_handler"),
        1,
        1,
        "rping",
        9,
        &[8, (-110i64) as u64, 3, 0],
        &[&src, &dst],
    );
    let e = kevents::decode_event(&resolved, &rec, 0).unwrap();
    assert_eq!(e.fields["event_name"], "REJECTED");
    assert_eq!(e.fields["status"], -110);

    // MAD header fields are in network order in the record; shown as the protocol numbers them.
    let rec = record(
        slot("ib_mad:ib_mad_ib_send_mad"),
        1,
        1,
        "kworker/u8:1",
        9,
        &[0x07, 0x03, u64::from(0x0010u16.swap_bytes()), 0, 1, 1],
        &[],
    );
    let e = kevents::decode_event(&resolved, &rec, 0).unwrap();
    assert_eq!(
        (
            &e.fields["mgmt_class"],
            &e.fields["method"],
            &e.fields["attr_id"]
        ),
        (&Value::from(7), &Value::from(3), &Value::from(0x10))
    );

    // Short and foreign records are refused, not misread.
    assert!(kevents::decode_event(&resolved, &rec[..TRACE_EVENT_LEN - 1], 0).is_none());
    let stranger = record(99, 1, 1, "x", 1, &[], &[]);
    assert!(kevents::decode_event(&resolved, &stranger, 0).is_none());
}

#[test]
fn an_older_layout_loses_a_field_not_the_tracepoint() {
    let spec = kevents::rdma_specs()
        .into_iter()
        .find(|s| s.name() == "rdma_cma:cm_event_handler")
        .unwrap();
    let r = kevents::resolve(&spec, &cm_event_handler(false), 0).unwrap();
    assert_eq!(r.missing, ["status (not in this kernel's record)"]);
    // The addresses moved up by four bytes with it.
    assert_eq!(
        (r.config.bytes[0].offset, r.config.bytes[1].offset),
        (24, 52)
    );
    assert_eq!(
        r.ints.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
        ["event", "cm_id", "tos"]
    );
    // A counted tracepoint without its key cannot be recorded at all; without an id neither.
    let poll = kevents::rdma_specs().into_iter().find(|s| s.count).unwrap();
    let no_key = cq_poll().replace("cq_id", "cq_ident");
    assert!(matches!(
        kevents::resolve(&poll, &no_key, 0),
        Err(kevents::FormatError::MissingField(f)) if f == "cq_id"
    ));
    assert_eq!(
        kevents::resolve(&spec, &cm_event_handler(true).replace("ID: 1740", ""), 0),
        Err(kevents::FormatError::MissingId)
    );
    // A string field declared __data_loc is copied through its locator.
    let exec = "name: sched_process_exec\nID: 365\nformat:\n\
        \tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;\n\
        \tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;\n";
    let r = kevents::resolve(
        &TraceSpec::parse("sched:sched_process_exec").unwrap(),
        exec,
        3,
    )
    .unwrap();
    assert_eq!(r.config.bytes[0].flags, FIELD_DATA_LOC);
    assert_eq!(r.config.fields[0].offset, 12);
}

/// With rotation, every file stands alone: its own `DROP` block, `EVNT` blocks whose first lists the
/// tracepoints, and intervals that continue where the previous file's stopped.
#[test]
fn every_rotated_file_carries_its_kernel_events() {
    let what = "kernel_events_every_rotated_file_carries_its_kernel_events";
    if !require_netns(what) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ns = netns("kt");
    let base = dir.path().join("rot.pcapng");
    let child = ns.capture_on_vb(
        dir.path(),
        &base,
        &[
            "--kernel-events",
            "--interval",
            "300ms",
            "--rotate-seconds",
            "1",
        ],
    );
    std::thread::sleep(Duration::from_millis(2600));
    signal(&child, "INT");
    let result = wait(child, 15);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let files: Vec<_> = (0..)
        .map(|i| tracer::output::rotated_path(&base, i))
        .take_while(|p| p.exists())
        .collect();
    assert!(files.len() >= 2, "{files:?}");
    let mut previous_end: Option<u64> = None;
    for f in &files {
        assert_eq!(
            records(f, roce_capture::blocks::DROPS).len(),
            1,
            "{}",
            f.display()
        );
        let evnt = records(f, roce_capture::blocks::EVENTS);
        assert!(!evnt.is_empty(), "{}", f.display());
        assert!(
            evnt[0]["tracepoints"]["attached"]
                .as_array()
                .is_some_and(|a| a.iter().any(|t| t == "skb:kfree_skb")),
            "{}: {}",
            f.display(),
            evnt[0]
        );
        assert!(evnt[1..].iter().all(|e| e.get("tracepoints").is_none()));
        for e in &evnt {
            if let Some(end) = previous_end {
                assert_eq!(e["from_ns"].as_u64(), Some(end), "{}", f.display());
            }
            previous_end = e["to_ns"].as_u64();
        }
    }
}
