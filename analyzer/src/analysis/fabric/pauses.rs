//! Which hosts each PFC pause stopped, as far as a capture can tell.
//!
//! A PFC frame carries its sender's MAC and the priorities it pauses, never whom it is for: it goes to the
//! other end of the link it was sent on, and no further. So a pause stops the traffic that crosses that link
//! towards its sender, and two cases can be tied to hosts:
//!
//! - a pause from a host's own MAC (the MAC its RoCE frames came from, and only its address) stops the
//!   traffic to that host: its NIC told its switch to hold it;
//! - a pause seen on a host's own link from any other MAC (the switch port at the other end) stops that
//!   host's sending.
//!
//! A host's own link is a tap where every RoCE frame came from that host or went to it, and to no other
//! address in common: a host mirrored at its switch port, or captured on the host. A pause from a MAC that
//! is no host's, at a tap that is no host's link, is a switch pausing a switch: it stops whatever crosses
//! that link in one direction, and without the topology a capture cannot say which pairs that is. Those
//! are listed, not guessed at.
//!
//! Times are unions: pauses of several priorities or sources at one tap that overlap count once. Taps may
//! run on different clocks (captures of several hosts), so times from different taps are never added: a
//! pair's time is the most any one tap shows of it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use roce_core::passes::StatsReport;
use roce_core::passes::pfc::{PauseInterval, PfcRow};

use super::{HostLink, UnplacedPause};

/// Where every pause interval stops traffic.
#[derive(Debug)]
pub(super) struct Placed<'a> {
    /// Tap → the host whose own link it is.
    links: BTreeMap<u32, IpAddr>,
    /// Tap → its name.
    taps: BTreeMap<u32, &'a str>,
    /// MAC → the host whose RoCE frames carried it.
    owner: BTreeMap<&'a str, IpAddr>,
    /// Host → tap → the pauses that stopped its sending (the other end of its link paused it).
    stop_sending: BTreeMap<IpAddr, BTreeMap<u32, Vec<&'a PauseInterval>>>,
    /// Host → tap → the pauses its own MAC sent (they stop the traffic to it).
    stop_receiving: BTreeMap<IpAddr, BTreeMap<u32, Vec<&'a PauseInterval>>>,
    unplaced: Vec<&'a PauseInterval>,
    pfc: &'a [PfcRow],
}

impl<'a> Placed<'a> {
    pub(super) fn new(
        stats: &'a StatsReport,
        intervals: &'a [PauseInterval],
        hosts: &'a [(String, IpAddr)],
    ) -> Self {
        let links = host_links(stats);
        let owner: BTreeMap<&str, IpAddr> = hosts.iter().map(|(m, ip)| (m.as_str(), *ip)).collect();
        let mut placed = Placed {
            taps: stats
                .capture
                .interfaces
                .iter()
                .map(|i| (i.id, i.tap.as_str()))
                .collect(),
            links,
            owner,
            stop_sending: BTreeMap::new(),
            stop_receiving: BTreeMap::new(),
            unplaced: Vec::new(),
            pfc: &stats.pfc,
        };
        for i in intervals {
            if let Some(&host) = placed.owner.get(i.src_mac.as_str()) {
                placed
                    .stop_receiving
                    .entry(host)
                    .or_default()
                    .entry(i.iface)
                    .or_default()
                    .push(i);
            } else if let Some(&host) = placed.links.get(&i.iface) {
                placed
                    .stop_sending
                    .entry(host)
                    .or_default()
                    .entry(i.iface)
                    .or_default()
                    .push(i);
            } else {
                placed.unplaced.push(i);
            }
        }
        placed
    }

    fn has_link(&self, host: IpAddr) -> bool {
        self.links.values().any(|&h| h == host)
    }

    /// The MACs that carried `host`'s address alone, joined by `,`.
    pub(super) fn mac_of(&self, host: IpAddr) -> Option<String> {
        let macs: Vec<&str> = self
            .owner
            .iter()
            .filter(|&(_, &h)| h == host)
            .map(|(m, _)| *m)
            .collect();
        (!macs.is_empty()).then(|| macs.join(","))
    }

    /// Distinct pauses `host`'s MACs started, each (MAC, kind, priority) at the tap that saw most of them.
    /// A PFC frame never leaves its link, so without the host's link among the taps (and no pause from it
    /// seen anyway), or without its MAC, the capture cannot tell.
    pub(super) fn pauses_sent(&self, host: IpAddr) -> Option<u64> {
        let mut most: BTreeMap<(&str, &str, Option<u8>), u64> = BTreeMap::new();
        for r in self.pfc {
            if self.owner.get(r.src_mac.as_str()) == Some(&host) {
                let n = most.entry((&r.src_mac, r.kind, r.priority)).or_default();
                *n = (*n).max(r.pauses);
            }
        }
        let sent: u64 = most.values().sum();
        let known = self.mac_of(host).is_some() && (self.has_link(host) || sent > 0);
        known.then_some(sent)
    }

    /// The time the other end of `host`'s link paused it on `priorities`; null without its link.
    pub(super) fn host_paused_ns(
        &self,
        host: IpAddr,
        priorities: &BTreeSet<Option<u8>>,
    ) -> Option<u64> {
        if !self.has_link(host) {
            return None;
        }
        let at = self.stop_sending.get(&host);
        Some(
            at.into_iter()
                .flat_map(|taps| taps.values())
                .map(|ivs| union_ns(ivs.iter().copied(), priorities))
                .max()
                .unwrap_or(0),
        )
    }

    /// The time PFC stopped `src`'s traffic to `dst` at the pair's ends: `src` paused by the other end of its
    /// link, or `dst` pausing its own. Null unless both ends' links were tapped (a pause at an end not
    /// tapped is not in the capture), or when the capture holds pauses on the pair's priorities that it
    /// cannot place (they may have stopped it between the switches).
    pub(super) fn pair_paused_ns(
        &self,
        src: IpAddr,
        dst: IpAddr,
        priorities: &BTreeSet<Option<u8>>,
    ) -> Option<u64> {
        if !self.has_link(src) || !self.has_link(dst) {
            return None;
        }
        if self.unplaced.iter().any(|i| stops(i.priority, priorities)) {
            return None;
        }
        let mut by_tap: BTreeMap<u32, Vec<&PauseInterval>> = BTreeMap::new();
        for taps in [self.stop_sending.get(&src), self.stop_receiving.get(&dst)]
            .into_iter()
            .flatten()
        {
            for (&tap, ivs) in taps {
                by_tap.entry(tap).or_default().extend(ivs.iter().copied());
            }
        }
        Some(
            by_tap
                .values()
                .map(|ivs| union_ns(ivs.iter().copied(), priorities))
                .max()
                .unwrap_or(0),
        )
    }

    /// The taps taken for hosts' links, by tap.
    pub(super) fn links(&self) -> Vec<HostLink> {
        self.links
            .iter()
            .map(|(tap, &host)| HostLink {
                tap: self.tap_name(*tap),
                host,
            })
            .collect()
    }

    /// The pauses no host can be tied to, per tap, MAC and priority.
    pub(super) fn unplaced(&self) -> Vec<UnplacedPause> {
        let mut by: BTreeMap<(u32, &str, Option<u8>), (u64, u64)> = BTreeMap::new();
        for i in &self.unplaced {
            let e = by.entry((i.iface, &i.src_mac, i.priority)).or_default();
            e.0 += 1;
            e.1 += i.end_ns.saturating_sub(i.start_ns);
        }
        by.into_iter()
            .map(
                |((tap, mac, priority), (pauses, paused_ns))| UnplacedPause {
                    tap: self.tap_name(tap),
                    src_mac: mac.to_owned(),
                    priority,
                    pauses,
                    paused_ns,
                },
            )
            .collect()
    }

    fn tap_name(&self, tap: u32) -> String {
        self.taps
            .get(&tap)
            .map_or_else(String::new, |t| (*t).to_owned())
    }
}

/// Tap → host for every tap that sits on one host's own link: the host is on every RoCE frame the tap saw
/// (data, acknowledgement or CNP), and every flow and CNP stream of the host that any tap saw passed this
/// one, and no other host is both. The second test keeps a switch's uplink that carries only traffic to one
/// host from passing for that host's link, as long as some of the host's traffic bypasses it; a tap that saw
/// one pair's exchange and nothing else has both ends and is nobody's.
fn host_links(stats: &StatsReport) -> BTreeMap<u32, IpAddr> {
    // (CNP?, src, dst, QP): a flow and a CNP stream of the same numbers are different streams.
    type Stream = (bool, IpAddr, IpAddr, u32);
    let streams: Vec<(u32, Stream)> = stats
        .flows
        .iter()
        .map(|f| (f.iface, (false, f.src, f.dst, f.dest_qp)))
        .chain(
            stats
                .cnps
                .iter()
                .map(|c| (c.iface, (true, c.src, c.dst, c.dest_qp))),
        )
        .collect();
    let mut common: BTreeMap<u32, Vec<IpAddr>> = BTreeMap::new();
    let mut at: BTreeMap<u32, BTreeSet<Stream>> = BTreeMap::new();
    let mut of_host: BTreeMap<IpAddr, BTreeSet<Stream>> = BTreeMap::new();
    for &(tap, s @ (_, src, dst, _)) in &streams {
        common
            .entry(tap)
            .and_modify(|c| c.retain(|a| *a == src || *a == dst))
            .or_insert_with(|| {
                let mut c = vec![src, dst];
                c.dedup();
                c
            });
        at.entry(tap).or_default().insert(s);
        of_host.entry(src).or_default().insert(s);
        of_host.entry(dst).or_default().insert(s);
    }
    common
        .into_iter()
        .filter_map(|(tap, c)| {
            let seen = &at[&tap];
            let whole: Vec<IpAddr> = c
                .into_iter()
                .filter(|h| of_host[h].is_subset(seen))
                .collect();
            match whole[..] {
                [host] => Some((tap, host)),
                _ => None,
            }
        })
        .collect()
}

/// Whether a pause of `priority` (null: an 802.3x PAUSE, every priority) stops traffic on `priorities`.
fn stops(priority: Option<u8>, priorities: &BTreeSet<Option<u8>>) -> bool {
    priority.is_none() || priorities.contains(&priority)
}

/// The time covered by the pauses that stop `priorities`, overlaps counted once.
fn union_ns<'a>(
    intervals: impl Iterator<Item = &'a PauseInterval>,
    priorities: &BTreeSet<Option<u8>>,
) -> u64 {
    let mut spans: Vec<(u64, u64)> = intervals
        .filter(|i| stops(i.priority, priorities))
        .map(|i| (i.start_ns, i.end_ns.max(i.start_ns)))
        .collect();
    spans.sort_unstable();
    let mut total = 0u64;
    let mut open: Option<(u64, u64)> = None;
    for (a, b) in spans {
        open = match open {
            Some((s, e)) if a <= e => Some((s, e.max(b))),
            Some((s, e)) => {
                total += e - s;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    total + open.map_or(0, |(s, e)| e - s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(priority: Option<u8>, start_ns: u64, end_ns: u64) -> PauseInterval {
        PauseInterval {
            iface: 0,
            src_mac: "02:00:00:01:00:01".into(),
            priority,
            start_ns,
            end_ns,
        }
    }

    #[test]
    fn overlapping_pauses_count_once_and_other_priorities_not_at_all() {
        let prio3: BTreeSet<Option<u8>> = [Some(3)].into();
        let ivs = [
            iv(Some(3), 100, 200),
            iv(Some(3), 150, 300),
            iv(Some(5), 0, 1_000),
            iv(None, 250, 400),
            iv(Some(3), 500, 510),
        ];
        assert_eq!(union_ns(ivs.iter(), &prio3), 310);
        assert_eq!(union_ns(ivs[2..3].iter(), &prio3), 0);
        assert_eq!(union_ns(std::iter::empty(), &prio3), 0);
    }
}
