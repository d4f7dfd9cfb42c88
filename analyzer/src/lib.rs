//! `roce-analyzer`, the application: what the frames mean and how to show it.
//!
//! The data path: capture files (`roce-capture`) → one decode per frame and the streaming passes
//! (`roce-core`) → [`analysis`] (the DCQCN replay and knob fit, pauses, findings) → [`output`] (text, tables,
//! the HTML report). Only [`output::tables`] speaks polars.
#![warn(missing_docs)]
pub mod analysis;
pub mod output;
