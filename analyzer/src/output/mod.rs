//! Everything the analyzer writes: one line per frame ([`frames`]), aligned text tables ([`text`]), CSV and
//! Parquet ([`tables`]), the per-frame Parquet dataset of `decode --parquet` ([`dataset`]), and the HTML report
//! ([`report`]); [`empty`] says why a result has nothing in it, for all of them.
#[cfg(feature = "tables")]
pub mod dataset;
pub mod empty;
pub mod fabric;
pub mod frames;
pub mod hops;
pub mod json;
#[cfg(feature = "tables")]
pub mod report;
#[cfg(feature = "tables")]
pub mod tables;
pub mod text;
