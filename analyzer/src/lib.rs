//! Offline analysis of RoCEv2 captures.
//!
//! The data path is one straight line: [`source`] turns a capture file into records, [`decode`] turns a record
//! into a [`decode::Frame`] (one decoder for every consumer, the live tracer included), and the streaming
//! [`passes`] fold frames into tables whose size depends on flows and time, never on the packet count.
//! [`tables`] is the only module that speaks polars.
pub mod blocks;
pub mod dcqcn;
pub mod decode;
pub mod filter;
pub mod findings;
pub mod passes;
pub mod pauses;
pub mod pipeline;
pub mod print;
#[cfg(feature = "tables")]
pub mod report;
pub mod sink;
pub mod source;
#[cfg(feature = "tables")]
pub mod tables;
pub mod text;
pub mod units;
