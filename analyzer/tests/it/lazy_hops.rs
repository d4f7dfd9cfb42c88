//! The report's hops pass starts only when a frame shows up at a second tap, after reading the capture again
//! up to that frame (`analysis::run`). These tests hold it to what a pass from the first frame gives: the same
//! hops when the second tap starts late or at once, and the same whole analysis for a capture of one tap.

use std::path::{Path, PathBuf};

use crate::common::workspace;
use analyzer::analysis::hops::{self, HopsOptions};
use analyzer::analysis::{self, Analysis, PipelineOptions};
use roce_capture::write::{PcapngWriter, SectionInfo};
use roce_capture::{Capture, inputs};
use roce_core::decode::Decoder;

fn sample(name: &str) -> PathBuf {
    workspace().join("samples/captures").join(name)
}

/// The ICRC is not checked: the standalone hops pass never checks it, and the two must see the same frames.
fn options() -> PipelineOptions {
    PipelineOptions {
        decoder: Decoder {
            check_icrc: false,
            ..Decoder::default()
        },
        ..PipelineOptions::default()
    }
}

fn analyse(paths: &[PathBuf]) -> Analysis {
    let mut capture = Capture::open(inputs::resolve(paths).unwrap()).unwrap();
    assert!(capture.rereadable());
    analysis::run(&mut capture, &options(), |_| {}).unwrap()
}

/// The hops of the standalone pass, which reads every frame from the first.
fn hops_from_the_start(paths: &[PathBuf]) -> String {
    let mut capture = Capture::open(inputs::resolve(paths).unwrap()).unwrap();
    let report = hops::run(&mut capture, Decoder::default(), HopsOptions::default());
    assert!(!report.hops.is_empty(), "the capture has hops");
    serde_json::to_string(&report).unwrap()
}

/// `from`'s records from the `skip`th on, in a new file with the same interface.
fn without_first(from: &Path, skip: usize, to: &Path) {
    let mut reader = roce_capture::CaptureReader::open(from).unwrap();
    let mut records = Vec::new();
    while let Some(rec) = reader.next_record().unwrap() {
        records.push((rec.ts_ns, rec.data.to_vec(), rec.len));
    }
    let mut out =
        PcapngWriter::new(std::fs::File::create(to).unwrap(), &SectionInfo::default()).unwrap();
    let i = &reader.interfaces()[0];
    out.add_interface(i.link, i.snaplen, i.name.as_deref(), None)
        .unwrap();
    for (ts, data, len) in &records[skip..] {
        out.write_packet(0, *ts, data, *len).unwrap();
    }
    out.flush().unwrap();
}

#[test]
fn taps_from_the_first_frame_give_the_hops_of_a_pass_from_the_start() {
    let paths = [
        sample("queue_moves.pcapng"),
        sample("queue_moves.rx.pcapng"),
    ];
    let got = analyse(&paths);
    let hops = got.hops.expect("the report keeps its hops section");
    assert_eq!(
        serde_json::to_string(&hops).unwrap(),
        hops_from_the_start(&paths)
    );
}

#[test]
fn a_second_tap_that_starts_late_gives_the_hops_of_a_pass_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let late = dir.path().join("late.rx.pcapng");
    without_first(&sample("queue_moves.rx.pcapng"), 400, &late);
    let paths = [sample("queue_moves.pcapng"), late];
    let got = analyse(&paths);
    let hops = got.hops.expect("the hops after the second tap starts");
    assert_eq!(
        serde_json::to_string(&hops).unwrap(),
        hops_from_the_start(&paths)
    );
    // Hops' findings join the others, as they did when the pass ran from the start.
    for f in &hops.findings {
        assert!(got.findings.contains(f), "{} is among the findings", f.code);
    }
}

#[test]
fn a_capture_of_one_tap_is_analysed_as_with_the_hops_pass_from_the_start() {
    let path = sample("incast_dcqcn.pcapng");
    let lazy = analyse(std::slice::from_ref(&path));
    assert!(lazy.hops.is_none());
    // A capture made from a reader cannot be read twice, so its hops pass runs from the first frame.
    let name = path.to_str().unwrap();
    let mut capture =
        Capture::from_reader(name, Box::new(std::fs::File::open(&path).unwrap())).unwrap();
    assert!(!capture.rereadable() && capture.reopen().is_none());
    let eager = analysis::run(&mut capture, &options(), |_| {}).unwrap();
    assert_eq!(
        serde_json::to_string(&lazy).unwrap(),
        serde_json::to_string(&eager).unwrap()
    );
}
