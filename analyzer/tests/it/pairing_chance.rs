//! Pairing on the traffic collectives make: several QPs between every two hosts, driven together, with random
//! QP numbers and initial PSNs (samples::multi_qp). A wrong pair makes the model cut a flow that was never
//! marked, so the count of wrong pairs must be zero at every size and tap position; the share paired is
//! printed, and must be high where the evidence is (ACKs at any tap, CE marks at the receiver).

use roce_capture::{LinkType, Record};
use roce_core::decode::Decoder;
use roce_core::passes::brief::Brief;
use roce_core::passes::flows::FlowKey;
use roce_core::passes::pairing::{Pairing, PairingPass};
use rustc_hash::FxHashMap;
use samples::bulk::FrameSink;
use samples::multi_qp::{self, Acks, MultiQpSpec, MultiQpTruth, TapAt};

/// Decodes each generated frame straight into the pass: no file in between, so a million frames stay cheap.
struct Feed {
    pass: PairingPass,
    decoder: Decoder,
    n: u64,
}

impl FrameSink for Feed {
    fn packet(&mut self, ts_ns: u64, data: &[u8], orig_len: u32) -> std::io::Result<()> {
        self.n += 1;
        let rec = Record {
            iface: 0,
            link: LinkType::ETHERNET,
            ts_ns,
            caplen: data.len() as u32,
            len: orig_len,
            data,
            offset: 0,
            speed_bps: None,
        };
        self.pass
            .frame(&Brief::of(&self.decoder.decode(self.n, &rec)));
        Ok(())
    }
}

/// What the pairing made of one capture, against its truth.
#[derive(Debug, Default)]
struct Outcome {
    /// CNP streams in the capture.
    streams: usize,
    paired: usize,
    wrong: Vec<String>,
    /// Unpaired streams by reason.
    reasons: FxHashMap<&'static str, usize>,
    /// Pairs by method.
    methods: FxHashMap<&'static str, usize>,
}

fn run(spec: &MultiQpSpec) -> (MultiQpTruth, Outcome) {
    let mut feed = Feed {
        pass: PairingPass::in_memory(),
        decoder: Decoder {
            check_icrc: false,
            ..Decoder::default()
        },
        n: 0,
    };
    let truth = multi_qp::generate(&mut feed, spec).unwrap();
    let pairing = feed.pass.finish();
    (truth.clone(), judge(&truth, &pairing))
}

fn judge(truth: &MultiQpTruth, pairing: &Pairing) -> Outcome {
    let mut o = Outcome::default();
    let streams: Vec<FlowKey> = pairing.cnp_streams().map(|((_, s), _)| s).collect();
    o.streams = streams.len();
    for s in streams {
        let conn = truth
            .connections
            .iter()
            .find(|c| c.receiver == s.src && c.sender == s.dst && c.sender_qp == s.dest_qp)
            .expect("every CNP stream goes to a sender QP of the truth");
        match pairing.of_cnp(&s) {
            Some(p) => {
                o.paired += 1;
                *o.methods.entry(p.method.key()).or_default() += 1;
                if p.receiver_qp != conn.receiver_qp {
                    o.wrong.push(format!(
                        "stream to {:#x} paired by {} with the flow to {:#x}, not {:#x} (evidence {})",
                        s.dest_qp,
                        p.method.key(),
                        p.receiver_qp,
                        conn.receiver_qp,
                        p.evidence
                    ));
                }
            }
            None => {
                let why = pairing.ambiguous(&s).map_or("no_evidence", |a| a.reason);
                *o.reasons.entry(why).or_default() += 1;
            }
        }
    }
    o
}

/// One capture of the random mix: every dimension drawn from `seed`, at `frames` frames.
fn random_spec(frames: u64, seed: u64) -> MultiQpSpec {
    let mut rng = samples::corpus::Rng::new(seed);
    let mut pick = |n: u64| rng.below(n) as usize;
    MultiQpSpec {
        frames,
        host_pairs: [4, 8, 64][pick(3)],
        qps_per_pair: [2, 3, 8, 16, 64][pick(5)],
        acks: [Acks::None, Acks::Sparse, Acks::Every][pick(3)],
        tap: [TapAt::Sender, TapAt::Receiver][pick(2)],
        lockstep: pick(2) == 0,
        cnp_delay_ns: [(500, 3_000), (500, 40_000), (2_000, 150_000)][pick(3)],
        seed,
    }
}

fn case(spec: &MultiQpSpec) -> Outcome {
    let (truth, o) = run(spec);
    println!(
        "{:>7} frames, {:>2} pairs x {:>2} QPs, acks {:<6}, tap {:<8}, lockstep {:<5}, CNP delay {:>3}-{:>3} µs: \
         {:>5} CNPs in {:>4} streams, {:>4} paired {:?}, unpaired {:?}",
        spec.frames,
        spec.host_pairs,
        spec.qps_per_pair,
        format!("{:?}", spec.acks),
        format!("{:?}", spec.tap),
        spec.lockstep,
        spec.cnp_delay_ns.0 / 1_000,
        spec.cnp_delay_ns.1 / 1_000,
        truth.cnps,
        o.streams,
        o.paired,
        o.methods,
        o.reasons,
    );
    assert!(
        o.wrong.is_empty(),
        "{spec:?}: {} wrong pairs:\n{}",
        o.wrong.len(),
        o.wrong.join("\n")
    );
    o
}

/// Forty random mixes of 10 k to 200 k frames: no wrong pair.
#[test]
fn no_wrong_pair_in_random_multi_qp_captures() {
    for seed in 0..40 {
        let frames = [10_000, 30_000, 100_000, 200_000][seed as usize % 4];
        case(&random_spec(frames, 1_000 + seed));
    }
}

/// A million frames of the hardest mixes: 4,096 QPs over 64 host pairs, no ACKs or few, each tap position.
#[test]
fn no_wrong_pair_in_random_multi_qp_captures_of_a_million_frames() {
    for (i, (acks, tap, lockstep)) in [
        (Acks::Sparse, TapAt::Sender, false),
        (Acks::None, TapAt::Receiver, false),
        (Acks::None, TapAt::Sender, true),
    ]
    .into_iter()
    .enumerate()
    {
        case(&MultiQpSpec {
            frames: 1_000_000,
            host_pairs: 64,
            qps_per_pair: 64,
            acks,
            tap,
            lockstep,
            cnp_delay_ns: (500, 40_000),
            seed: 900 + i as u64,
        });
    }
}

/// Where the evidence is, pairs are made: ACKs tie every stream to its flow, whatever the tap.
#[test]
fn with_acks_nearly_every_stream_is_paired() {
    for tap in [TapAt::Sender, TapAt::Receiver] {
        let o = case(&MultiQpSpec {
            frames: 200_000,
            tap,
            ..MultiQpSpec::default()
        });
        assert!(
            o.paired * 10 >= o.streams * 9,
            "{tap:?}: {} of {} streams paired",
            o.paired,
            o.streams
        );
    }
}

/// Writes generated frames into a rotated set of three files, a third of them each: two pcap, one pcapng.
struct Rotated {
    dir: std::path::PathBuf,
    per_file: u64,
    written: u64,
    current: Option<Box<dyn FrameSink>>,
}

impl Rotated {
    fn open(&mut self) -> std::io::Result<Box<dyn FrameSink>> {
        use roce_capture::write::{PcapWriter, PcapngWriter, SectionInfo};
        let index = self.written / self.per_file;
        let out =
            |name: String| std::fs::File::create(self.dir.join(name)).map(std::io::BufWriter::new);
        Ok(if index < 2 {
            let w = PcapWriter::new(
                out(format!("run.{index:02}.pcap"))?,
                LinkType::ETHERNET,
                128,
            )?;
            Box::new(w)
        } else {
            let mut w = PcapngWriter::new(
                out(format!("run.{index:02}.pcapng"))?,
                &SectionInfo::default(),
            )?;
            w.add_interface(LinkType::ETHERNET, 128, Some("mirror"), None)?;
            Box::new(Pcapng(w))
        })
    }
}

struct Pcapng<W: std::io::Write>(roce_capture::write::PcapngWriter<W>);

impl<W: std::io::Write> FrameSink for Pcapng<W> {
    fn packet(&mut self, ts_ns: u64, data: &[u8], orig_len: u32) -> std::io::Result<()> {
        self.0.write_packet(0, ts_ns, data, orig_len)
    }
}

impl FrameSink for Rotated {
    fn packet(&mut self, ts_ns: u64, data: &[u8], orig_len: u32) -> std::io::Result<()> {
        if self.written.is_multiple_of(self.per_file) {
            // Dropping the last file's writer flushes it.
            self.current = None;
            self.current = Some(self.open()?);
        }
        self.written += 1;
        self.current
            .as_mut()
            .expect("a file is open")
            .packet(ts_ns, data, orig_len)
    }
}

/// The mix the issue measured, as a user meets it: 60 k frames of a mirror in three rotated files, 4,096 QPs
/// over 64 host pairs, ACKs for few messages, read by `roce-analyzer dcqcn --json` over the set. Every pair
/// it makes is right.
#[test]
fn dcqcn_over_a_rotated_mirror_of_4096_qps_makes_no_wrong_pair() {
    let dir = tempfile::tempdir().unwrap();
    let spec = MultiQpSpec {
        frames: 60_000,
        host_pairs: 64,
        qps_per_pair: 64,
        acks: Acks::Sparse,
        tap: TapAt::Receiver,
        lockstep: false,
        cnp_delay_ns: (500, 40_000),
        seed: 60_000,
    };
    let mut sink = Rotated {
        dir: dir.path().to_path_buf(),
        per_file: 20_000,
        written: 0,
        current: None,
    };
    let truth = multi_qp::generate(&mut sink, &spec).unwrap();
    drop(sink);
    let out = crate::common::run(
        crate::common::analyzer()
            .args(["dcqcn", "--json", "--no-fit"])
            .arg(dir.path().join("run.*")),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (mut paired, mut wrong) = (0, Vec::new());
    for f in json["flows"].as_array().unwrap() {
        let Some(snd) = f["sender_qp"].as_u64() else {
            continue;
        };
        paired += 1;
        let conn = truth
            .connections
            .iter()
            .find(|c| {
                u64::from(c.receiver_qp) == f["receiver_qp"].as_u64().unwrap()
                    && f["receiver"] == c.receiver.to_string().as_str()
            })
            .expect("a flow of the truth");
        if u64::from(conn.sender_qp) != snd {
            wrong.push(format!("{f:?}"));
        }
    }
    let unpaired = json["unpaired_cnps"].as_array().unwrap().len();
    println!(
        "{paired} flows paired, {unpaired} CNP streams unpaired, {} wrong",
        wrong.len()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        paired + unpaired > 100,
        "the capture has CNP streams to pair"
    );
}
