//! NIC counters by what they mean rather than by what each driver calls them.
//!
//! Every RDMA driver counts much the same events (CNPs sent and handled, ECN-marked packets received, PSNs
//! out of sequence, retransmission triggers, pauses per priority, discards) under names of its own, and
//! renames them between kernel versions (bnxt_re's `tx_cnp_pkts` became `np_cnp_pkts`, then `np_cnp_sent`). The
//! tracer records every counter by its raw name; this module is the one table (in [`table`]) that says which
//! raw name of which vendor stands for which [`Meaning`], so that the tracer (`roce-tracer list`, which
//! ethtool statistics to keep) and the analyzer (the NIC counters beside the packets) read them alike. A
//! meaning a vendor has no counter for is said so ([`Status::NotCounted`]), never read as 0.
//!
//! [`movement`] turns a counter's samples into how much it moved (wraps and resets included), [`ports`]
//! reads the capture's blocks into each port's counters by meaning, and [`check`] sets them beside what the
//! capture's packets show. `docs/nic-counters.md` is the table for readers.

pub mod check;
pub mod movement;
pub mod ports;
pub mod table;

use serde::Serialize;

/// Whose driver names a device's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Vendor {
    /// NVIDIA ConnectX (`mlx5_core` / `mlx5_ib`).
    Mlx5,
    /// Broadcom NetXtreme-E (`bnxt_en` / `bnxt_re`).
    BnxtRe,
    /// Intel E810 and later (`ice` / `irdma`).
    Irdma,
    /// AMD Pensando (`ionic`).
    Ionic,
}

impl Vendor {
    /// Every vendor the table knows.
    pub const ALL: [Vendor; 4] = [Vendor::Mlx5, Vendor::BnxtRe, Vendor::Irdma, Vendor::Ionic];

    /// The RDMA driver's name, how users and the documentation call the vendor's counters.
    pub fn name(self) -> &'static str {
        match self {
            Vendor::Mlx5 => "mlx5",
            Vendor::BnxtRe => "bnxt_re",
            Vendor::Irdma => "irdma",
            Vendor::Ionic => "ionic",
        }
    }

    /// The vendor of a device whose driver (the name of `class/infiniband/DEV/device/driver`'s link) is
    /// `driver`: the PCI function's Ethernet driver or the RDMA driver bound to an auxiliary device, whichever
    /// the kernel links.
    pub fn of_driver(driver: &str) -> Option<Vendor> {
        match driver {
            "mlx5_core" | "mlx5_ib" => Some(Vendor::Mlx5),
            "bnxt_en" | "bnxt_re" => Some(Vendor::BnxtRe),
            "ice" | "irdma" | "idpf" => Some(Vendor::Irdma),
            "ionic" | "ionic_rdma" => Some(Vendor::Ionic),
            _ => None,
        }
    }

    /// The vendor the kernel's default device name says (`mlx5_0`, `bnxt_re0`, `irdma1`, `ionic_0`); a device
    /// udev renamed (`rocep59s0f0`) says nothing.
    pub fn of_device_name(device: &str) -> Option<Vendor> {
        [
            ("mlx5_", Vendor::Mlx5),
            ("bnxt_re", Vendor::BnxtRe),
            ("irdma", Vendor::Irdma),
            ("ionic", Vendor::Ionic),
        ]
        .into_iter()
        .find_map(|(prefix, v)| device.starts_with(prefix).then_some(v))
    }

    /// The vendor whose hw_counters names these are: the one with most names no other vendor uses, else
    /// mlx5 when its names are there (bnxt_re's newest drivers took them over, but they also keep names of
    /// their own, which win).
    pub fn of_counter_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<Vendor> {
        let mut votes = [0usize; 4];
        let mut mlx5 = false;
        for name in names {
            for (v, n) in table::SIGNATURES {
                if *n == name
                    && let Some(i) = Vendor::ALL.iter().position(|x| x == v)
                {
                    votes[i] += 1;
                }
            }
            mlx5 |= table::MLX5_NAMES.contains(&name);
        }
        let best = (0..4).max_by_key(|&i| (votes[i], std::cmp::Reverse(i)))?;
        if votes[best] > 0 {
            Some(Vendor::ALL[best])
        } else {
            mlx5.then_some(Vendor::Mlx5)
        }
    }
}

/// What a counter counts, whoever names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Meaning {
    /// CNPs the port sent as a notification point (it received CE-marked packets).
    CnpSent,
    /// CNPs the port received and acted on as a reaction point.
    CnpHandled,
    /// RoCE packets the port received with ECN CE set.
    EcnMarkedReceived,
    /// Packets the port received, as responder, with a PSN past the one it expected.
    OutOfSequence,
    /// PSN sequence error NAKs the port received as requester: each makes it go back and send again.
    SeqErrNaksReceived,
    /// Times the port, as requester, waited for an ACK in vain and sent again.
    LocalAckTimeouts,
    /// Packets the port sent again.
    RetransmittedPackets,
    /// PFC pause frames the port received for a priority (or for all of them, where a driver has one count).
    PauseFramesRx,
    /// PFC pause frames the port sent for a priority.
    PauseFramesTx,
    /// How long the port was paused by its peer on a priority, in microseconds.
    PauseDurationRx,
    /// How long the port paused its peer on a priority, in microseconds.
    PauseDurationTx,
    /// Packets the port dropped on receipt (no buffer, no descriptor, policy).
    RxDiscards,
    /// Packets the port dropped instead of sending.
    TxDiscards,
}

impl Meaning {
    /// Every meaning, in the order tables show them.
    pub const ALL: [Meaning; 13] = [
        Meaning::CnpSent,
        Meaning::CnpHandled,
        Meaning::EcnMarkedReceived,
        Meaning::OutOfSequence,
        Meaning::SeqErrNaksReceived,
        Meaning::LocalAckTimeouts,
        Meaning::RetransmittedPackets,
        Meaning::PauseFramesRx,
        Meaning::PauseFramesTx,
        Meaning::PauseDurationRx,
        Meaning::PauseDurationTx,
        Meaning::RxDiscards,
        Meaning::TxDiscards,
    ];

    /// The name in JSON and the tables.
    pub fn key(self) -> &'static str {
        match self {
            Meaning::CnpSent => "cnp_sent",
            Meaning::CnpHandled => "cnp_handled",
            Meaning::EcnMarkedReceived => "ecn_marked_received",
            Meaning::OutOfSequence => "out_of_sequence",
            Meaning::SeqErrNaksReceived => "seq_err_naks_received",
            Meaning::LocalAckTimeouts => "local_ack_timeouts",
            Meaning::RetransmittedPackets => "retransmitted_packets",
            Meaning::PauseFramesRx => "pause_frames_rx",
            Meaning::PauseFramesTx => "pause_frames_tx",
            Meaning::PauseDurationRx => "pause_duration_rx_us",
            Meaning::PauseDurationTx => "pause_duration_tx_us",
            Meaning::RxDiscards => "rx_discards",
            Meaning::TxDiscards => "tx_discards",
        }
    }

    /// A few words for people, as the report and `stats` print it ("CNPs sent").
    pub fn words(self) -> &'static str {
        match self {
            Meaning::CnpSent => "CNPs sent",
            Meaning::CnpHandled => "CNPs handled",
            Meaning::EcnMarkedReceived => "ECN-marked packets received",
            Meaning::OutOfSequence => "packets out of sequence",
            Meaning::SeqErrNaksReceived => "sequence-error NAKs received",
            Meaning::LocalAckTimeouts => "local ACK timeouts",
            Meaning::RetransmittedPackets => "packets retransmitted",
            Meaning::PauseFramesRx => "pause frames received",
            Meaning::PauseFramesTx => "pause frames sent",
            Meaning::PauseDurationRx => "time paused by the peer (µs)",
            Meaning::PauseDurationTx => "time pausing the peer (µs)",
            Meaning::RxDiscards => "packets discarded on receipt",
            Meaning::TxDiscards => "packets discarded instead of sent",
        }
    }

    /// Whether drivers count it per priority (the pause counters).
    pub fn per_priority(self) -> bool {
        matches!(
            self,
            Meaning::PauseFramesRx
                | Meaning::PauseFramesTx
                | Meaning::PauseDurationRx
                | Meaning::PauseDurationTx
        )
    }
}

/// Where a counter is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    /// `class/infiniband/DEV/ports/N/hw_counters/NAME`, the RDMA driver's.
    HwCounters,
    /// `ethtool -S NETDEV`, the Ethernet driver's, of the port's netdev.
    Ethtool,
}

/// How a vendor counts one meaning: which raw names, where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// The vendor.
    pub vendor: Vendor,
    /// What is counted.
    pub meaning: Meaning,
    /// Where.
    pub place: Place,
    /// The names, the current driver's first and older or out-of-tree drivers' after: the first one a device
    /// has is its counter (unless [`Source::sum`]). `{p}` stands for the priority in per-priority names.
    pub names: &'static [&'static str],
    /// The names are parts of one count to add up (irdma counts IPv4 and IPv6 discards apart).
    pub sum: bool,
    /// One count for every priority together (ionic's `frames_rx_pripause`), not one per priority.
    pub all_priorities: bool,
    /// The pause frames counted are XOFF only (ice says so in its names); others count every pause frame.
    pub xoff_only: bool,
}

impl Source {
    /// The raw names for `priority` (`{p}` replaced; names without it are as they are).
    pub fn names_for(&self, priority: Option<u8>) -> Vec<String> {
        self.names
            .iter()
            .map(|n| match priority {
                Some(p) => n.replace("{p}", &p.to_string()),
                None => (*n).to_string(),
            })
            .collect()
    }

    /// The priorities this source has a count for: each of 0–7 for a per-priority one, else none (`None`).
    pub fn priorities(&self) -> Vec<Option<u8>> {
        if self.meaning.per_priority() && !self.all_priorities {
            (0..8).map(Some).collect()
        } else {
            vec![None]
        }
    }
}

/// How `vendor` counts `meaning`; `None` when its drivers do not count it at all.
pub fn source(vendor: Vendor, meaning: Meaning) -> Option<&'static Source> {
    table::SOURCES
        .iter()
        .find(|s| s.vendor == vendor && s.meaning == meaning)
}

/// Whether an ethtool statistic of this name stands for a meaning of any vendor: the tracer keeps these of
/// an RDMA port's netdev it does not capture, and leaves out the hundreds of per-queue statistics.
pub fn is_known_ethtool_name(name: &str) -> bool {
    table::SOURCES
        .iter()
        .filter(|s| s.place == Place::Ethtool)
        .any(|s| {
            s.priorities()
                .into_iter()
                .any(|p| s.names_for(p).iter().any(|n| n == name))
        })
}

/// Whether a meaning of a port is counted, and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Its counter was sampled.
    Counted,
    /// The vendor's drivers do not count it: not 0, unknown.
    NotCounted,
    /// The vendor counts it, but no sample holds its counter (an older or newer driver, firmware without it,
    /// or the ethtool statistics of the port's netdev were not read).
    NotRecorded,
    /// The device's vendor is not known, so neither are its counters' meanings.
    UnknownVendor,
}

/// What a port can read, by meaning and priority: the meanings whose names `has` finds at their place.
/// `roce-tracer list` asks it of the counters in sysfs and the ethtool statistics.
pub fn readable(vendor: Vendor, has: impl Fn(Place, &str) -> bool) -> Vec<(Meaning, Option<u8>)> {
    let mut out = Vec::new();
    for m in Meaning::ALL {
        let Some(s) = source(vendor, m) else { continue };
        for p in s.priorities() {
            if s.names_for(p).iter().any(|n| has(s.place, n)) {
                out.push((m, p));
            }
        }
    }
    out
}

/// Meanings a vendor has no counter for, for the "not counted by" notes.
pub fn not_counted(vendor: Vendor) -> Vec<Meaning> {
    Meaning::ALL
        .into_iter()
        .filter(|m| source(vendor, *m).is_none())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_vendor_counts_cnps_both_ways_and_the_table_is_consistent() {
        for v in Vendor::ALL {
            for m in [
                Meaning::CnpSent,
                Meaning::CnpHandled,
                Meaning::EcnMarkedReceived,
            ] {
                assert!(source(v, m).is_some(), "{} lacks {}", v.name(), m.key());
            }
        }
        for s in table::SOURCES {
            assert!(!s.names.is_empty(), "{s:?}");
            let templated = s.names.iter().any(|n| n.contains("{p}"));
            assert_eq!(
                templated,
                s.meaning.per_priority() && !s.all_priorities,
                "per-priority names carry {{p}}: {s:?}"
            );
            let twice = table::SOURCES
                .iter()
                .filter(|o| o.vendor == s.vendor && o.meaning == s.meaning)
                .count();
            assert_eq!(twice, 1, "one source per vendor and meaning: {s:?}");
        }
    }

    #[test]
    fn vendors_are_told_by_driver_device_name_or_counter_names() {
        assert_eq!(Vendor::of_driver("mlx5_core"), Some(Vendor::Mlx5));
        assert_eq!(Vendor::of_driver("bnxt_en"), Some(Vendor::BnxtRe));
        assert_eq!(Vendor::of_driver("ice"), Some(Vendor::Irdma));
        assert_eq!(Vendor::of_driver("ionic"), Some(Vendor::Ionic));
        assert_eq!(Vendor::of_driver("e1000e"), None);
        assert_eq!(Vendor::of_device_name("bnxt_re3"), Some(Vendor::BnxtRe));
        assert_eq!(Vendor::of_device_name("rocep59s0f0"), None);
        assert_eq!(
            Vendor::of_counter_names(["cnpSent", "RxECNMrkd", "ip4InDiscards"]),
            Some(Vendor::Irdma)
        );
        assert_eq!(
            Vendor::of_counter_names(["tx_rdma_cnp_pkts", "rx_rdma_ecn_pkts"]),
            Some(Vendor::Ionic)
        );
        assert_eq!(
            Vendor::of_counter_names(["tx_cnp_pkts", "oos_drop_count", "to_retransmits"]),
            Some(Vendor::BnxtRe)
        );
        assert_eq!(Vendor::of_counter_names(["lifespan"]), None);
    }

    #[test]
    fn ethtool_names_of_every_vendor_are_known_and_others_are_not() {
        for n in [
            "rx_prio3_pause",
            "tx_prio7_pause_duration",
            "rx_pfc_ena_frames_pri3",
            "tx_priority_3_xoff.nic",
            "frames_tx_pripause",
            "rx_pripause_2_1us_count",
            "rx_discards_phy",
        ] {
            assert!(is_known_ethtool_name(n), "{n}");
        }
        for n in ["rx_queue_3_packets", "rx_prio3_bytes", "np_cnp_sent"] {
            assert!(!is_known_ethtool_name(n), "{n}");
        }
    }

    #[test]
    fn what_a_port_can_read() {
        let hw = ["np_cnp_sent", "rp_cnp_handled", "out_of_sequence"];
        let eth = ["rx_prio3_pause", "tx_prio3_pause"];
        let r = readable(Vendor::Mlx5, |place, n| match place {
            Place::HwCounters => hw.contains(&n),
            Place::Ethtool => eth.contains(&n),
        });
        assert_eq!(
            r,
            [
                (Meaning::CnpSent, None),
                (Meaning::CnpHandled, None),
                (Meaning::OutOfSequence, None),
                (Meaning::PauseFramesRx, Some(3)),
                (Meaning::PauseFramesTx, Some(3)),
            ]
        );
        assert!(not_counted(Vendor::Irdma).contains(&Meaning::PauseDurationRx));
        assert!(not_counted(Vendor::Mlx5).contains(&Meaning::RetransmittedPackets));
    }
}
