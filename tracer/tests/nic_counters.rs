//! One small sysfs tree per vendor (`tests/fixtures/nics/{mlx5,bnxt_re,irdma,ionic}`, laid out like `/sys` with
//! each driver's own counter names, and each port's netdev's `ethtool -S` text): the tracer records them, and
//! what it recorded reads back into the same meanings whoever named the counters. `roce-tracer list` names
//! each port's vendor and what it can read.

use std::path::{Path, PathBuf};
use std::process::Command;

use roce_capture::CustomBlock;
use roce_capture::blocks::{self, PEN, records};
use roce_core::nic_counters::{Meaning, Status, Vendor};
use roce_core::recorded::Recorded;
use tracer::counters::Sampler;

const TRACER: &str = env!("CARGO_BIN_EXE_roce-tracer");

fn fixture(vendor: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nics")
        .join(vendor)
}

/// A copy of a fixture tree to change counters in, its driver links kept as links.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let kind = e.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if kind.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Adds `by` to a counter: a sysfs file (`class/...`), or a statistic in an `ethtool-S/IFACE` file
/// (`ethtool-S/IFACE:NAME`).
fn bump(root: &Path, counter: &str, by: u64) {
    match counter.split_once(':') {
        Some((file, name)) => {
            let path = root.join(file);
            let text = std::fs::read_to_string(&path).unwrap();
            let mut found = false;
            let out: Vec<String> = text
                .lines()
                .map(|l| match l.rsplit_once(':') {
                    Some((n, v)) if n.trim() == name => {
                        found = true;
                        format!("{n}: {}", v.trim().parse::<u64>().unwrap() + by)
                    }
                    _ => l.to_string(),
                })
                .collect();
            assert!(found, "{name} is not in {}", path.display());
            std::fs::write(path, out.join("\n") + "\n").unwrap();
        }
        None => set(
            root,
            counter,
            read(root, counter).wrapping_add(by) & 0xffff_ffff,
        ),
    }
}

fn read(root: &Path, file: &str) -> u64 {
    std::fs::read_to_string(root.join(file))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn set(root: &Path, file: &str, value: u64) {
    std::fs::write(root.join(file), format!("{value}\n")).unwrap();
}

/// Each vendor's counters for the meanings the test moves: what the fixture calls them.
struct Names {
    vendor: &'static str,
    hw: &'static str,
    cnp_sent: &'static str,
    cnp_handled: &'static str,
    ecn: &'static str,
    pause_tx: &'static str,
    pause_rx: &'static str,
    /// The priority of its pause counters; `None` where the driver counts every priority together.
    pause_priority: Option<u8>,
}

const VENDORS: [Names; 4] = [
    Names {
        vendor: "mlx5",
        hw: "class/infiniband/mlx5_0/ports/1/hw_counters",
        cnp_sent: "np_cnp_sent",
        cnp_handled: "rp_cnp_handled",
        ecn: "np_ecn_marked_roce_packets",
        pause_tx: "ethtool-S/ens1f0np0:tx_prio3_pause",
        pause_rx: "ethtool-S/ens1f0np0:rx_prio3_pause",
        pause_priority: Some(3),
    },
    Names {
        vendor: "bnxt_re",
        hw: "class/infiniband/bnxt_re0/ports/1/hw_counters",
        cnp_sent: "tx_cnp_pkts",
        cnp_handled: "rx_cnp_pkts",
        ecn: "rx_ecn_marked_pkts",
        pause_tx: "ethtool-S/ens2f0np0:tx_pfc_ena_frames_pri3",
        pause_rx: "ethtool-S/ens2f0np0:rx_pfc_ena_frames_pri3",
        pause_priority: Some(3),
    },
    Names {
        vendor: "irdma",
        hw: "class/infiniband/rocep59s0f0/ports/1/hw_counters",
        cnp_sent: "cnpSent",
        cnp_handled: "cnpHandled",
        ecn: "RxECNMrkd",
        pause_tx: "ethtool-S/ens3f0:tx_priority_3_xoff.nic",
        pause_rx: "ethtool-S/ens3f0:rx_priority_3_xoff.nic",
        pause_priority: Some(3),
    },
    Names {
        vendor: "ionic",
        hw: "class/infiniband/ionic_0/ports/1/hw_counters",
        cnp_sent: "tx_rdma_cnp_pkts",
        cnp_handled: "rx_rdma_cnp_pkts",
        ecn: "rx_rdma_ecn_pkts",
        pause_tx: "ethtool-S/enp9s0:frames_tx_pripause",
        pause_rx: "ethtool-S/enp9s0:frames_rx_pripause",
        pause_priority: None,
    },
];

/// What the test moves each meaning by, the same on every vendor.
const MOVES: [(Meaning, u64); 5] = [
    (Meaning::CnpSent, 40),
    (Meaning::CnpHandled, 25),
    (Meaning::EcnMarkedReceived, 100),
    (Meaning::PauseFramesTx, 6),
    (Meaning::PauseFramesRx, 9),
];

fn custom(data: Vec<u8>) -> CustomBlock {
    CustomBlock { pen: PEN, data }
}

#[test]
fn four_vendors_counters_read_into_the_same_meanings() {
    let dir = tempfile::tempdir().unwrap();
    let mut deltas = Vec::new();
    for n in &VENDORS {
        let root = dir.path().join(n.vendor);
        copy_tree(&fixture(n.vendor), &root);
        let file = |name: &str| format!("{}/{name}", n.hw);
        if n.vendor == "irdma" {
            // irdma's CNP counters are 32-bit in the hardware: this one wraps between the samples.
            set(&root, &file(n.cnp_sent), u64::from(u32::MAX) - 5);
        }
        // Nothing captured, as with the rdma engine on a port whose netdev is not named: the port's
        // netdev's statistics are still read, those of known meaning only.
        let mut s = Sampler::fixture(&root, &[]);
        let knob = s
            .knobs_block()
            .expect("a host with an RDMA port records it");
        let first = s.sample_block().expect("counters");
        for (counter, by) in [
            (file(n.cnp_sent), MOVES[0].1),
            (file(n.cnp_handled), MOVES[1].1),
            (file(n.ecn), MOVES[2].1),
            (n.pause_tx.to_string(), MOVES[3].1),
            (n.pause_rx.to_string(), MOVES[4].1),
        ] {
            bump(&root, &counter, by);
        }
        let second = s.sample_block().unwrap();

        let k: records::Knobs = blocks::decode(&knob).unwrap();
        assert_eq!(k.ports.len(), 1, "{}: {:?}", n.vendor, k.ports);
        let port = &k.ports[0];
        assert!(port.driver.is_some() && port.mac.is_some(), "{port:?}");
        assert!(
            port.addrs.iter().any(|a| a.starts_with("10.0.0.")),
            "{port:?}"
        );
        let c: records::Counters = blocks::decode(&first).unwrap();
        assert_eq!(c.host, k.host);
        assert!(!c.host.is_empty());
        // The per-queue statistics of the uncaptured netdev are left out; its pause counters are kept.
        let eth: Vec<&String> = c
            .counters
            .keys()
            .filter(|k| k.starts_with("ethtool/"))
            .collect();
        assert!(!eth.is_empty(), "{}: no ethtool statistic kept", n.vendor);
        assert!(
            eth.iter()
                .all(|k| roce_core::nic_counters::is_known_ethtool_name(
                    k.rsplit('/').next().unwrap()
                )),
            "{}: {eth:?}",
            n.vendor
        );

        let recorded = Recorded::read(&[custom(knob), custom(first), custom(second)]);
        assert_eq!(recorded.nics.len(), 1, "{}", n.vendor);
        let nic = &recorded.nics[0];
        assert_eq!(nic.info.vendor.map(Vendor::name), Some(n.vendor));
        assert!(
            nic.info.vendor_from.starts_with("driver "),
            "{}",
            nic.info.vendor_from
        );
        let delta = |m: Meaning, p: Option<u8>| {
            let row = nic
                .meanings
                .iter()
                .find(|r| r.meaning == m && r.priority == p)
                .unwrap_or_else(|| panic!("{}: no {} row for {p:?}", n.vendor, m.key()));
            assert_eq!(row.status, Status::Counted, "{}: {row:?}", n.vendor);
            row.movement.unwrap()
        };
        let moved: Vec<(Meaning, u64)> = MOVES
            .iter()
            .map(|&(m, _)| {
                let p = if m.per_priority() {
                    n.pause_priority
                } else {
                    None
                };
                (m, delta(m, p).delta)
            })
            .collect();
        if n.vendor == "irdma" {
            assert_eq!(delta(Meaning::CnpSent, None).wraps, 1);
            // irdma does not count sequence-error NAKs: said so, not 0.
            let nak = nic
                .meanings
                .iter()
                .find(|r| r.meaning == Meaning::SeqErrNaksReceived)
                .unwrap();
            assert_eq!((nak.status, nak.movement), (Status::NotCounted, None));
        }
        deltas.push((n.vendor, moved));
    }
    for (vendor, moved) in &deltas {
        assert_eq!(moved.as_slice(), MOVES.as_slice(), "{vendor}");
    }
}

#[test]
fn list_names_each_ports_vendor_and_what_it_can_read() {
    for (vendor, device, expect, lacks) in [
        (
            "mlx5",
            "mlx5_0",
            "pause_frames_tx[3,4]",
            "not counted by mlx5: retransmitted_packets",
        ),
        (
            "bnxt_re",
            "bnxt_re0",
            "pause_duration_tx_us[3]",
            "not counted by bnxt_re: retransmitted_packets",
        ),
        (
            "irdma",
            "rocep59s0f0",
            "pause_frames_rx[3,4]",
            "not counted by irdma: seq_err_naks_received",
        ),
        (
            "ionic",
            "ionic_0",
            "retransmitted_packets, pause_frames_rx, pause_frames_tx",
            "",
        ),
    ] {
        let out = Command::new(TRACER)
            .args(["list", "--sysfs-root"])
            .arg(fixture(vendor))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{device}:1 ")) && l.contains("Ethernet"))
            .unwrap_or_else(|| panic!("no port row for {device}:\n{text}"));
        assert!(row.contains(&format!(" {vendor} ")), "{row}");
        let counters = text
            .lines()
            .find(|l| l.contains(&format!("{device}:1  counters ({vendor}, by its driver")))
            .unwrap_or_else(|| panic!("no counters line for {device}:\n{text}"));
        assert!(
            counters.contains("cnp_sent, cnp_handled, ecn_marked_received"),
            "{counters}"
        );
        assert!(counters.contains(expect), "{counters}");
        assert!(counters.contains(lacks), "{counters}");
    }
}
