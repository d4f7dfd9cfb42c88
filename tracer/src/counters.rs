//! NIC counters and DCQCN knobs from sysfs, stored in the capture as custom blocks (see [`crate::blocks`]).
//!
//! Counters: every file under `class/infiniband/*/ports/*/counters/` and `.../hw_counters/` (mlx5 puts
//! `np_cnp_sent`, `rp_cnp_handled`, `out_of_sequence` and friends there). Knobs: every file under
//! `class/net/<iface>/ecn/roce_rp/` and `roce_np/`, read once. The root is `/sys` unless `--sysfs-root` points
//! at a fixture tree laid out the same way. Ethtool statistics (per-priority PFC frames) need the ethtool
//! ioctl and are not sampled yet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::blocks;
use crate::sys;

/// Bounds the walk of a knob directory (mlx5 nests one level: `roce_np/enable/<priority>`).
const MAX_DEPTH: usize = 3;

#[derive(Debug)]
pub struct Sampler {
    root: PathBuf,
    interfaces: Vec<String>,
    /// Counter files found at start, relative to the root.
    files: Vec<String>,
}

#[derive(Debug, Serialize)]
struct KnobsRecord<'a> {
    ts_ns: u64,
    knobs: &'a BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
struct CountersRecord<'a> {
    ts_ns: u64,
    counters: &'a BTreeMap<String, u64>,
}

fn sorted_dir(path: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(path)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn read_value(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

impl Sampler {
    /// Finds the counter files once; devices that appear later are not picked up.
    pub fn new(root: &Path, interfaces: &[String]) -> Self {
        let mut files = Vec::new();
        for dev in sorted_dir(&root.join("class/infiniband")) {
            for port in sorted_dir(&dev.join("ports")) {
                for group in ["counters", "hw_counters"] {
                    for f in sorted_dir(&port.join(group)) {
                        if f.is_file()
                            && let Ok(rel) = f.strip_prefix(root)
                        {
                            files.push(rel.to_string_lossy().into_owned());
                        }
                    }
                }
            }
        }
        Sampler {
            root: root.to_path_buf(),
            interfaces: interfaces.to_vec(),
            files,
        }
    }

    /// The DCQCN knobs of the captured interfaces: `<iface>/<roce_rp|roce_np>/<path>` → value.
    pub fn knobs(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for iface in &self.interfaces {
            for side in ["roce_rp", "roce_np"] {
                let dir = self
                    .root
                    .join("class/net")
                    .join(iface)
                    .join("ecn")
                    .join(side);
                walk(&dir, &format!("{iface}/{side}"), 0, &mut out);
            }
        }
        out
    }

    /// One reading of every counter file that still parses as a number.
    pub fn sample(&self) -> BTreeMap<String, u64> {
        self.files
            .iter()
            .filter_map(|rel| {
                let v = read_value(&self.root.join(rel))?.parse().ok()?;
                Some((rel.clone(), v))
            })
            .collect()
    }

    /// The `KNOB` block, or `None` when no interface has knobs.
    pub fn knobs_block(&self) -> Option<Vec<u8>> {
        let knobs = self.knobs();
        if knobs.is_empty() {
            return None;
        }
        blocks::encode(
            blocks::KNOBS,
            &KnobsRecord {
                ts_ns: sys::now_ns(),
                knobs: &knobs,
            },
        )
        .ok()
    }

    /// A `CTRS` block, or `None` when there are no counters.
    pub fn sample_block(&mut self) -> Option<Vec<u8>> {
        let counters = self.sample();
        if counters.is_empty() {
            return None;
        }
        blocks::encode(
            blocks::COUNTERS,
            &CountersRecord {
                ts_ns: sys::now_ns(),
                counters: &counters,
            },
        )
        .ok()
    }
}

fn walk(dir: &Path, prefix: &str, depth: usize, out: &mut BTreeMap<String, String>) {
    if depth > MAX_DEPTH {
        return;
    }
    for p in sorted_dir(dir) {
        let Some(name) = p.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        let key = format!("{prefix}/{name}");
        if p.is_dir() {
            walk(&p, &key, depth + 1, out);
        } else if let Some(v) = read_value(&p) {
            out.insert(key, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree laid out like an mlx5 host's sysfs, small.
    fn fixture() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let put = |rel: &str, v: &str| {
            let p = d.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, format!("{v}\n")).unwrap();
        };
        put(
            "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data",
            "1000",
        );
        put(
            "class/infiniband/mlx5_0/ports/1/counters/port_rcv_data",
            "2000",
        );
        put(
            "class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent",
            "7",
        );
        put(
            "class/infiniband/mlx5_0/ports/1/hw_counters/rp_cnp_handled",
            "5",
        );
        put(
            "class/infiniband/mlx5_0/ports/1/hw_counters/not_a_number",
            "n/a",
        );
        put("class/net/eth0/ecn/roce_rp/rpg_time_reset", "300");
        put("class/net/eth0/ecn/roce_rp/enable/3", "1");
        put("class/net/eth0/ecn/roce_np/cnp_dscp", "48");
        put("class/net/eth1/ecn/roce_np/cnp_dscp", "46");
        d
    }

    #[test]
    fn knobs_of_the_captured_interfaces_only() {
        let d = fixture();
        let s = Sampler::new(d.path(), &["eth0".to_string()]);
        let k = s.knobs();
        assert_eq!(
            k.get("eth0/roce_rp/rpg_time_reset").map(String::as_str),
            Some("300")
        );
        assert_eq!(
            k.get("eth0/roce_rp/enable/3").map(String::as_str),
            Some("1")
        );
        assert_eq!(
            k.get("eth0/roce_np/cnp_dscp").map(String::as_str),
            Some("48")
        );
        assert_eq!(k.len(), 3, "{k:?}");
    }

    #[test]
    fn samples_follow_the_files() {
        let d = fixture();
        let mut s = Sampler::new(d.path(), &[]);
        let first = s.sample();
        assert_eq!(first.len(), 4, "{first:?}");
        assert_eq!(
            first["class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent"],
            7
        );
        std::fs::write(
            d.path()
                .join("class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent"),
            "9\n",
        )
        .unwrap();
        let block = s.sample_block().unwrap();
        let (kind, v) = blocks::decode(&block).unwrap();
        assert_eq!(kind, blocks::COUNTERS);
        assert_eq!(
            v["counters"]["class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent"],
            9
        );
        assert!(Sampler::new(d.path(), &[]).knobs_block().is_none());
    }
}
