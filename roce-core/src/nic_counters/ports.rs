//! Each RDMA port's counters over the capture, by meaning, from the tracer's `KNOB` and `CTRS` records.
//!
//! The tracer names each counter by where it read it (`class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent`,
//! `ethtool/eth2/rx_prio3_pause`). To say what a port counted, the two places are joined through what the
//! `KNOB` record says of the port (its netdev, its driver), and the vendor's names are looked up in the table.
//! Captures of several hosts read together each bring their own `mlx5_0`: records are grouped by the host
//! the tracer named in them, and a block without one (an older tracer's) belongs to the unnamed host.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use roce_capture::blocks::records::{Counters, Knobs, RdmaPortRecord};
use serde::Serialize;

use super::movement::{Movement, movement};
use super::{Meaning, Place, Source, Status, Vendor, source};

/// One RDMA port: which it is and whose, and where its packets are to be found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortInfo {
    /// The host the tracer ran on (empty when its records did not say).
    pub host: String,
    /// The RDMA device.
    pub device: String,
    /// The port number.
    pub port: u32,
    /// Whose counter names these are; `None` when nothing told.
    pub vendor: Option<Vendor>,
    /// How the vendor was told: `driver mlx5_core`, `device name`, `counter names`, or `unknown`.
    pub vendor_from: String,
    /// The port's netdev, whose ethtool statistics are the port's; `None` when the tracer did not record it.
    pub netdev: Option<String>,
    /// The netdev's MAC address, which the port's own PFC frames carry.
    pub mac: Option<String>,
    /// The addresses of the port's host (its RoCE GIDs): the packets that are this port's.
    pub addrs: Vec<IpAddr>,
    /// Counter samples of this host the tracer recorded (`CTRS` blocks).
    pub samples: u64,
}

/// One RDMA port's counters over the capture, by meaning.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NicPort {
    /// Which port.
    #[serde(flatten)]
    pub info: PortInfo,
    /// Every meaning: counted (with how it moved), or why not.
    pub meanings: Vec<MeaningRow>,
}

/// One meaning of one port.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeaningRow {
    /// What is counted.
    pub meaning: Meaning,
    /// The priority of a per-priority counter; `None` for the others, and for a driver's one count over
    /// every priority.
    pub priority: Option<u8>,
    /// Whether it was counted, and if not why.
    pub status: Status,
    /// The raw counters behind it (`hw_counters/np_cnp_sent`, `ethtool/eth2/rx_prio3_pause`); for one not
    /// recorded, the names the vendor uses.
    pub counters: Vec<String>,
    /// How it moved over the samples; `None` unless counted.
    pub movement: Option<Movement>,
}

/// One host's records.
#[derive(Debug, Default)]
struct HostRecords<'a> {
    ports: Vec<&'a RdmaPortRecord>,
    /// Each sample's time and counters, in file order.
    samples: Vec<(u64, &'a BTreeMap<String, u64>)>,
}

/// Every port that the capture's records describe or counted, host by host, then by device and port.
pub fn nic_ports(knobs: &[Knobs], counters: &[Counters]) -> Vec<NicPort> {
    let mut hosts: BTreeMap<&str, HostRecords<'_>> = BTreeMap::new();
    for k in knobs {
        let h = hosts.entry(k.host.as_str()).or_default();
        for p in &k.ports {
            // A rotated file repeats its host's ports.
            if !h
                .ports
                .iter()
                .any(|q| q.device == p.device && q.port == p.port)
            {
                h.ports.push(p);
            }
        }
    }
    for c in counters {
        hosts
            .entry(c.host.as_str())
            .or_default()
            .samples
            .push((c.ts_ns, &c.counters));
    }
    let mut out = Vec::new();
    for (host, records) in &hosts {
        let mut keys: BTreeSet<(String, u32)> = records
            .ports
            .iter()
            .map(|p| (p.device.clone(), p.port))
            .collect();
        for (_, sample) in &records.samples {
            keys.extend(sample.keys().filter_map(|k| hw_port_of(k)));
        }
        for (device, port) in keys {
            let record = records
                .ports
                .iter()
                .find(|p| p.device == device && p.port == port);
            if let Some(p) = port_of(host, &device, port, record.copied(), records) {
                out.push(p);
            }
        }
    }
    out
}

/// The device and port of a sysfs counter key, `class/infiniband/DEV/ports/N/...`.
fn hw_port_of(key: &str) -> Option<(String, u32)> {
    let rest = key.strip_prefix("class/infiniband/")?;
    let (device, rest) = rest.split_once('/')?;
    let rest = rest.strip_prefix("ports/")?;
    let (port, _) = rest.split_once('/')?;
    Some((device.to_string(), port.parse().ok()?))
}

/// The full key of a counter of `place` for a port, and its short name for people; `None` for an ethtool
/// statistic of a port whose netdev is unknown.
fn key_of(
    place: Place,
    device: &str,
    port: u32,
    netdev: Option<&str>,
    name: &str,
) -> Option<(String, String)> {
    match place {
        Place::HwCounters => Some((
            format!("class/infiniband/{device}/ports/{port}/hw_counters/{name}"),
            format!("hw_counters/{name}"),
        )),
        Place::Ethtool => {
            let n = netdev?;
            let key = format!("ethtool/{n}/{name}");
            Some((key.clone(), key))
        }
    }
}

/// One port's rows; `None` for a port the records describe but never counted (no sample holds any of its
/// counters, and none of its netdev's).
fn port_of(
    host: &str,
    device: &str,
    port: u32,
    record: Option<&RdmaPortRecord>,
    records: &HostRecords<'_>,
) -> Option<NicPort> {
    let netdev = record.and_then(|r| r.netdev.clone());
    let hw_prefix = format!("class/infiniband/{device}/ports/{port}/hw_counters/");
    let eth_prefix = netdev.as_ref().map(|n| format!("ethtool/{n}/"));
    let mut hw_names: BTreeSet<&str> = BTreeSet::new();
    let mut sampled = false;
    for (_, sample) in &records.samples {
        for k in sample.keys() {
            if let Some(name) = k.strip_prefix(&hw_prefix) {
                hw_names.insert(name);
                sampled = true;
            } else if eth_prefix
                .as_ref()
                .is_some_and(|p| k.starts_with(p.as_str()))
            {
                sampled = true;
            }
        }
    }
    if !sampled {
        return None;
    }
    let driver = record.and_then(|r| r.driver.as_deref());
    let (vendor, vendor_from) = match (
        driver.and_then(Vendor::of_driver),
        Vendor::of_device_name(device),
        Vendor::of_counter_names(hw_names.iter().copied()),
    ) {
        (Some(v), _, _) => (Some(v), format!("driver {}", driver.unwrap_or_default())),
        (None, Some(v), _) => (Some(v), "device name".to_string()),
        (None, None, Some(v)) => (Some(v), "counter names".to_string()),
        (None, None, None) => (
            None,
            match driver {
                Some(d) => format!("unknown (driver {d})"),
                None => "unknown".to_string(),
            },
        ),
    };
    let meanings = match vendor {
        Some(v) => Meaning::ALL
            .into_iter()
            .flat_map(|m| rows_of(v, m, device, port, netdev.as_deref(), records))
            .collect(),
        None => Vec::new(),
    };
    Some(NicPort {
        info: PortInfo {
            host: host.to_string(),
            device: device.to_string(),
            port,
            vendor,
            vendor_from,
            mac: record.and_then(|r| r.mac.clone()),
            addrs: record
                .map(|r| {
                    r.addrs
                        .iter()
                        .filter_map(|a| a.trim().parse::<IpAddr>().ok())
                        .map(|a| a.to_canonical())
                        .collect()
                })
                .unwrap_or_default(),
            netdev,
            samples: records.samples.len() as u64,
        },
        meanings,
    })
}

/// The rows of one meaning: one per priority a per-priority counter was sampled for, one otherwise, and one
/// saying why when it was not.
fn rows_of(
    vendor: Vendor,
    meaning: Meaning,
    device: &str,
    port: u32,
    netdev: Option<&str>,
    records: &HostRecords<'_>,
) -> Vec<MeaningRow> {
    let Some(src) = source(vendor, meaning) else {
        return vec![MeaningRow {
            meaning,
            priority: None,
            status: Status::NotCounted,
            counters: Vec::new(),
            movement: None,
        }];
    };
    let mut rows: Vec<MeaningRow> = src
        .priorities()
        .into_iter()
        .filter_map(|p| counted(src, p, device, port, netdev, records))
        .collect();
    if rows.is_empty() {
        rows.push(MeaningRow {
            meaning,
            priority: None,
            status: Status::NotRecorded,
            // `{p}` of a per-priority name reads as `N` for people.
            counters: src.names.iter().map(|n| n.replace("{p}", "N")).collect(),
            movement: None,
        });
    }
    rows
}

/// The row of one meaning and priority when a sample holds its counter: the first of the vendor's names
/// that one does (or, for a sum, every one that does).
fn counted(
    src: &Source,
    priority: Option<u8>,
    device: &str,
    port: u32,
    netdev: Option<&str>,
    records: &HostRecords<'_>,
) -> Option<MeaningRow> {
    let present: Vec<(String, String)> = src
        .names_for(priority)
        .iter()
        .filter_map(|n| key_of(src.place, device, port, netdev, n))
        .filter(|(key, _)| records.samples.iter().any(|(_, s)| s.contains_key(key)))
        .collect();
    let used: Vec<(String, String)> = if src.sum {
        present
    } else {
        present.into_iter().take(1).collect()
    };
    if used.is_empty() {
        return None;
    }
    // A sum is read only where every one of its parts was: a part missing from a sample would read as a drop.
    let points: Vec<(u64, u64)> = records
        .samples
        .iter()
        .filter_map(|(ts, s)| {
            let mut total = 0u64;
            for (key, _) in &used {
                total = total.saturating_add(*s.get(key)?);
            }
            Some((*ts, total))
        })
        .collect();
    Some(MeaningRow {
        meaning: src.meaning,
        priority,
        status: Status::Counted,
        counters: used.into_iter().map(|(_, short)| short).collect(),
        movement: movement(&points),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(host: &str, ts: u64, pairs: &[(&str, u64)]) -> Counters {
        Counters {
            version: 1,
            ts_ns: ts,
            counters: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            host: host.into(),
        }
    }

    fn knob(host: &str, ports: Vec<RdmaPortRecord>) -> Knobs {
        Knobs {
            host: host.into(),
            ports,
            ..Knobs::default()
        }
    }

    #[test]
    fn a_port_reads_by_meaning_and_says_what_it_lacks() {
        let hw = "class/infiniband/irdma0/ports/1/hw_counters";
        let ports = nic_ports(
            &[knob(
                "h1",
                vec![RdmaPortRecord {
                    device: "irdma0".into(),
                    port: 1,
                    driver: Some("ice".into()),
                    netdev: Some("ens2".into()),
                    mac: Some("02:00:00:00:00:0a".into()),
                    addrs: vec!["10.0.0.10".into(), "::ffff:10.0.0.10".into()],
                }],
            )],
            &[
                sample(
                    "h1",
                    10,
                    &[
                        (&format!("{hw}/cnpSent"), 5),
                        (&format!("{hw}/ip4InDiscards"), 1),
                        (&format!("{hw}/ip6InDiscards"), 2),
                        ("ethtool/ens2/tx_priority_3_xoff.nic", 0),
                    ],
                ),
                sample(
                    "h1",
                    20,
                    &[
                        (&format!("{hw}/cnpSent"), 9),
                        (&format!("{hw}/ip4InDiscards"), 4),
                        (&format!("{hw}/ip6InDiscards"), 2),
                        ("ethtool/ens2/tx_priority_3_xoff.nic", 6),
                    ],
                ),
            ],
        );
        assert_eq!(ports.len(), 1);
        let p = &ports[0];
        assert_eq!(
            (p.info.vendor, p.info.vendor_from.as_str()),
            (Some(Vendor::Irdma), "driver ice")
        );
        assert_eq!(p.info.addrs, [IpAddr::from([10, 0, 0, 10]); 2]);
        let row = |m: Meaning| p.meanings.iter().find(|r| r.meaning == m).unwrap();
        assert_eq!(row(Meaning::CnpSent).movement.unwrap().delta, 4);
        assert_eq!(row(Meaning::CnpSent).counters, ["hw_counters/cnpSent"]);
        let discards = row(Meaning::RxDiscards);
        assert_eq!(discards.movement.unwrap().delta, 3);
        assert_eq!(discards.counters.len(), 2);
        let pause = row(Meaning::PauseFramesTx);
        assert_eq!(
            (pause.priority, pause.movement.unwrap().delta),
            (Some(3), 6)
        );
        assert_eq!(row(Meaning::SeqErrNaksReceived).status, Status::NotCounted);
        // irdma counts these, but this one's driver has no such counter.
        assert_eq!(row(Meaning::CnpHandled).status, Status::NotRecorded);
        assert_eq!(row(Meaning::CnpHandled).counters, ["cnpHandled"]);
    }

    #[test]
    fn hosts_are_kept_apart_and_older_records_still_read() {
        let key = "class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent";
        let ports = nic_ports(
            &[],
            &[
                sample("a", 1, &[(key, 10)]),
                sample("b", 1, &[(key, 1_000)]),
                sample("a", 2, &[(key, 15)]),
                sample("b", 2, &[(key, 1_100)]),
                // An older tracer's blocks name no host.
                sample(
                    "",
                    5,
                    &[("class/infiniband/weird0/ports/2/hw_counters/x", 1)],
                ),
            ],
        );
        let sent = |host: &str| {
            let p = ports.iter().find(|p| p.info.host == host).unwrap();
            p.meanings[0].movement.unwrap().delta
        };
        assert_eq!((sent("a"), sent("b")), (5, 100));
        let weird = ports.iter().find(|p| p.info.device == "weird0").unwrap();
        assert_eq!((weird.info.vendor, weird.info.port), (None, 2));
        assert!(weird.meanings.is_empty());
        let mlx = ports.iter().find(|p| p.info.host == "a").unwrap();
        assert_eq!(mlx.info.vendor_from, "device name");
        // The netdev is unknown: the ethtool meanings cannot be read, and say so.
        let pause = mlx
            .meanings
            .iter()
            .find(|r| r.meaning == Meaning::PauseFramesRx)
            .unwrap();
        assert_eq!(pause.status, Status::NotRecorded);
    }
}
