//! The DCQCN and hosts passes of `report` run on a thread beside the reading loop, fed each frame's brief
//! in batches (`analysis::beside`). The analysis must be the one of a single thread: over every sample at
//! once, a capture of many taps (a file each, so new taps show up mid-batch) and several batches.

use analyzer::analysis::{self, PipelineOptions};
use roce_capture::{Capture, inputs};

use crate::common::workspace;

fn analyse(one_thread: bool) -> String {
    let dir = workspace().join("samples/captures");
    let mut capture = Capture::open(inputs::resolve(&[dir]).unwrap()).unwrap();
    let opts = PipelineOptions {
        one_thread,
        ..PipelineOptions::default()
    };
    let a = analysis::run(&mut capture, &opts, |_| {}).unwrap();
    assert!(
        a.stats.capture.frames > 4 * 4096,
        "several batches: {} frames",
        a.stats.capture.frames
    );
    assert!(!a.dcqcn.flows.is_empty() && a.hops.is_some());
    serde_json::to_string(&a).unwrap()
}

#[test]
fn the_thread_beside_gives_the_analysis_of_one_thread() {
    assert_eq!(analyse(false), analyse(true));
}
