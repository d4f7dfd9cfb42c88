//! The NIC's counters beside the capture's packets: what each port counted against what the capture holds
//! of its host over the same stretch of time, and from that a verdict on the capture itself.
//!
//! A NIC counts every CNP it sends; a mirror port or a tap that drops frames, or sees one path of several,
//! holds fewer. Comparing the two is the one way to know how complete a capture is without a second one. The
//! comparison is only as good as its pairing: the packets are those of the port's host (its RoCE addresses,
//! or its MAC for the pause frames it sends), counted once (at the tap that saw most of them), between the
//! first and the last counter sample (a counter sampled a second after the capture began has not counted
//! that second). Meanings whose packets the capture cannot single out (pauses the port received, discards,
//! timeouts) are shown, not compared.

use std::net::IpAddr;

use serde::Serialize;

use super::movement::Movement;
use super::ports::{MeaningRow, NicPort, PortInfo};
use super::{Meaning, Status, Vendor, source};

/// Below this share of what the NIC counted, the capture is short of the port's packets ([`NicCheck::low`]).
pub const LOW_SHARE: f64 = 0.9;
/// Fewer events than this are too few for a share to say anything (one CNP of two is not "50 %").
pub const MIN_COUNTED: u64 = 10;

/// A kind of packet event of a host that a NIC counter has a twin of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostEvent {
    /// A CNP the host sent.
    CnpFrom,
    /// A CNP sent to the host.
    CnpTo,
    /// A CE-marked RoCE packet to the host.
    CeTo,
    /// A PSN jump in a flow into the host.
    GapInto,
    /// A PSN sequence error NAK to the host.
    SeqNakTo,
    /// A packet the host sent again.
    RetransmitFrom,
}

/// Packets counted over a stretch of time from the capture's binned counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Windowed {
    /// The estimate: whole bins inside the stretch, and the bins its ends cut through in proportion.
    pub count: u64,
    /// Packets in the bins the stretch's ends cut through: `count` may be off by up to this much.
    pub edge: u64,
}

/// What the capture's packets say of a host or a MAC: the streaming pass that saw them answers.
pub trait PacketSide {
    /// Events of `kind` at a host known by `addrs`, in `[from_ns, to_ns]`, each packet counted once.
    fn host_events(&self, kind: HostEvent, addrs: &[IpAddr], from_ns: u64, to_ns: u64) -> Windowed;
    /// PFC frames from `mac` naming `priority` (any priority when `None`), XOFF only when `xoff_only`.
    fn pause_frames(
        &self,
        mac: [u8; 6],
        priority: Option<u8>,
        xoff_only: bool,
        from_ns: u64,
        to_ns: u64,
    ) -> Windowed;
    /// Whether the capture holds any RoCE packet from or to a host known by `addrs`.
    fn host_seen(&self, addrs: &[IpAddr]) -> bool;
}

/// How a counter and its packets relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// The same events: a complete capture holds as many as the NIC counted.
    Same,
    /// The same packets, but a switch past the tap may have marked them: fewer in the capture is no loss.
    MarkedPastTap,
    /// Related events in other units (a PSN jump may be many packets out of sequence): shown side by side.
    Related,
}

/// What the packets of one meaning are, and how they relate to its counter.
fn packets_of(meaning: Meaning) -> Option<(Relation, Option<HostEvent>, &'static str)> {
    Some(match meaning {
        Meaning::CnpSent => (
            Relation::Same,
            Some(HostEvent::CnpFrom),
            "CNPs from its host",
        ),
        Meaning::CnpHandled => (Relation::Same, Some(HostEvent::CnpTo), "CNPs to its host"),
        Meaning::EcnMarkedReceived => (
            Relation::MarkedPastTap,
            Some(HostEvent::CeTo),
            "CE-marked packets to its host",
        ),
        Meaning::OutOfSequence => (
            Relation::Related,
            Some(HostEvent::GapInto),
            "PSN jumps in flows into its host",
        ),
        Meaning::SeqErrNaksReceived => (
            Relation::Same,
            Some(HostEvent::SeqNakTo),
            "sequence-error NAKs to its host",
        ),
        Meaning::RetransmittedPackets => (
            Relation::Same,
            Some(HostEvent::RetransmitFrom),
            "packets its host sent again",
        ),
        Meaning::PauseFramesTx => (Relation::Same, None, "PFC frames from its MAC"),
        _ => return None,
    })
}

/// A meaning's counter beside its packets.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Compared {
    /// The packets counted (`CNPs from its host`).
    pub with: String,
    /// How they relate to the counter.
    pub relation: Relation,
    /// The packets in the capture over the counter's samples, each counted once.
    pub captured: Windowed,
    /// `captured.count` over what the NIC counted; `None` for related events, or when it counted none.
    pub fraction: Option<f64>,
}

/// One meaning of one port, with its packets where the capture has them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckedRow {
    /// The counter.
    #[serde(flatten)]
    pub row: MeaningRow,
    /// Its packets; `None` when the meaning has none the capture can single out, or the port's host is
    /// unknown.
    pub compared: Option<Compared>,
}

/// One port: its counters by meaning, beside the packets, and the verdict on the capture they give.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NicCheck {
    /// Which port (its host named only when the capture has several).
    #[serde(flatten)]
    pub info: PortInfo,
    /// Whether the capture holds any packet of its host.
    pub host_in_capture: bool,
    /// One sentence on the capture's completeness, from the first meaning that could tell.
    pub verdict: String,
    /// Every meaning.
    pub meanings: Vec<CheckedRow>,
}

impl NicCheck {
    /// The rows where the capture holds clearly less than the NIC counted of the same events: at least
    /// [`MIN_COUNTED`] counted, and below [`LOW_SHARE`] of them captured.
    pub fn low(&self) -> impl Iterator<Item = &CheckedRow> {
        self.meanings.iter().filter(|r| {
            let counted = r.row.movement.map_or(0, |m| m.delta);
            r.compared.as_ref().is_some_and(|c| {
                c.relation == Relation::Same
                    && counted >= MIN_COUNTED
                    && c.fraction.is_some_and(|f| f < LOW_SHARE)
            })
        })
    }

    /// `mlx5_0` (`mlx5_0:2` for a second port, `node7/mlx5_0` when the capture has several hosts).
    pub fn name(&self) -> String {
        let i = &self.info;
        let dev = if i.port == 1 {
            i.device.clone()
        } else {
            format!("{}:{}", i.device, i.port)
        };
        if i.host.is_empty() {
            dev
        } else {
            format!("{}/{dev}", i.host)
        }
    }
}

/// Parses `aa:bb:cc:dd:ee:ff`.
fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = text.trim().split(':');
    for b in &mut out {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Every port beside the packets. `several_hosts` names ports by host too.
pub fn compare(ports: &[NicPort], packets: &dyn PacketSide) -> Vec<NicCheck> {
    let several_hosts = ports
        .iter()
        .map(|p| p.info.host.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        > 1;
    ports
        .iter()
        .map(|p| {
            let seen = !p.info.addrs.is_empty() && packets.host_seen(&p.info.addrs);
            let meanings: Vec<CheckedRow> = p
                .meanings
                .iter()
                .map(|r| CheckedRow {
                    compared: compared(&p.info, r, packets),
                    row: r.clone(),
                })
                .collect();
            let mut info = p.info.clone();
            if !several_hosts {
                info.host.clear();
            }
            let mut c = NicCheck {
                info,
                host_in_capture: seen,
                verdict: String::new(),
                meanings,
            };
            c.verdict = verdict(&c);
            c
        })
        .collect()
}

fn compared(p: &PortInfo, r: &MeaningRow, packets: &dyn PacketSide) -> Option<Compared> {
    let m = r
        .movement
        .filter(|m| m.samples > 1 && r.status == Status::Counted)?;
    let (relation, event, with) = packets_of(r.meaning)?;
    let captured = match event {
        Some(e) if !p.addrs.is_empty() => packets.host_events(e, &p.addrs, m.first_ns, m.last_ns),
        Some(_) => return None,
        None => {
            let mac = parse_mac(p.mac.as_deref()?)?;
            let xoff_only = p
                .vendor
                .and_then(|v| source(v, r.meaning))
                .is_some_and(|s| s.xoff_only);
            packets.pause_frames(mac, r.priority, xoff_only, m.first_ns, m.last_ns)
        }
    };
    let with = match (event, r.priority) {
        (None, Some(prio)) => format!("{with} naming priority {prio}"),
        _ => with.to_string(),
    };
    Some(Compared {
        with,
        relation,
        captured,
        fraction: (relation != Relation::Related && m.delta > 0)
            .then(|| captured.count as f64 / m.delta as f64),
    })
}

/// What the port counted of a meaning, as the verdict and the findings say it (`CNPs mlx5_0 sent`).
pub fn phrase(meaning: Meaning, priority: Option<u8>, dev: &str) -> String {
    match (meaning, priority) {
        (Meaning::CnpSent, _) => format!("CNPs {dev} sent"),
        (Meaning::CnpHandled, _) => format!("CNPs {dev} handled"),
        (Meaning::EcnMarkedReceived, _) => format!("CE-marked packets {dev} received"),
        (Meaning::SeqErrNaksReceived, _) => format!("sequence-error NAKs {dev} received"),
        (Meaning::RetransmittedPackets, _) => format!("packets {dev} sent again"),
        (Meaning::PauseFramesTx, Some(p)) => format!("pause frames {dev} sent on priority {p}"),
        (m, _) => format!("{} of {dev}", m.words()),
    }
}

/// A share as the verdicts write it: `98.7 %`.
pub fn percent(f: f64) -> String {
    format!("{:.1} %", f * 100.0)
}

/// The sentence on the capture's completeness: from the first meaning of the same events that the NIC
/// counted, else why there is none.
fn verdict(c: &NicCheck) -> String {
    let dev = c.name();
    if c.info.vendor.is_none() {
        return format!(
            "{dev}: whose counters these are is not known ({}), so they are not read by meaning",
            c.info.vendor_from
        );
    }
    let sampled = c
        .meanings
        .iter()
        .filter_map(|r| r.row.movement)
        .map(|m| m.samples)
        .max()
        .unwrap_or(0);
    if sampled < 2 {
        return format!("{dev}: one counter sample only, so nothing it counted can be measured");
    }
    if c.info.addrs.is_empty() {
        return format!(
            "{dev}: the tracer did not record its addresses (an older tracer, or a port without RoCE GIDs), \
             so its counters cannot be set beside the packets"
        );
    }
    if !c.host_in_capture {
        let addrs: Vec<String> = c.info.addrs.iter().map(IpAddr::to_string).collect();
        return format!(
            "the capture holds no packet from or to {dev}'s host ({}): its counters describe traffic this capture \
             did not see",
            addrs.join(", ")
        );
    }
    let moved = c.meanings.iter().find_map(|r| {
        let cmp = r.compared.as_ref()?;
        let m = r.row.movement?;
        (cmp.relation != Relation::Related && m.delta > 0).then_some((r, cmp, m))
    });
    let Some((r, cmp, m)) = moved else {
        let seen: u64 = c
            .meanings
            .iter()
            .filter_map(|r| r.compared.as_ref())
            .filter(|c| c.relation != Relation::Related)
            .map(|c| c.captured.count)
            .sum();
        return if seen == 0 {
            format!(
                "{dev} counted no CNPs, NAKs, retransmissions or pauses while it was sampled, and the capture holds \
                 none of its host's either"
            )
        } else {
            format!(
                "{dev} counted no CNPs, NAKs, retransmissions or pauses while it was sampled, yet the capture holds \
                 {seen} of its host's: the counters may belong to another port, or were not read by this driver"
            )
        };
    };
    let what = phrase(r.row.meaning, r.row.priority, &dev);
    let counted = counted_text(&m);
    let share = cmp.fraction.unwrap_or(0.0);
    if share <= 1.0005 {
        format!(
            "the capture saw {} of the {what} ({} of {counted})",
            percent(share),
            cmp.captured.count
        )
    } else {
        format!(
            "the capture holds more of the {what} than it counted ({} against {counted}, {}): other ports share \
             its addresses, or the capture holds frames twice",
            cmp.captured.count,
            percent(share)
        )
    }
}

/// A counter's delta as a sentence says it: `at least` after a reset.
pub fn counted_text(m: &Movement) -> String {
    if m.at_least() {
        format!("at least {}", m.delta)
    } else {
        m.delta.to_string()
    }
}

/// One row of the `nic_counters` table: a meaning of a port, flat.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NicCounterRow {
    /// The host the tracer ran on (empty for one host).
    pub host: String,
    /// The RDMA device.
    pub device: String,
    /// Its port.
    pub port: u32,
    /// Whose names (`mlx5`, `bnxt_re`, `irdma`, `ionic`).
    pub vendor: Option<Vendor>,
    /// The port's netdev.
    pub netdev: Option<String>,
    /// The meaning (`cnp_sent`, ...).
    pub meaning: Meaning,
    /// The priority of a per-priority counter.
    pub priority: Option<u8>,
    /// `counted`, `not_counted` (the vendor has no such counter), `not_recorded`.
    pub status: Status,
    /// The raw counters behind it.
    pub counters: Vec<String>,
    /// The first sample's value.
    pub first: Option<u64>,
    /// The last sample's value.
    pub last: Option<u64>,
    /// How much it counted, wraps included.
    pub delta: Option<u64>,
    /// Whether `delta` is a lower bound (the counter was reset).
    pub at_least: Option<bool>,
    /// 32-bit wraps between samples.
    pub wraps: Option<u32>,
    /// Samples that held it.
    pub samples: Option<u64>,
    /// The first sample's time.
    pub first_ns: Option<u64>,
    /// The last sample's time.
    pub last_ns: Option<u64>,
    /// The packets it was compared with.
    pub compared_with: Option<String>,
    /// Those packets in the capture between the samples.
    pub captured: Option<u64>,
    /// How far `captured` may be off (packets in the bins the samples' times cut through).
    pub captured_edge: Option<u64>,
    /// `captured` over `delta`.
    pub captured_fraction: Option<f64>,
}

/// Every port's meanings as table rows.
pub fn table_rows(checks: &[NicCheck]) -> Vec<NicCounterRow> {
    let mut out = Vec::new();
    for c in checks {
        for r in &c.meanings {
            let m = r.row.movement;
            let cmp = r.compared.as_ref();
            out.push(NicCounterRow {
                host: c.info.host.clone(),
                device: c.info.device.clone(),
                port: c.info.port,
                vendor: c.info.vendor,
                netdev: c.info.netdev.clone(),
                meaning: r.row.meaning,
                priority: r.row.priority,
                status: r.row.status,
                counters: r.row.counters.clone(),
                first: m.map(|m| m.first),
                last: m.map(|m| m.last),
                delta: m.map(|m| m.delta),
                at_least: m.map(|m| m.at_least()),
                wraps: m.map(|m| m.wraps),
                samples: m.map(|m| m.samples),
                first_ns: m.map(|m| m.first_ns),
                last_ns: m.map(|m| m.last_ns),
                compared_with: cmp.map(|c| c.with.clone()),
                captured: cmp.map(|c| c.captured.count),
                captured_edge: cmp.map(|c| c.captured.edge),
                captured_fraction: cmp.and_then(|c| c.fraction),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nic_counters::ports::MeaningRow;

    /// A host that sent `cnps` CNPs during the samples and has packets in the capture.
    struct Fake {
        cnps: u64,
        seen: bool,
    }

    impl PacketSide for Fake {
        fn host_events(&self, kind: HostEvent, _: &[IpAddr], _: u64, _: u64) -> Windowed {
            Windowed {
                count: if kind == HostEvent::CnpFrom {
                    self.cnps
                } else {
                    0
                },
                edge: 0,
            }
        }
        fn pause_frames(&self, _: [u8; 6], _: Option<u8>, _: bool, _: u64, _: u64) -> Windowed {
            Windowed::default()
        }
        fn host_seen(&self, _: &[IpAddr]) -> bool {
            self.seen
        }
    }

    fn port(sent: u64, addrs: Vec<IpAddr>) -> NicPort {
        NicPort {
            info: PortInfo {
                host: String::new(),
                device: "mlx5_0".into(),
                port: 1,
                vendor: Some(Vendor::Mlx5),
                vendor_from: "driver mlx5_core".into(),
                netdev: Some("eth2".into()),
                mac: Some("02:00:00:00:00:02".into()),
                addrs,
                samples: 2,
            },
            meanings: vec![MeaningRow {
                meaning: Meaning::CnpSent,
                priority: None,
                status: Status::Counted,
                counters: vec!["hw_counters/np_cnp_sent".into()],
                movement: super::super::movement::movement(&[(10, 100), (20, 100 + sent)]),
            }],
        }
    }

    #[test]
    fn the_verdict_says_what_share_the_capture_saw() {
        let a = [IpAddr::from([10, 0, 0, 2])];
        let c = &compare(
            &[port(1250, a.to_vec())],
            &Fake {
                cnps: 1234,
                seen: true,
            },
        )[0];
        assert_eq!(
            c.verdict,
            "the capture saw 98.7 % of the CNPs mlx5_0 sent (1234 of 1250)"
        );
        assert_eq!(c.low().count(), 0);
        let short = &compare(
            &[port(1250, a.to_vec())],
            &Fake {
                cnps: 500,
                seen: true,
            },
        )[0];
        assert!(short.verdict.contains("40.0 %"), "{}", short.verdict);
        assert_eq!(short.low().count(), 1);
        // Too few to judge: no low row, though the share is low.
        let few = &compare(
            &[port(4, a.to_vec())],
            &Fake {
                cnps: 1,
                seen: true,
            },
        )[0];
        assert_eq!(few.low().count(), 0);
        let more = &compare(
            &[port(100, a.to_vec())],
            &Fake {
                cnps: 120,
                seen: true,
            },
        )[0];
        assert!(
            more.verdict.contains("more of the CNPs"),
            "{}",
            more.verdict
        );
    }

    #[test]
    fn a_port_that_cannot_be_compared_says_why() {
        let none = &compare(
            &[port(50, Vec::new())],
            &Fake {
                cnps: 0,
                seen: true,
            },
        )[0];
        assert!(
            none.verdict.contains("did not record its addresses"),
            "{}",
            none.verdict
        );
        assert!(none.meanings[0].compared.is_none());
        let away = &compare(
            &[port(50, vec![IpAddr::from([10, 9, 9, 9])])],
            &Fake {
                cnps: 0,
                seen: false,
            },
        )[0];
        assert!(
            away.verdict
                .contains("no packet from or to mlx5_0's host (10.9.9.9)")
        );
        let rows = table_rows(std::slice::from_ref(away));
        assert_eq!((rows[0].delta, rows[0].captured), (Some(50), Some(0)));
    }

    /// A reset between samples makes the NIC's count a lower bound, and the verdict says so; with two
    /// hosts in the capture, ports are named by host.
    #[test]
    fn a_reset_counter_reads_at_least_and_hosts_name_their_ports() {
        let a = vec![IpAddr::from([10, 0, 0, 2])];
        let mut reset = port(0, a.clone());
        reset.meanings[0].movement =
            super::super::movement::movement(&[(10, 900), (15, 1000), (20, 40)]);
        let c = &compare(
            &[reset.clone()],
            &Fake {
                cnps: 140,
                seen: true,
            },
        )[0];
        assert_eq!(
            c.verdict,
            "the capture saw 100.0 % of the CNPs mlx5_0 sent (140 of at least 140)"
        );
        let mut other = port(10, vec![IpAddr::from([10, 0, 0, 3])]);
        other.info.host = "b".into();
        reset.info.host = "a".into();
        let two = compare(
            &[reset, other],
            &Fake {
                cnps: 10,
                seen: true,
            },
        );
        assert_eq!(
            (two[0].name(), two[1].name()),
            ("a/mlx5_0".into(), "b/mlx5_0".into())
        );
        assert!(
            two[1].verdict.contains("CNPs b/mlx5_0 sent"),
            "{}",
            two[1].verdict
        );
    }

    /// Pause frames are compared by the port's MAC and priority, XOFF only where the vendor counts only those.
    #[test]
    fn pause_frames_go_by_mac_priority_and_what_the_vendor_counts() {
        /// What each asking named: the port's MAC, the priority, whether XOFF alone.
        type Asked = Vec<([u8; 6], Option<u8>, bool)>;
        struct Pauses(std::cell::RefCell<Asked>);
        impl PacketSide for Pauses {
            fn host_events(&self, _: HostEvent, _: &[IpAddr], _: u64, _: u64) -> Windowed {
                Windowed::default()
            }
            fn pause_frames(
                &self,
                mac: [u8; 6],
                p: Option<u8>,
                xoff: bool,
                _: u64,
                _: u64,
            ) -> Windowed {
                self.0.borrow_mut().push((mac, p, xoff));
                Windowed { count: 6, edge: 0 }
            }
            fn host_seen(&self, _: &[IpAddr]) -> bool {
                true
            }
        }
        let mut p = port(0, vec![IpAddr::from([10, 0, 0, 3])]);
        p.info.vendor = Some(Vendor::Irdma);
        p.meanings = vec![MeaningRow {
            meaning: Meaning::PauseFramesTx,
            priority: Some(3),
            status: Status::Counted,
            counters: vec!["ethtool/ens3f0/tx_priority_3_xoff.nic".into()],
            movement: super::super::movement::movement(&[(10, 0), (20, 12)]),
        }];
        let seen = Pauses(Default::default());
        let c = &compare(&[p], &seen)[0];
        assert_eq!(
            seen.0.borrow().as_slice(),
            [([2, 0, 0, 0, 0, 2], Some(3), true)]
        );
        assert_eq!(
            c.verdict,
            "the capture saw 50.0 % of the pause frames mlx5_0 sent on priority 3 (6 of 12)"
        );
        assert_eq!(c.low().count(), 1);
    }

    #[test]
    fn macs_parse() {
        assert_eq!(parse_mac("02:00:0a:FF:00:01"), Some([2, 0, 10, 255, 0, 1]));
        assert_eq!(parse_mac("02:00:0a"), None);
        assert_eq!(parse_mac("02:00:0a:ff:00:01:07"), None);
    }
}
