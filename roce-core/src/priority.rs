//! Which 802.1p priority a frame travels on, and where that came from.
//!
//! PFC pauses priorities, so every analysis that asks "was this flow paused?" needs the flow's priority. A
//! VLAN-tagged frame carries it in its PCP. An untagged frame does not, yet NVIDIA's standard lossless setup
//! sends RoCE untagged with the NIC and switch in DSCP trust: DSCP 26 travels on priority 3 (with PFC), CNPs
//! with DSCP 48 on priority 6. For those frames the priority comes from a DSCP → priority map: DSCP/8 by
//! default (what ConnectX and most switches map by default), the one the tracer recorded from the host (which
//! replaces the default), and the entries given with `--dscp-map` (which win over both: the person running
//! the analysis may know better than a recording, say of another host).
//!
//! Passes keep each flow's PCP and DSCP and resolve the priority once the map is known, after the capture
//! (a recorded map arrives in the capture's custom blocks, possibly after the first frames). Which NIC's
//! recorded files to take is the business of the module that reads the blocks (`recorded`); what they mean
//! is this module's.

use serde::Serialize;
use thiserror::Error;

/// Where a priority came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PrioritySource {
    /// The VLAN tag's PCP.
    Pcp,
    /// The IP header's DSCP through the DSCP → priority map.
    Dscp,
}

/// How frames get their priority.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PriorityMap {
    /// `pcp`: a tagged frame's PCP, an untagged frame's DSCP through `dscp` (the analyzer's default, which
    /// suits both a PCP-trust fabric, whose frames are tagged, and a DSCP-trust one with untagged frames).
    /// `dscp` (recorded `trust` = dscp): always the DSCP, tagged or not, as a port in DSCP trust classifies.
    pub trust: Trust,
    /// Priority of each DSCP value.
    #[serde(skip)]
    pub dscp: [u8; 64],
    /// The entries that differ from DSCP/8, as `dscp=prio` (for the report).
    pub changes: Vec<(u8, u8)>,
    /// Where the map came from: `default`, `--dscp-map`, `recorded (IFACE)`, or `--dscp-map over recorded
    /// (IFACE)`.
    pub source: String,
    /// The entries given with `--dscp-map`, kept so that they can be laid over a recorded map.
    #[serde(skip)]
    pub given: Vec<(u8, u8)>,
}

/// The classification a port trusts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trust {
    /// The 802.1p PCP of the VLAN tag.
    Pcp,
    /// The IP DSCP, through the port's DSCP → priority map.
    Dscp,
}

/// A `--dscp-map` or recorded map that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PriorityMapError {
    #[error(
        "bad DSCP map entry `{0}`: expected DSCP=PRIORITY with DSCP 0-63 and PRIORITY 0-7, e.g. 26=3"
    )]
    /// An entry of `--dscp-map` or of the recorded map.
    Entry(String),
    #[error("bad recorded trust `{0}`: expected pcp or dscp")]
    /// The recorded trust setting.
    Trust(String),
}

impl Default for PriorityMap {
    fn default() -> Self {
        PriorityMap {
            trust: Trust::Pcp,
            dscp: std::array::from_fn(|d| (d / 8) as u8),
            changes: Vec::new(),
            source: "default".into(),
            given: Vec::new(),
        }
    }
}

impl PriorityMap {
    /// The default map with `text`'s entries (`26=3,48=6`, commas or spaces between them) changed.
    pub fn parse(text: &str) -> Result<PriorityMap, PriorityMapError> {
        let mut m = PriorityMap {
            source: "--dscp-map".into(),
            ..PriorityMap::default()
        };
        for entry in text
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|e| !e.is_empty())
        {
            let (d, p) = entry
                .split_once('=')
                .and_then(|(d, p)| {
                    Some((d.trim().parse::<u8>().ok()?, p.trim().parse::<u8>().ok()?))
                })
                .filter(|&(d, p)| d < 64 && p < 8)
                .ok_or_else(|| PriorityMapError::Entry(entry.to_string()))?;
            m.set(d, p);
            m.given.push((d, p));
        }
        Ok(m)
    }

    fn set(&mut self, dscp: u8, prio: u8) {
        self.dscp[usize::from(dscp)] = prio;
        self.changes.retain(|c| c.0 != dscp);
        if prio != dscp / 8 {
            self.changes.push((dscp, prio));
            self.changes.sort_unstable();
        }
    }

    /// The priority of a frame with this PCP (`None` when untagged) and DSCP (`None` without an IP header).
    pub fn resolve(&self, pcp: Option<u8>, dscp: Option<u8>) -> Option<(u8, PrioritySource)> {
        let by_dscp = dscp.map(|d| (self.dscp[usize::from(d & 63)], PrioritySource::Dscp));
        match (self.trust, pcp) {
            (Trust::Dscp, _) => by_dscp.or(pcp.map(|p| (p, PrioritySource::Pcp))),
            (Trust::Pcp, Some(p)) => Some((p, PrioritySource::Pcp)),
            (Trust::Pcp, None) => by_dscp,
        }
    }

    /// The map that interface `iface`'s recorded files give (`trust`: `pcp` or `dscp`; `dscp2prio/DSCP`: a
    /// priority; the tracer's `KNOB` block keys them `IFACE/trust` and `IFACE/dscp2prio/DSCP`), or `None` when
    /// none of `files` belongs to the map. Unlisted DSCP values keep DSCP/8.
    pub fn from_files(
        iface: &str,
        files: &[(String, String)],
    ) -> Option<Result<PriorityMap, PriorityMapError>> {
        if !files.iter().any(|(f, _)| is_priority_file(f)) {
            return None;
        }
        let mut m = PriorityMap {
            source: format!("recorded ({iface})"),
            ..PriorityMap::default()
        };
        for (file, value) in files {
            let v = value.trim();
            if file == "trust" {
                m.trust = match v {
                    "pcp" => Trust::Pcp,
                    "dscp" => Trust::Dscp,
                    _ => return Some(Err(PriorityMapError::Trust(v.to_string()))),
                };
            } else if let Some(d) = file.strip_prefix("dscp2prio/") {
                match (d.parse::<u8>(), v.parse::<u8>()) {
                    (Ok(d), Ok(p)) if d < 64 && p < 8 => m.set(d, p),
                    _ => return Some(Err(PriorityMapError::Entry(format!("{file}={v}")))),
                }
            }
        }
        Some(Ok(m))
    }
}

impl PriorityMap {
    /// The map to use: the `recorded` one when the capture holds one (its trust and entries, as
    /// `Recorded::priorities` read them), with the entries given with `--dscp-map` laid over it; else this
    /// one. A recorded map that cannot be read leaves this one, and says why in `source`.
    pub fn effective(
        &self,
        recorded: Option<&Result<PriorityMap, PriorityMapError>>,
    ) -> PriorityMap {
        match recorded.cloned() {
            Some(Ok(m)) if self.given.is_empty() => m,
            Some(Ok(mut m)) => {
                for &(d, p) in &self.given {
                    m.set(d, p);
                }
                m.given.clone_from(&self.given);
                m.source = format!("--dscp-map over {}", m.source);
                m
            }
            Some(Err(e)) => PriorityMap {
                source: format!("{} (the recorded map was refused: {e})", self.source),
                ..self.clone()
            },
            None => self.clone(),
        }
    }
}

/// A file of a recorded interface that belongs to the priority map, not to the ECN knobs.
pub fn is_priority_file(file: &str) -> bool {
    file == "trust" || file.starts_with("dscp2prio/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_maps_dscp_by_eight_and_keeps_a_tag() {
        let m = PriorityMap::default();
        assert_eq!(m.resolve(None, Some(26)), Some((3, PrioritySource::Dscp)));
        assert_eq!(m.resolve(None, Some(48)), Some((6, PrioritySource::Dscp)));
        assert_eq!(m.resolve(Some(5), Some(26)), Some((5, PrioritySource::Pcp)));
        assert_eq!(m.resolve(None, None), None);
    }

    #[test]
    fn a_given_map_changes_its_entries_only() {
        let m = PriorityMap::parse("26=4, 48=7").unwrap();
        assert_eq!(m.resolve(None, Some(26)), Some((4, PrioritySource::Dscp)));
        assert_eq!(m.resolve(None, Some(48)), Some((7, PrioritySource::Dscp)));
        assert_eq!(m.resolve(None, Some(10)), Some((1, PrioritySource::Dscp)));
        assert_eq!(m.changes, [(26, 4), (48, 7)]);
        for bad in ["26", "64=1", "3=8", "x=1"] {
            assert!(PriorityMap::parse(bad).is_err(), "{bad}");
        }
    }
}
