//! A queue pair that both sends its own requests and answers its peer's READs and atomics carries two PSN
//! sequences in one direction. Counted as one, every switch between them looked like a jump of thousands of
//! PSNs and the report claimed loss on a clean capture. Here: a public Soft-RoCE capture of rping, and a
//! generated two-way conversation with every kind of request and response, clean and with one packet taken
//! out of each sequence.

use std::path::Path;

use crate::common::{analyzer, run, shared_capture, v4_frame};
use analyzer::analysis::{self as pipeline, Analysis, PipelineOptions};
use roce_capture::LinkType;
use roce_capture::write::PcapWriter;
use roce_wire::ext::{AethRepr, AtomicAckEthRepr, AtomicEthRepr, RethRepr};
use roce_wire::{BthRepr, ExtHeaders, Opcode};
use serde_json::Value;

/// The findings a PSN gap or retransmission raises.
const LOSS_FINDINGS: [&str; 4] = [
    "unseen_psns",
    "capture_loss",
    "network_loss",
    "go_back_n_loss",
];

/// `stats --json`'s flows of a file.
fn flows(path: &Path) -> Vec<Value> {
    let out = run(analyzer().arg("stats").arg("--json").arg(path));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["flows"].as_array().unwrap().clone()
}

/// The analysis `report` runs, for its findings.
fn analyse(path: &Path) -> Analysis {
    let mut c = roce_capture::Capture::open_file(path).unwrap();
    pipeline::run(&mut c, &PipelineOptions::default(), |_| {}).unwrap()
}

fn loss_findings(a: &Analysis) -> Vec<String> {
    a.findings
        .iter()
        .filter(|f| LOSS_FINDINGS.contains(&f.code))
        .map(|f| format!("{}: {} {:?}", f.code, f.title, f.evidence))
        .collect()
}

fn psn_counts(f: &Value) -> [u64; 3] {
    ["psn_gaps", "retransmissions", "out_of_order"].map(|k| f[k].as_u64().unwrap())
}

#[test]
fn rping_over_soft_roce_shows_no_loss() {
    // QP 0x2b on .61 receives .62's SENDs (PSNs from 16,694,589) and the READ responses .62 returns for .61's
    // READs (PSNs from 15,782, four apart: .61's SENDs and WRITEs in between have only ACKs). Nothing is lost.
    let Some(path) = shared_capture("softroce_rping.pcap") else {
        return;
    };
    let flows = flows(&path);
    let qp2b = flows
        .iter()
        .find(|f| f["dest_qp"] == 0x2b)
        .expect("the flow to QP 0x2b");
    assert_eq!(qp2b["opcodes"]["RC_RDMA_READ_RESPONSE_ONLY"], 5, "{qp2b}");
    assert_eq!(qp2b["opcodes"]["RC_SEND_ONLY"], 10, "{qp2b}");
    for f in &flows {
        assert_eq!(psn_counts(f), [0, 0, 0], "{f}");
    }
    let found = loss_findings(&analyse(&path));
    assert!(found.is_empty(), "{found:#?}");
}

/// Host 1 (QP 0x100) WRITEs to host 2 (QP 0x200) and answers host 2's READs and FETCH_ADDs; host 2 SENDs
/// too. Each host numbers its requests from its own PSN space (host 1's crosses the 24-bit wrap). The flow
/// 1 → 2 carries host 1's WRITEs, its READ responses and atomic ACKs (host 2's PSNs), and its ACKs of host
/// 2's SENDs; the flow 2 → 1 carries host 2's requests and its ACKs of host 1's WRITEs.
struct Conversation {
    frames: Vec<(u64, Vec<u8>, Sequence)>,
    psn1: u32,
    psn2: u32,
}

/// Which sequence a frame counts in, so a test can take one out of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Sequence {
    /// A middle packet of host 1's WRITEs (host 1's requests).
    WriteMiddle,
    /// A middle packet of host 1's READ responses (host 2's request space, answered).
    ReadResponseMiddle,
    Other,
}

const QP1: u32 = 0x100;
const QP2: u32 = 0x200;
const PMTU: usize = 1024;

impl Conversation {
    fn new() -> Self {
        Conversation {
            frames: Vec::new(),
            psn1: 0xff_fff0,
            psn2: 5000,
        }
    }

    fn push(&mut self, from: u8, op: Opcode, psn: u32, ext: ExtHeaders, len: usize, seq: Sequence) {
        let (to, qp) = if from == 1 { (2, QP2) } else { (1, QP1) };
        let bytes = v4_frame(
            from,
            to,
            2,
            BthRepr::new(op, qp, psn),
            ext,
            &vec![0xab; len],
        );
        let ts = 1_000 * (self.frames.len() as u64 + 1);
        self.frames.push((ts, bytes, seq));
    }

    fn ack(msn: u32) -> ExtHeaders {
        ExtHeaders {
            aeth: Some(AethRepr {
                syndrome: 0x1f,
                msn,
            }),
            ..ExtHeaders::default()
        }
    }

    fn reth(len: u32) -> ExtHeaders {
        ExtHeaders {
            reth: Some(RethRepr {
                va: 0x7f00_0000_0000,
                rkey: 0x1234,
                dma_len: len,
            }),
            ..ExtHeaders::default()
        }
    }

    /// One round: a three-packet WRITE from host 1, then from host 2 a three-packet READ, a SEND, a
    /// FETCH_ADD and a one-packet READ, each answered.
    fn round(&mut self, msn: u32) {
        let none = ExtHeaders::default;
        let p = self.psn1;
        let add = |p: u32, n: u32| (p + n) & 0xff_ffff;
        self.push(
            1,
            Opcode::RC_RDMA_WRITE_FIRST,
            p,
            Self::reth(3 * PMTU as u32),
            PMTU,
            Sequence::Other,
        );
        self.push(
            1,
            Opcode::RC_RDMA_WRITE_MIDDLE,
            add(p, 1),
            none(),
            PMTU,
            Sequence::WriteMiddle,
        );
        self.push(
            1,
            Opcode::RC_RDMA_WRITE_LAST,
            add(p, 2),
            none(),
            PMTU,
            Sequence::Other,
        );
        self.push(
            2,
            Opcode::RC_ACKNOWLEDGE,
            add(p, 2),
            Self::ack(msn),
            0,
            Sequence::Other,
        );
        self.psn1 = add(p, 3);

        let q = self.psn2;
        self.push(
            2,
            Opcode::RC_RDMA_READ_REQUEST,
            q,
            Self::reth(3 * PMTU as u32),
            0,
            Sequence::Other,
        );
        self.push(
            1,
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            q,
            Self::ack(msn),
            PMTU,
            Sequence::Other,
        );
        self.push(
            1,
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            q + 1,
            none(),
            PMTU,
            Sequence::ReadResponseMiddle,
        );
        self.push(
            1,
            Opcode::RC_RDMA_READ_RESPONSE_LAST,
            q + 2,
            Self::ack(msn),
            PMTU,
            Sequence::Other,
        );
        self.push(2, Opcode::RC_SEND_ONLY, q + 3, none(), 64, Sequence::Other);
        self.push(
            1,
            Opcode::RC_ACKNOWLEDGE,
            q + 3,
            Self::ack(msn),
            0,
            Sequence::Other,
        );
        let atomic = ExtHeaders {
            atomic_eth: Some(AtomicEthRepr {
                va: 0x7f00_0000_1000,
                rkey: 0x1234,
                swap_add: 1,
                compare: 0,
            }),
            ..ExtHeaders::default()
        };
        self.push(2, Opcode::RC_FETCH_ADD, q + 4, atomic, 0, Sequence::Other);
        let atomic_ack = ExtHeaders {
            atomic_ack_eth: Some(AtomicAckEthRepr {
                orig: u64::from(msn),
            }),
            ..Self::ack(msn)
        };
        self.push(
            1,
            Opcode::RC_ATOMIC_ACKNOWLEDGE,
            q + 4,
            atomic_ack,
            0,
            Sequence::Other,
        );
        self.push(
            2,
            Opcode::RC_RDMA_READ_REQUEST,
            q + 5,
            Self::reth(256),
            0,
            Sequence::Other,
        );
        self.push(
            1,
            Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            q + 5,
            Self::ack(msn),
            256,
            Sequence::Other,
        );
        self.psn2 = q + 6;
    }

    /// A pcap of the conversation without the `skip`th frame of each sequence named.
    fn write(&self, path: &Path, skip: &[(Sequence, usize)]) {
        let mut seen = std::collections::HashMap::new();
        let mut out = PcapWriter::new(
            std::fs::File::create(path).unwrap(),
            LinkType::ETHERNET,
            65535,
        )
        .unwrap();
        for (ts, bytes, seq) in &self.frames {
            let n = seen.entry(*seq).or_insert(0usize);
            *n += 1;
            if skip.contains(&(*seq, *n)) {
                continue;
            }
            out.write_packet(*ts, bytes, bytes.len() as u32).unwrap();
        }
        out.into_inner().unwrap();
    }
}

#[test]
fn requests_and_responses_of_one_qp_are_counted_apart() {
    let mut conv = Conversation::new();
    for msn in 1..=20 {
        conv.round(msn);
    }
    let dir = tempfile::tempdir().unwrap();
    let flow = |flows: &[Value], src: &str| -> [u64; 3] {
        psn_counts(
            flows
                .iter()
                .find(|f| f["src"] == src)
                .unwrap_or_else(|| panic!("no flow from {src}: {flows:?}")),
        )
    };

    let clean = dir.path().join("clean.pcap");
    conv.write(&clean, &[]);
    let f = flows(&clean);
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(flow(&f, "10.0.0.1"), [0, 0, 0]);
    assert_eq!(flow(&f, "10.0.0.2"), [0, 0, 0]);
    let found = loss_findings(&analyse(&clean));
    assert!(found.is_empty(), "{found:#?}");

    // One WRITE packet (host 1's sequence) and one READ response packet (host 2's sequence, answered by host
    // 1) never reach the tap: exactly two PSNs unseen, both on the flow 1 → 2.
    let lossy = dir.path().join("lossy.pcap");
    conv.write(
        &lossy,
        &[
            (Sequence::WriteMiddle, 7),
            (Sequence::ReadResponseMiddle, 12),
        ],
    );
    let f = flows(&lossy);
    assert_eq!(flow(&f, "10.0.0.1"), [2, 0, 0]);
    assert_eq!(flow(&f, "10.0.0.2"), [0, 0, 0]);
    let a = analyse(&lossy);
    let unseen = a
        .findings
        .iter()
        .find(|f| f.code == "unseen_psns")
        .expect("the unseen PSNs are a finding");
    assert_eq!(unseen.evidence.len(), 1, "{unseen:?}");
    assert!(
        unseen.evidence[0].contains("2 PSNs never seen"),
        "{unseen:?}"
    );
    assert!(
        a.findings.iter().all(|f| f.code != "network_loss"),
        "{:?}",
        a.findings
    );
}
