//! Everything the analyzer writes: one line per frame ([`frames`], on several threads [`lines`]), aligned text tables ([`text`], the NIC
//! counters' rows in [`nic`]), CSV and
//! Parquet ([`tables`]), the per-frame Parquet dataset of `decode --parquet` ([`dataset`]), the HTML report
//! ([`report`]), and the capture itself with the analysis in its packet comments ([`annotate`]); [`empty`]
//! says why a result has nothing in it, for all of them.
pub mod annotate;
#[cfg(feature = "tables")]
pub mod dataset;
pub mod empty;
pub mod fabric;
pub mod frames;
pub mod hops;
pub mod json;
pub mod lines;
pub mod nic;
#[cfg(feature = "tables")]
pub mod report;
#[cfg(feature = "tables")]
pub mod tables;
pub mod text;
