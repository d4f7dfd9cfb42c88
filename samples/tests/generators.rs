//! The generators are deterministic, and what they say they wrote is what the analyzer reads back.

use roce_capture::Capture;
use roce_core::decode::Decoder;
use roce_core::frames::Frames;
use roce_core::passes::Stats;
use samples::bulk::{self, BulkSpec};
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
    let mut s = Stats::new(100_000_000_000);
    let mut frames = Frames::new(&mut r, Decoder::default());
    while let Some(f) = frames.next_frame() {
        s.frame(&f);
    }
    assert_eq!(r.errors().count(), 0);
    s.finish(&r)
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
