//! Everything `report` computes (every pass, the DCQCN model and its fit, pauses, findings) on arbitrary
//! files: no panic, no allocation past libFuzzer's limit, and an end. Timestamps are the risky input: the
//! rate grid and the model's timers are sized by them, not by the bytes, so both bin modes run. The fixed
//! width is a second, so that ordinary inputs stay small and only a span of years reaches the grid's bound.
#![no_main]

use analyzer::analysis::dcqcn::Options;
use analyzer::analysis::{self as pipeline, PipelineOptions};
use libfuzzer_sys::fuzz_target;
use roce_capture::Capture;

fuzz_target!(|data: &[u8]| {
    for bin_ns in [None, Some(1_000_000_000)] {
        let Ok(mut reader) =
            Capture::from_reader("fuzz", Box::new(std::io::Cursor::new(data.to_vec())))
        else {
            return;
        };
        let opts = PipelineOptions {
            dcqcn: Options {
                bin_ns,
                fit_flows: 1,
                ..Options::default()
            },
            ..PipelineOptions::default()
        };
        let _ = pipeline::run(&mut reader, &opts, |_| {});
    }
});
