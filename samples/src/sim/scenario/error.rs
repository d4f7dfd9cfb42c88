//! Why a scenario was refused: one error for reading, parsing and checking a file, so that the simulator
//! and its tests match on one type and every message names the file and the key.

use thiserror::Error;

use crate::sim::rp::KnobError;

/// Why a scenario was refused. Each message is whole (a cause is said in it, not chained as a source):
/// a scenario's error is shown by its `Display`, and must name the key at fault there.
#[derive(Debug, Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Io {
        /// As given.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// TOML syntax, an unknown key or a value of the wrong type (the message names the key and line).
    #[error("{file}: {message}")]
    Toml {
        /// The scenario's name.
        file: String,
        /// The TOML parser's message.
        message: String,
    },
    /// A value that parses but makes no sense: `key` is a dotted path such as `flow[2].mtu`.
    #[error("{file}: `{key}`: {message}")]
    Invalid {
        /// The scenario's name.
        file: String,
        /// Where, so a typo is found without reading the simulator.
        key: String,
        /// What the key accepts.
        message: String,
    },
    /// A `[dcqcn]` knob the reaction point does not know, or a value outside its range.
    #[error("{file}: `dcqcn`: {error}")]
    Knob {
        /// The scenario's name.
        file: String,
        /// Which knob and why.
        error: KnobError,
    },
}
