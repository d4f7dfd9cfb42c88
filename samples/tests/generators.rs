//! The generators are deterministic, and what they say they wrote is what the analyzer reads back.

use roce_capture::Capture;
use roce_capture::write::PcapWriter;
use roce_core::decode::Decoder;
use roce_core::frames::Frames;
use roce_core::line::LineRates;
use roce_core::passes::Stats;
use roce_core::recorded::Recorded;
use samples::bulk::{self, BulkSpec, FrameSink};
use samples::corpus;

fn committed(name: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn committed_corpus_is_what_the_generator_writes() {
    let mut ng = Vec::new();
    corpus::write_pcapng(&mut ng).unwrap();
    assert!(
        ng == committed("corpus.pcapng"),
        "samples/corpus/corpus.pcapng is stale: run `cargo xtask samples`"
    );
    let mut pcap = Vec::new();
    corpus::write_pcap(&mut pcap).unwrap();
    assert!(
        pcap == committed("corpus.pcap"),
        "samples/corpus/corpus.pcap is stale: run `cargo xtask samples`"
    );
}

fn stats_of(bytes: Vec<u8>) -> roce_core::passes::StatsReport {
    let mut r = Capture::from_reader("bulk", Box::new(std::io::Cursor::new(bytes))).unwrap();
    let mut s = Stats::new(LineRates::flag(Some(100_000_000_000)));
    let mut frames = Frames::new(&mut r, Decoder::default());
    while let Some(f) = frames.next_frame() {
        s.frame(&f);
    }
    assert_eq!(r.errors().count(), 0);
    s.finish(&r, &Recorded::of(&r))
}

#[test]
fn bulk_capture_reads_back_as_written() {
    for snaplen in [Some(128), None] {
        let spec = BulkSpec {
            frames: 60_000,
            qps: 64,
            snaplen,
            mtu: 1024,
            seed: 3,
            saturation: None,
        };
        let mut bytes = Vec::new();
        let counts = bulk::write(&mut bytes, &spec).unwrap();
        let again = {
            let mut b = Vec::new();
            bulk::write(&mut b, &spec).unwrap();
            b
        };
        assert!(bytes == again, "the bulk generator is deterministic");
        assert_eq!(counts.frames, spec.frames);
        let st = stats_of(bytes);
        assert_eq!(st.capture.frames, counts.frames);
        assert_eq!(st.capture.bytes, counts.bytes_on_wire);
        assert_eq!(st.capture.frames_by_kind["cnp"], counts.cnps);
        assert_eq!(st.capture.frames_by_kind["pfc"], counts.pfc);
        let ce: u64 = st.flows.iter().map(|f| f.ce_packets).sum();
        assert_eq!(ce, counts.ce);
        let data: u64 = st
            .flows
            .iter()
            .filter(|f| f.dest_qp >= 0x20_0000)
            .map(|f| f.packets)
            .sum();
        assert_eq!(data, counts.data);
        // Each data flow's PSNs are consecutive: no gaps, no retransmissions.
        assert!(
            st.flows
                .iter()
                .all(|f| f.psn_gaps == 0 && f.retransmissions == 0)
        );
        assert_eq!(st.cnps.iter().map(|c| c.count).sum::<u64>(), counts.cnps);
        assert!(
            counts.ce > 0 && counts.cnps > 0 && counts.pfc > 0,
            "{counts:?}"
        );
        let failures: u64 = st.flows.iter().map(|f| f.icrc_failures).sum();
        assert_eq!(failures, 0);
        if snaplen.is_some() {
            // Data frames exceed 128 bytes; ACKs, CNPs and PFC frames fit whole.
            assert_eq!(st.capture.truncated_frames, counts.data);
        }
    }
}

/// A saturation test's rotation: a new pcap file every `per_file` frames, as `roce-tracer --rotate` leaves them.
struct Rotation {
    dir: std::path::PathBuf,
    per_file: u64,
    in_file: u64,
    snap: u32,
    current: Option<PcapWriter<std::fs::File>>,
    files: Vec<std::path::PathBuf>,
}

impl FrameSink for Rotation {
    fn packet(&mut self, ts_ns: u64, data: &[u8], orig_len: u32) -> std::io::Result<()> {
        if self.current.is_none() || self.in_file == self.per_file {
            if let Some(w) = self.current.take() {
                w.into_inner()?;
            }
            let path = self.dir.join(format!("run.{}.pcap", self.files.len()));
            let f = std::fs::File::create(&path)?;
            self.current = Some(PcapWriter::new(
                f,
                roce_capture::LinkType::ETHERNET,
                self.snap,
            )?);
            self.files.push(path);
            self.in_file = 0;
        }
        self.in_file += 1;
        self.current
            .as_mut()
            .map_or(Ok(()), |w| w.write_packet(ts_ns, data, orig_len))
    }
}

#[test]
fn a_rotated_saturation_capture_reads_as_one_and_has_the_named_mix() {
    let spec = BulkSpec {
        qps: 256,
        ..BulkSpec::saturation(90_000)
    };
    let mut one = Vec::new();
    let counts = bulk::write(&mut one, &spec).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut rot = Rotation {
        dir: dir.path().to_path_buf(),
        per_file: 30_000,
        in_file: 0,
        snap: bulk::snap_length(&spec),
        current: None,
        files: Vec::new(),
    };
    let again = bulk::generate(&mut rot, &spec).unwrap();
    if let Some(w) = rot.current.take() {
        w.into_inner().unwrap();
    }
    assert_eq!(again, counts, "rotation does not change the traffic");
    assert_eq!(rot.files.len(), 3);

    let single = stats_of(one);
    let inputs = roce_capture::inputs::resolve(&rot.files).unwrap();
    let mut merged = Capture::open(inputs).unwrap();
    let mut s = Stats::new(LineRates::flag(Some(100_000_000_000)));
    let mut frames = Frames::new(&mut merged, Decoder::default());
    while let Some(f) = frames.next_frame() {
        s.frame(&f);
    }
    assert_eq!(merged.errors().count(), 0);
    let rotated = s.finish(&merged, &Recorded::of(&merged));
    assert_eq!(rotated.capture.frames, single.capture.frames);
    assert_eq!(rotated.capture.bytes, single.capture.bytes);
    assert_eq!(
        rotated.capture.frames_by_kind,
        single.capture.frames_by_kind
    );
    assert_eq!(rotated.flows.len(), single.flows.len());

    // The mix the benchmark promises: 1 frame per µs, ~5 % CE, ~1 % CNPs, ~0.1 % PFC of all frames.
    let n = counts.frames as f64;
    let share = |x: u64| x as f64 / n * 100.0;
    assert!((4.5..5.5).contains(&share(counts.ce)), "{counts:?}");
    assert!((0.8..1.2).contains(&share(counts.cnps)), "{counts:?}");
    assert!((0.08..0.12).contains(&share(counts.pfc)), "{counts:?}");
    let span = single.capture.last_ns.unwrap() - single.capture.first_ns.unwrap();
    assert_eq!(span, (counts.frames - 1) * 1_000);
}
