//! NIC counters, ethtool statistics and DCQCN knobs, stored in the capture as custom blocks (see
//! [`roce_capture::blocks`]).
//!
//! Counters: every file under `class/infiniband/*/ports/*/counters/` and `.../hw_counters/` (each RDMA driver
//! puts its own names there: mlx5's `np_cnp_sent`, bnxt_re's `tx_cnp_pkts`, irdma's `cnpSent`, ionic's
//! `tx_rdma_cnp_pkts`, [`roce_core::nic_counters`] says which is which), every ethtool statistic of each
//! captured interface (what `ethtool -S` prints: mlx5's per-priority `rx_prio3_pause`,
//! `rx_prio3_pause_duration`, `rx_prio3_pause_transition`, ...), under the key `ethtool/<iface>/<name>`, and
//! of each RDMA port's netdev that is not captured, the statistics that table knows (its pause and discard
//! counters are in ethtool only, while a capture with the rdma engine or on a mirror port names no netdev of
//! the port; the hundreds of per-queue statistics are left out). The samples are taken at the start, every
//! interval and at the end, so that their deltas cover the whole capture.
//! Knobs: every file under `class/net/*/ecn/roce_rp/` and `roce_np/`, read once; beside them, for each of
//! those interfaces, the port's QoS trust (`IFACE/trust`: `pcp` or `dscp`) and DSCP → priority map
//! (`IFACE/dscp2prio/DSCP`), as `mlnx_qos -i IFACE` prints them (the driver keeps them behind DCB netlink, not
//! in sysfs), and the addresses of each interface's RoCE GIDs (`addrs`), which tell a reader whose knobs
//! these are. Beside them go the host's name and its RDMA ports (driver, netdev, MAC, addresses), which tie
//! each port's counters to its packets; the `CTRS` blocks name the host too.
//!
//! On a live system the root is `/sys`, the ethtool statistics come from the `SIOCETHTOOL` ioctl and the QoS
//! from running `mlnx_qos` (a host without it records none). A fixture tree (`--sysfs-root`, for tests) is
//! laid out like `/sys` and holds the ethtool statistics as the text `ethtool -S IFACE` prints, in
//! `<root>/ethtool-S/<iface>`, and the QoS as the text `mlnx_qos -i IFACE` prints, in
//! `<root>/mlnx_qos/<iface>`; neither the ioctl nor the tool is then used.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::sys::{self, EthtoolSocket};
use roce_capture::blocks::{self, records};
use roce_core::nic_counters::is_known_ethtool_name;

/// Bounds the walk of a knob directory (mlx5 nests one level: `roce_np/enable/<priority>`).
const MAX_DEPTH: usize = 3;

/// Prefix of the ethtool statistics' keys in a counter sample.
pub const ETHTOOL_PREFIX: &str = "ethtool";

/// Where the ethtool statistics come from.
#[derive(Debug)]
pub enum EthtoolSource {
    /// The `SIOCETHTOOL` ioctl, with each interface's statistic names remembered between samples (they only
    /// change when the driver's count does).
    Ioctl {
        /// The socket for the ioctl, `None` when it could not be opened.
        socket: Option<EthtoolSocket>,
        /// Each interface's statistic names, as the driver last listed them.
        names: BTreeMap<String, Vec<String>>,
    },
    /// `ethtool -S` text files, one per interface, in this directory.
    Files(PathBuf),
}

/// Where a port's QoS trust and DSCP → priority map come from.
#[derive(Debug, Clone)]
pub enum QosSource {
    /// Running `mlnx_qos -i IFACE`, for at most [`QOS_TIMEOUT`].
    Command,
    /// `mlnx_qos -i IFACE` text files, one per interface, in this directory.
    Files(PathBuf),
}

/// How long `mlnx_qos` may take for one interface before its answer is given up (it answers in well under a
/// second; a stuck DCB query must not hold the capture's start).
pub const QOS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads the NIC counters, ethtool statistics and DCQCN knobs into their custom blocks.
#[derive(Debug)]
pub struct Sampler {
    root: PathBuf,
    interfaces: Vec<String>,
    /// The netdevs of RDMA ports that are not captured: only their statistics of known meaning are kept.
    port_netdevs: Vec<String>,
    /// The host's name, in every block, which keeps hosts apart in captures read together.
    host: String,
    /// The host's RDMA ports, as the `KNOB` block describes them.
    ports: Vec<records::RdmaPortRecord>,
    /// Counter files found at start, relative to the root.
    files: Vec<String>,
    ethtool: EthtoolSource,
    qos: QosSource,
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

/// Reads the text `ethtool -S IFACE` prints: a `NIC statistics:` title, then one `name: value` line per
/// statistic. Lines that do not end in a number (the title, per-queue headings of some drivers) are skipped.
pub fn parse_ethtool_s(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(':')?;
            let name = name.trim();
            let value = value.trim().parse().ok()?;
            (!name.is_empty()).then(|| (name.to_owned(), value))
        })
        .collect()
}

impl Sampler {
    /// The live system: counters and knobs under `/sys`, ethtool statistics by ioctl.
    pub fn live(interfaces: &[String]) -> Self {
        Self::new(
            Path::new("/sys"),
            interfaces,
            EthtoolSource::Ioctl {
                socket: EthtoolSocket::new().ok(),
                names: BTreeMap::new(),
            },
        )
    }

    /// A fixture tree laid out like `/sys`, with `ethtool-S/<iface>` files for the ethtool statistics,
    /// `mlnx_qos/<iface>` files for the QoS, and the host's name in `hostname` (this host's without it).
    pub fn fixture(root: &Path, interfaces: &[String]) -> Self {
        Sampler {
            qos: QosSource::Files(root.join("mlnx_qos")),
            host: std::fs::read_to_string(root.join("hostname"))
                .map(|h| h.trim().to_owned())
                .unwrap_or_else(|_| sys::hostname()),
            ..Self::new(
                root,
                interfaces,
                EthtoolSource::Files(root.join("ethtool-S")),
            )
        }
    }

    /// Finds the counter files once; devices that appear later are not picked up.
    pub fn new(root: &Path, interfaces: &[String], ethtool: EthtoolSource) -> Self {
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
        let ports: Vec<records::RdmaPortRecord> = crate::ports::rdma_ports(root)
            .into_iter()
            .map(|p| records::RdmaPortRecord {
                mac: p
                    .netdev
                    .as_deref()
                    .and_then(|n| crate::ports::netdev_mac(root, n)),
                addrs: crate::qp_owners::port_addrs(&p.gids)
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
                device: p.device,
                port: p.port,
                driver: p.driver,
                netdev: p.netdev,
            })
            .collect();
        let mut port_netdevs: Vec<String> = ports
            .iter()
            .filter_map(|p| p.netdev.clone())
            .filter(|n| !interfaces.contains(n))
            .collect();
        port_netdevs.sort();
        port_netdevs.dedup();
        Sampler {
            root: root.to_path_buf(),
            interfaces: interfaces.to_vec(),
            port_netdevs,
            host: sys::hostname(),
            ports,
            files,
            ethtool,
            qos: QosSource::Command,
        }
    }

    /// One line per captured interface, and per RDMA port's netdev, whose ethtool statistics cannot be read,
    /// for the start-up message; empty when every one has them.
    pub fn ethtool_problems(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let all: Vec<String> = self
            .interfaces
            .iter()
            .chain(&self.port_netdevs)
            .cloned()
            .collect();
        for iface in all {
            match self.ethtool_of(&iface) {
                Ok(v) if v.is_empty() => out.push(format!("{iface} has no ethtool statistics")),
                Ok(_) => {}
                Err(e) => out.push(format!("ethtool statistics of {iface} unavailable: {e}")),
            }
        }
        out
    }

    /// The names of one interface's ethtool statistics (none when they cannot be read), for `roce-tracer
    /// list` to say which counters a port can read.
    pub fn ethtool_names(&mut self, iface: &str) -> Vec<String> {
        self.ethtool_of(iface)
            .map(|v| v.into_iter().map(|(n, _)| n).collect())
            .unwrap_or_default()
    }

    /// One interface's ethtool statistics, from the ioctl or the fixture file.
    fn ethtool_of(&mut self, iface: &str) -> std::io::Result<Vec<(String, u64)>> {
        match &mut self.ethtool {
            EthtoolSource::Files(dir) => {
                let text = std::fs::read_to_string(dir.join(iface))?;
                Ok(parse_ethtool_s(&text))
            }
            EthtoolSource::Ioctl { socket, names } => {
                let Some(sock) = socket.as_ref() else {
                    return Err(std::io::Error::other("no socket for the ethtool ioctl"));
                };
                let count = sock.stats_count(iface)?;
                if count == 0 {
                    return Ok(Vec::new());
                }
                let known = names.get(iface).is_some_and(|n| n.len() == count);
                if !known {
                    names.insert(iface.to_owned(), sock.stat_names(iface, count)?);
                }
                let list = names.get(iface).map(Vec::as_slice).unwrap_or_default();
                let values = sock.stat_values(iface, list.len())?;
                if values.len() != list.len() {
                    // The driver's set changed between the two calls: read the names again next time.
                    names.remove(iface);
                    return Err(std::io::Error::other(
                        "the statistics changed while being read",
                    ));
                }
                Ok(list.iter().cloned().zip(values).collect())
            }
        }
    }

    /// The DCQCN knobs of every interface that has them: `<iface>/<roce_rp|roce_np>/<path>` → value. Not
    /// only the captured ones: on a mirror port or a sniffer device the captured interface is not the RoCE
    /// NIC whose knobs shaped the traffic.
    pub fn knobs(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let net = self.root.join("class/net");
        let Ok(entries) = std::fs::read_dir(&net) else {
            return out;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        for iface in names {
            for side in ["roce_rp", "roce_np"] {
                let dir = net.join(&iface).join("ecn").join(side);
                walk(&dir, &format!("{iface}/{side}"), 0, &mut out);
            }
            // The QoS of the ports that do DCQCN: what turns an untagged frame's DSCP into its priority.
            if net.join(&iface).join("ecn").is_dir()
                && let Some(text) = self.qos_text(&iface)
            {
                for (file, value) in parse_mlnx_qos(&text) {
                    out.insert(format!("{iface}/{file}"), value);
                }
            }
        }
        out
    }

    /// What `mlnx_qos -i IFACE` prints, from the tool or the fixture; `None` when it cannot say.
    fn qos_text(&self, iface: &str) -> Option<String> {
        match &self.qos {
            QosSource::Files(dir) => std::fs::read_to_string(dir.join(iface)).ok(),
            QosSource::Command => run_for(
                std::process::Command::new("mlnx_qos").args(["-i", iface]),
                QOS_TIMEOUT,
            ),
        }
    }

    /// The addresses of each interface's RoCE GIDs, for the interfaces that have knobs: `iface` → addresses.
    pub fn addrs(&self, knobs: &BTreeMap<String, String>) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for port in crate::ports::rdma_ports(&self.root) {
            let Some(netdev) = port.netdev else { continue };
            if !knobs.keys().any(|k| k.starts_with(&format!("{netdev}/"))) {
                continue;
            }
            let known = out.entry(netdev).or_default();
            for a in crate::qp_owners::port_addrs(&port.gids) {
                let a = a.to_string();
                if !known.contains(&a) {
                    known.push(a);
                }
            }
        }
        out.retain(|_, v| !v.is_empty());
        out
    }

    /// One reading of every counter file that still parses as a number, of every ethtool statistic of the
    /// captured interfaces, and of the statistics of known meaning of the RDMA ports' other netdevs (an
    /// interface whose statistics cannot be read this time is left out).
    pub fn sample(&mut self) -> BTreeMap<String, u64> {
        let mut out: BTreeMap<String, u64> = self
            .files
            .iter()
            .filter_map(|rel| {
                let v = read_value(&self.root.join(rel))?.parse().ok()?;
                Some((rel.clone(), v))
            })
            .collect();
        for iface in self.interfaces.clone() {
            if let Ok(stats) = self.ethtool_of(&iface) {
                for (name, v) in stats {
                    out.insert(format!("{ETHTOOL_PREFIX}/{iface}/{name}"), v);
                }
            }
        }
        for iface in self.port_netdevs.clone() {
            if let Ok(stats) = self.ethtool_of(&iface) {
                for (name, v) in stats.into_iter().filter(|(n, _)| is_known_ethtool_name(n)) {
                    out.insert(format!("{ETHTOOL_PREFIX}/{iface}/{name}"), v);
                }
            }
        }
        out
    }

    /// The `KNOB` block, or `None` when no interface has knobs and the host has no RDMA port.
    pub fn knobs_block(&self) -> Option<Vec<u8>> {
        let knobs = self.knobs();
        if knobs.is_empty() && self.ports.is_empty() {
            return None;
        }
        blocks::encode_record(&records::Knobs {
            version: records::VERSION,
            ts_ns: sys::now_ns(),
            addrs: self.addrs(&knobs),
            knobs,
            captured: self.interfaces.clone(),
            host: self.host.clone(),
            ports: self.ports.clone(),
        })
        .ok()
    }

    /// A `CTRS` block, or `None` when there are no counters.
    pub fn sample_block(&mut self) -> Option<Vec<u8>> {
        let counters = self.sample();
        if counters.is_empty() {
            return None;
        }
        blocks::encode_record(&records::Counters {
            version: records::VERSION,
            ts_ns: sys::now_ns(),
            counters,
            host: self.host.clone(),
        })
        .ok()
    }
}

/// The trust and DSCP → priority map in the text `mlnx_qos -i IFACE` prints, as knob files: `trust` from its
/// `Priority trust state: dscp` line, and `dscp2prio/DSCP` → priority from each `prio:P dscp:D,D,...,` line
/// (a priority may take several lines). Lines it does not know are skipped; nothing is made up for DSCPs it
/// does not list.
pub fn parse_mlnx_qos(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some((_, state)) = line.split_once("trust state:") {
            let state = state.trim();
            if matches!(state, "pcp" | "dscp") {
                out.push(("trust".to_string(), state.to_string()));
            }
            continue;
        }
        let Some((prio, dscps)) = line
            .strip_prefix("prio:")
            .and_then(|rest| rest.split_once("dscp:"))
        else {
            continue;
        };
        let Some(prio) = prio.trim().parse::<u8>().ok().filter(|p| *p < 8) else {
            continue;
        };
        for d in dscps.split(',').filter_map(|d| d.trim().parse::<u8>().ok()) {
            if d < 64 {
                out.push((format!("dscp2prio/{d}"), prio.to_string()));
            }
        }
    }
    out
}

/// The standard output of `cmd` when it ran and succeeded within `limit`; `None` otherwise (not installed,
/// failed, or too slow: then it is killed).
fn run_for(cmd: &mut std::process::Command, limit: std::time::Duration) -> Option<String> {
    use std::io::Read as _;
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let start = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut text = String::new();
                child.stdout.take()?.read_to_string(&mut text).ok()?;
                return status.success().then_some(text);
            }
            Ok(None) if start.elapsed() < limit => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
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

    /// What `ethtool -S` prints for an mlx5 port (abridged): global counters, then per-priority PFC counters
    /// for the priorities in use. Durations are in microseconds, transitions count XOFF→XON changes.
    const MLX5_ETHTOOL_S: &str = "NIC statistics:
     rx_packets: 1500000
     rx_bytes: 6300000000
     tx_packets: 1490000
     tx_bytes: 6250000000
     rx_out_of_buffer: 0
     rx_discards_phy: 12
     rx_prio3_bytes: 6200000000
     rx_prio3_packets: 1480000
     rx_prio3_pause: 40
     rx_prio3_pause_duration: 1850
     rx_prio3_pause_transition: 20
     tx_prio3_bytes: 6150000000
     tx_prio3_packets: 1470000
     tx_prio3_pause: 8
     tx_prio3_pause_duration: 310
     rx_prio4_pause: 0
     rx_prio4_pause_duration: 0
     rx_prio4_pause_transition: 0
     tx_pause_storm_warning_events: 0
     tx_pause_storm_error_events: 0
";

    /// A tree laid out like an mlx5 host's sysfs, small, with eth0's `ethtool -S` output.
    fn fixture() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let put = |rel: &str, v: &str| testkit::put_file(d.path(), rel, &format!("{v}\n"));
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
        put("ethtool-S/eth0", MLX5_ETHTOOL_S);
        d
    }

    #[test]
    fn knobs_of_every_interface_that_has_them() {
        let d = fixture();
        // Capturing eth2 (a mirror port without knobs) still records the RoCE NICs' knobs.
        let s = Sampler::fixture(d.path(), &["eth2".to_string()]);
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
        assert_eq!(
            k.get("eth1/roce_np/cnp_dscp").map(String::as_str),
            Some("46")
        );
        assert_eq!(k.len(), 4, "{k:?}");
        let block = s.knobs_block().expect("knobs were found");
        let record: records::Knobs = blocks::decode(&block).expect("our own record");
        assert_eq!(record.captured, ["eth2"]);
        assert_eq!(record.knobs, k);
    }

    /// `mlnx_qos -i eth0` on a host in NVIDIA's lossless setup with two DSCPs moved: 30 to priority 6 and 26
    /// to 4 (both off the DSCP/8 default), so that a reader falling back to the default would be caught.
    const MLNX_QOS: &str = "DCBX mode: OS controlled
Priority trust state: dscp
dscp2prio mapping:
        prio:0 dscp:07,06,05,04,03,02,01,00,
        prio:1 dscp:15,14,13,12,11,10,09,08,
        prio:2 dscp:23,22,21,20,19,18,17,16,
        prio:3 dscp:31,29,28,27,25,24,
        prio:4 dscp:39,38,37,36,35,34,33,32,
        prio:4 dscp:26,
        prio:5 dscp:47,46,45,44,43,42,41,40,
        prio:6 dscp:30,55,54,53,52,51,50,49,
        prio:6 dscp:48,
        prio:7 dscp:63,62,61,60,59,58,57,56,
Cable len: 7
PFC configuration:
        priority    0   1   2   3   4   5   6   7
        enabled     0   0   0   1   0   0   0   0
";

    /// The host's QoS and its NIC's address travel in the `KNOB` block beside the ECN knobs, and the analyzer's
    /// reading of the block gives back the host's map and trust, and knows whose knobs they are.
    #[test]
    fn the_qos_map_and_the_addresses_are_recorded_and_read_back() {
        let d = fixture();
        let put = |rel: &str, v: &str| testkit::put_file(d.path(), rel, v);
        put("mlnx_qos/eth0", MLNX_QOS);
        // eth1 has knobs but its tool's answer is not there (a host without mlnx_qos): no map for it.
        let gid = "class/infiniband/mlx5_0/ports/1";
        put(
            &format!("{gid}/gids/0"),
            "fe80:0000:0000:0000:0000:0000:0000:0001\n",
        );
        put(
            &format!("{gid}/gids/1"),
            "0000:0000:0000:0000:0000:ffff:0a00:0001\n",
        );
        put(
            &format!("{gid}/gids/2"),
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        );
        for i in 0..2 {
            put(&format!("{gid}/gid_attrs/ndevs/{i}"), "eth0\n");
            put(&format!("{gid}/gid_attrs/types/{i}"), "RoCE v2\n");
        }
        let s = Sampler::fixture(d.path(), &["eth0".to_string()]);
        let k = s.knobs();
        assert_eq!(k.get("eth0/trust").map(String::as_str), Some("dscp"));
        assert_eq!(k.get("eth0/dscp2prio/26").map(String::as_str), Some("4"));
        assert_eq!(k.get("eth0/dscp2prio/30").map(String::as_str), Some("6"));
        assert_eq!(k.get("eth0/dscp2prio/48").map(String::as_str), Some("6"));
        assert_eq!(
            k.keys()
                .filter(|k| k.starts_with("eth0/dscp2prio/"))
                .count(),
            64
        );
        assert!(
            !k.keys()
                .any(|k| k.starts_with("eth1/trust") || k.starts_with("eth1/dscp2prio"))
        );
        let block = s.knobs_block().expect("knobs were found");
        let record: records::Knobs = blocks::decode(&block).expect("our own record");
        assert_eq!(record.addrs.len(), 1, "{:?}", record.addrs);
        assert_eq!(record.addrs["eth0"], ["fe80::1", "10.0.0.1"]);
        // The analyzer's side, from the block as a capture would hold it.
        let held = [roce_capture::CustomBlock {
            pen: blocks::PEN,
            data: block,
        }];
        let recorded = roce_core::recorded::Recorded::read(&held);
        let map = recorded
            .priorities
            .expect("a map was recorded")
            .expect("it reads");
        assert_eq!(map.source, "recorded (eth0)");
        assert_eq!(map.trust, roce_core::priority::Trust::Dscp);
        assert_eq!(map.resolve(None, Some(26)).map(|p| p.0), Some(4));
        assert_eq!(map.resolve(Some(3), Some(30)).map(|p| p.0), Some(6));
        let eth0 = recorded.ecn.iter().find(|r| r.iface == "eth0").unwrap();
        assert_eq!(
            eth0.addrs,
            [
                "fe80::1".parse::<std::net::IpAddr>().unwrap(),
                [10, 0, 0, 1].into()
            ]
        );
        assert!(
            recorded
                .ecn
                .iter()
                .find(|r| r.iface == "eth1")
                .unwrap()
                .addrs
                .is_empty()
        );
    }

    /// A host without `mlnx_qos`, a tool that fails, and one that hangs all leave the QoS out; the one that
    /// hangs is killed at its limit rather than waited for.
    #[test]
    fn a_missing_failing_or_stuck_tool_records_nothing() {
        use std::process::Command;
        // Tools that end on their own: a limit far above what a busy machine takes to start them.
        let ample = std::time::Duration::from_secs(60);
        assert_eq!(
            run_for(Command::new("sh").args(["-c", "echo trust"]), ample).as_deref(),
            Some("trust\n")
        );
        assert_eq!(
            run_for(&mut Command::new("rocetrace-no-such-tool"), ample),
            None
        );
        assert_eq!(
            run_for(Command::new("sh").args(["-c", "exit 3"]), ample),
            None
        );
        // A tool that would sleep for ten minutes, given 300 ms: it must be killed and reaped. The wait
        // for the answer is capped far below its sleep, so that waiting the tool out fails here instead
        // of hanging the run.
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!("echo $$ > '{}'; exec sleep 600", pid_file.display());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let limit = std::time::Duration::from_millis(300);
            let _ = tx.send(run_for(Command::new("sh").args(["-c", &script]), limit));
        });
        let cap = std::time::Duration::from_secs(120);
        let answer = rx.recv_timeout(cap).unwrap_or_else(|_| {
            panic!("run_for gave no answer within {cap:?} for a tool stuck past its 300 ms limit: it waits")
        });
        assert_eq!(answer, None);
        // Killed and reaped, not left a zombie. (On a loaded machine the kill can come before the script
        // wrote its pid; then the answer within the cap is the whole proof.)
        if let Ok(pid) = std::fs::read_to_string(&pid_file) {
            let proc_dir = std::path::Path::new("/proc").join(pid.trim());
            assert!(
                !proc_dir.exists(),
                "the stuck tool (pid {}) is still there after run_for gave up on it",
                pid.trim()
            );
        }
    }

    #[test]
    fn samples_follow_the_files() {
        let d = fixture();
        let mut s = Sampler::fixture(d.path(), &[]);
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
        let record: records::Counters = blocks::decode(&block).unwrap();
        assert_eq!(
            record.counters["class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent"],
            9
        );
        // A host without any knob directory records no knob block at all.
        let bare = tempfile::tempdir().unwrap();
        assert!(Sampler::fixture(bare.path(), &[]).knobs_block().is_none());
    }

    #[test]
    fn ethtool_s_text() {
        let stats = parse_ethtool_s(MLX5_ETHTOOL_S);
        assert_eq!(stats.len(), 20, "every line but the title: {stats:?}");
        assert_eq!(stats[0], ("rx_packets".to_string(), 1_500_000));
        let get = |n: &str| stats.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        assert_eq!(get("rx_prio3_pause_duration"), Some(1850));
        assert_eq!(get("tx_prio3_pause"), Some(8));
        // Headings, blank lines, non-numbers and names with colons.
        let odd = "NIC statistics:\n\n     queue 0:\n     rx_q0: 5\n  a:b: 7\n  bad: -1\n  big: 18446744073709551615\n";
        assert_eq!(
            parse_ethtool_s(odd),
            vec![
                ("rx_q0".to_string(), 5),
                ("a:b".to_string(), 7),
                ("big".to_string(), u64::MAX)
            ]
        );
    }

    #[test]
    fn ethtool_statistics_of_the_captured_interfaces_join_the_sample() {
        let d = fixture();
        let mut s = Sampler::fixture(d.path(), &["eth0".to_string(), "eth1".to_string()]);
        // eth1 has knobs but no ethtool file: named at start, and simply absent from the samples.
        let problems = s.ethtool_problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("eth1"), "{problems:?}");
        let first = s.sample();
        assert_eq!(first["ethtool/eth0/rx_prio3_pause"], 40);
        assert_eq!(first["ethtool/eth0/rx_prio3_pause_transition"], 20);
        assert_eq!(
            first.keys().filter(|k| k.starts_with("ethtool/")).count(),
            20
        );
        assert!(!first.keys().any(|k| k.starts_with("ethtool/eth1/")));
        // The sysfs counters are still there.
        assert_eq!(first.len(), 24);

        // A later sample reads the file again; the analyzer's deltas then show what moved.
        let moved = MLX5_ETHTOOL_S
            .replace("rx_prio3_pause: 40", "rx_prio3_pause: 52")
            .replace(
                "rx_prio3_pause_duration: 1850",
                "rx_prio3_pause_duration: 2410",
            );
        std::fs::write(d.path().join("ethtool-S/eth0"), moved).unwrap();
        let second = s.sample_block().unwrap();
        let first_block = blocks::encode_record(&records::Counters {
            version: records::VERSION,
            ts_ns: 1,
            counters: first,
            host: String::new(),
        })
        .unwrap();
        let custom = |data: Vec<u8>| roce_capture::CustomBlock {
            pen: blocks::PEN,
            data,
        };
        let deltas =
            roce_core::recorded::Recorded::read(&[custom(first_block), custom(second)]).counters;
        let delta = |n: &str| deltas.iter().find(|d| d.name == n).map(|d| d.delta);
        assert_eq!(delta("ethtool/eth0/rx_prio3_pause"), Some(12));
        assert_eq!(delta("ethtool/eth0/rx_prio3_pause_duration"), Some(560));
        assert_eq!(delta("ethtool/eth0/tx_prio3_pause"), Some(0));
    }
}
