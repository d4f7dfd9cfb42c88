//! Live RoCEv2 capture for `roce-tracer`.
//!
//! Two engines, one output: [`engine::pcap`] (libpcap) and [`engine::ebpf`] (the `tracer-ebpf` TC probe)
//! both hand frames to [`capture::run`], which writes them with the analyzer's pcapng writer through
//! [`output`] (a file that is valid whenever the capture stops), feeds the analyzer's passes for the
//! console line ([`live`]) and stores counter samples and knobs in custom blocks ([`counters`],
//! [`blocks`]). Decoding is never done twice: the analyzer's decoder is the only one.
/// The custom-block format lives with its reader, the analyzer; the tracer writes it.
pub use analyzer::blocks;
pub mod btf;
pub mod capture;
pub mod counters;
pub mod engine;
pub mod kevents;
pub mod live;
pub mod metrics;
pub mod output;
pub mod qp_owners;
pub mod sys;
