//! Live RoCEv2 capture for `roce-tracer`.
//!
//! Two engines, one output: [`engine::pcap`] (libpcap) and [`engine::ebpf`] (the `tracer-ebpf` TC probe)
//! both hand frames to [`capture::run`], which merges the eBPF engine's per-CPU rings by time ([`merge`]),
//! writes them with `roce-capture`'s pcapng writer through
//! [`output`] (a file that is valid whenever the capture stops), feeds `roce-core`'s passes for the
//! console line ([`live`]) and stores counter samples and knobs in custom blocks ([`counters`], in the
//! format of `roce_capture::blocks`). Decoding is never done twice: `roce-core`'s decoder is the only one.
#![warn(missing_docs)]
pub mod btf;
pub mod capture;
pub mod counters;
pub mod engine;
pub mod kevents;
pub mod list;
pub mod live;
pub mod merge;
pub mod metrics;
pub mod output;
pub mod ports;
pub mod qp_owners;
pub mod selftest;
pub mod sys;
pub mod term;
pub mod top;
pub mod watch;
