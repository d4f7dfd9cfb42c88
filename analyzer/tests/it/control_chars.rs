//! Strings a capture carries reach the terminal escaped: an interface name, a section comment, a counter's
//! name, a process name or a kernel event's field that holds an escape sequence is printed as `\x1b`, never as
//! the byte that would retitle, clear or recolour the terminal.

use std::path::{Path, PathBuf};

use crate::common::{analyzer, run, v4_frame};
use roce_capture::LinkType;
use roce_capture::blocks::{self, COUNTERS, EVENTS, PEN};
use roce_capture::write::{PcapngWriter, SectionInfo};
use roce_wire::{BthRepr, ExtHeaders, Opcode};
use serde_json::json;

/// Sets the terminal's title, clears the screen, turns text red; ends with a C1 CSI.
const HOSTILE: &str = "\x1b]0;owned\x07\x1b[2J\x1b[31m\u{9b}1m";

fn hostile_capture(dir: &Path) -> PathBuf {
    let section = SectionInfo {
        comment: Some(format!("run {HOSTILE}")),
        ..SectionInfo::default()
    };
    let mut w = PcapngWriter::new(Vec::new(), &section).unwrap();
    w.add_interface(
        LinkType::ETHERNET,
        65535,
        Some(&format!("eth0{HOSTILE}")),
        Some(HOSTILE),
    )
    .unwrap();
    let counters = |ts: u64, v: u64| {
        blocks::encode(
            COUNTERS,
            &json!({"ts_ns": ts, "counters": {format!("class/infiniband/mlx5_0{HOSTILE}/np_cnp_sent"): v}}),
        )
        .unwrap()
    };
    w.write_custom(PEN, &counters(500, 1), true).unwrap();
    for i in 0..20u32 {
        let bth = BthRepr::new(Opcode::RC_SEND_ONLY, 0x42, i);
        let f = v4_frame(2, 1, 3, bth, ExtHeaders::default(), &[0; 256]);
        w.write_packet(0, 1_000 + u64::from(i) * 1_000, &f, f.len() as u32)
            .unwrap();
    }
    let events = json!({
        "ts_ns": 30_000, "from_ns": 0, "to_ns": 30_000,
        "tracepoints": {"attached": [format!("rdma_cma:cm_send_req{HOSTILE}")], "unavailable": [], "incomplete": {}},
        "events": [{"ts_ns": 2_000, "tracepoint": "rdma_cma:cm_send_req", "pid": 7, "tid": 7,
                    "comm": format!("evil{HOSTILE}"),
                    "fields": {"qp_num": 0x42, "srcaddr": "10.0.0.1:4791", "dstaddr": "10.0.0.2:4791", "note": HOSTILE}}],
        "drops": [{"protocol": format!("ipv4{HOSTILE}"), "reason": HOSTILE, "count": 1}],
        "counts": [], "lost": 0,
    });
    w.write_custom(PEN, &blocks::encode(EVENTS, &events).unwrap(), true)
        .unwrap();
    w.write_custom(PEN, &counters(40_000, 9), true).unwrap();
    let path = dir.join(format!("capture{}.pcapng", "\x1b[1m"));
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();
    path
}

/// No raw control character but the line breaks: C0 and C1, in text and in JSON alike.
fn assert_clean(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let raw: Vec<char> = text
        .chars()
        .filter(|&c| c.is_control() && c != '\n')
        .collect();
    assert!(
        raw.is_empty(),
        "{what}: raw control characters {raw:?} in\n{text}"
    );
}

#[test]
fn text_outputs_escape_what_the_capture_says() {
    let dir = tempfile::tempdir().unwrap();
    let path = hostile_capture(dir.path());
    let stats = run(analyzer().arg("stats").arg(&path));
    assert!(
        stats.status.success(),
        "{}",
        String::from_utf8_lossy(&stats.stderr)
    );
    assert_clean("stats stdout", &stats.stdout);
    assert_clean("stats stderr", &stats.stderr);
    let text = String::from_utf8_lossy(&stats.stdout);
    assert!(text.contains("eth0\\x1b]0;owned\\x07\\x1b[2J"), "{text}");
    assert!(text.contains("\\u{9b}1m"), "{text}");
    assert!(
        text.contains("evil\\x1b]0;owned"),
        "the process name: {text}"
    );
    assert!(text.contains("mlx5_0\\x1b]0;owned"), "the counter: {text}");
    assert!(
        text.contains("capture\\x1b[1m.pcapng"),
        "the file name: {text}"
    );

    for args in [
        &["decode"][..],
        &["dcqcn"],
        &["stats", "--json"],
        &["decode", "--json"],
    ] {
        let out = run(analyzer().args(args).arg(&path));
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_clean(&format!("{args:?} stdout"), &out.stdout);
        assert_clean(&format!("{args:?} stderr"), &out.stderr);
    }

    let report_dir = dir.path().join("report");
    let out = run(analyzer()
        .arg("report")
        .arg(&path)
        .arg("-o")
        .arg(&report_dir));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_clean("report stdout", &out.stdout);
    assert_clean("report stderr", &out.stderr);

    // An error naming a file whose name holds an escape sequence.
    let missing = dir.path().join("gone\x1b]0;x\x07.pcapng");
    let out = run(analyzer().arg("stats").arg(&missing));
    assert!(!out.status.success());
    assert_clean("error", &out.stderr);
    assert!(String::from_utf8_lossy(&out.stderr).contains("gone\\x1b]0;x\\x07"));
}
