//! Everything the analyzer writes: one line per frame ([`frames`]), aligned text tables ([`text`]), CSV and
//! Parquet ([`tables`]), the per-frame Parquet dataset of `decode --parquet` ([`dataset`]), and the HTML report
//! ([`report`]).
#[cfg(feature = "tables")]
pub mod dataset;
pub mod frames;
pub mod hops;
pub mod json;
#[cfg(feature = "tables")]
pub mod report;
#[cfg(feature = "tables")]
pub mod tables;
pub mod text;
