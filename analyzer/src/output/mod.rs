//! Everything the analyzer writes: one line per frame ([`frames`]), aligned text tables ([`text`]), CSV and
//! Parquet ([`tables`]), and the HTML report ([`report`]).
pub mod frames;
pub mod hops;
#[cfg(feature = "tables")]
pub mod report;
#[cfg(feature = "tables")]
pub mod tables;
pub mod text;
