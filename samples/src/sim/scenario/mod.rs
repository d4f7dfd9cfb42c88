//! Scenario files: the TOML a user writes, and the checked [`Scenario`] the simulator runs.
//!
//! Parsing is two steps, like ripgrep's low-level and high-level arguments: serde reads the file into the plain
//! structs of [`raw`], which refuse unknown keys and hold the defaults, then [`build`] resolves names, checks
//! ranges and cross-references, and gives the [`Scenario`] of [`spec`], the only form the engine sees. Every
//! error ([`ScenarioError`]) names the key (and the table it sits in) so that a typo in a teaching file is
//! found without reading the simulator.

use std::path::Path;

mod build;
mod error;
mod raw;
mod spec;

pub use error::ScenarioError;
pub use spec::{
    FileSpec, FlowSpec, HostSpec, LinkSpec, MarkAt, Op, Scenario, Storm, SwitchSpec, TapSpec,
};

use raw::RawScenario;

impl Scenario {
    /// Reads and checks a scenario file; the scenario is named after the file stem.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|error| ScenarioError::Io {
            path: path.display().to_string(),
            error,
        })?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "scenario".into());
        Scenario::from_toml(&name, &text)
    }

    /// Parses and checks scenario text; `name` names the scenario in errors and in the output.
    pub fn from_toml(name: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let raw: RawScenario = toml::from_str(text).map_err(|e| ScenarioError::Toml {
            file: name.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        Scenario::build(name, raw)
    }
}
