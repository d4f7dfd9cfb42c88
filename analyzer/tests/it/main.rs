//! The analyzer's integration tests, one binary with a module per area so that polars and plotters are
//! linked once, not once per file.

mod annotate;
mod beside_thread;
mod cli;
mod common;
mod control_chars;
mod dataset;
mod dcqcn_analysis;
mod decode_framings;
mod doc_examples;
mod docs_tables;
mod empty_tables;
mod fabric;
mod findings;
mod flow_table;
mod headline;
mod hops;
mod inputs;
mod lazy_hops;
mod line_rate;
mod nic_counters;
mod np_check;
mod pairing;
mod pairing_chance;
mod priority;
mod psn_spaces;
mod report;
mod report_font;
mod svg;
mod threads;
mod trace;
mod tracer_blocks;
mod tshark_diff;
