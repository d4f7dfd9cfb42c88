//! `report`'s read on several threads must give the analysis of one: on three threads or more the owners'
//! briefs merged back into the capture's order for the DCQCN and hosts passes (`analysis::spread`), the
//! hops pass on a thread of its own over the capture read again; on two, and for inputs that cannot be
//! read twice, the passes on the one thread beside the reading loop (`analysis::beside`). Over every sample at once (a capture of many taps,
//! a file each, so new taps show up mid-chunk) and several chunks.

use analyzer::analysis::{self, PipelineOptions};
use roce_capture::{Capture, inputs};

use crate::common::{sample_captures, workspace};

fn analyse(mut capture: Capture, threads: usize) -> String {
    let opts = PipelineOptions {
        threads,
        ..PipelineOptions::default()
    };
    let a = analysis::run(&mut capture, &opts, |_| {}).unwrap();
    serde_json::to_string(&a).unwrap()
}

#[test]
fn the_threads_give_the_analysis_of_one_thread() {
    let dir = workspace().join("samples/captures");
    let all = || Capture::open(inputs::resolve(std::slice::from_ref(&dir)).unwrap()).unwrap();
    let one = analyse(all(), 1);
    let mut a = all();
    let v = analysis::run(&mut a, &PipelineOptions::default(), |_| {}).unwrap();
    assert!(
        v.stats.capture.frames > 4 * 4096 && v.hops.is_some() && !v.dcqcn.flows.is_empty(),
        "several chunks and taps: {} frames",
        v.stats.capture.frames
    );
    for n in [2, 3, 4] {
        assert_eq!(one, analyse(all(), n), "{n} threads");
    }
}

#[test]
fn the_thread_beside_gives_the_analysis_of_one_thread() {
    for s in sample_captures() {
        let stream = || {
            let bytes = std::fs::read(&s).unwrap();
            Capture::from_reader("-", Box::new(std::io::Cursor::new(bytes))).unwrap()
        };
        assert_eq!(
            analyse(stream(), 1),
            analyse(stream(), 2),
            "{}",
            s.display()
        );
    }
}
