//! The `KNOB` block each capture file starts with: the knobs a `roce-tracer` on the capturing host would have
//! recorded, so that the analyzer reads a sample's hosts as it would read a real capture's.
//!
//! Written per file, since one capturing host's tracer records only the NICs it sees: for each tap of the file
//! that mirrors a host's link, that host's `roce_rp/` and `roce_np/` knobs under the tap's interface name, as
//! the tracer keys a NIC's files by its interface. A tap between two switches is a mirror port with no knobs
//! (of two hosts linked directly, `a`'s NIC is the one captured). No record when no tap of the file has a
//! host, as the tracer writes no block when no interface has knobs. The hosts' `rp`/`np` switches act on
//! every priority, so they are written as all eight `enable/N` files of each side; the host's address goes
//! in `addrs`, as a tracer records its GIDs' addresses, so that a reader can tell whose knobs they are.

use std::collections::BTreeMap;

use roce_capture::blocks::VERSION;
use roce_capture::blocks::records::Knobs;

use super::addr::host_ip;
use crate::sim::scenario::Scenario;

/// The record for capture file `file` of `sc`, or `None` when none of its taps sees a host.
pub(super) fn knob_record(sc: &Scenario, file: usize) -> Option<Knobs> {
    let mut knobs = BTreeMap::new();
    let mut captured = Vec::new();
    let mut addrs = BTreeMap::new();
    for tap in sc.taps.iter().filter(|t| t.file == file) {
        captured.push(tap.name.clone());
        let link = &sc.links[tap.link];
        let Some((h, host)) = [link.a, link.b]
            .into_iter()
            .find_map(|n| Some((n, sc.hosts.get(n)?)))
        else {
            continue;
        };
        let ip = std::net::Ipv4Addr::from(host_ip(h));
        addrs.insert(tap.name.clone(), vec![ip.to_string()]);
        let mut put = |side: &str, name: &str, value: u64| {
            knobs.insert(format!("{}/{side}/{name}", tap.name), value.to_string());
        };
        for (name, value) in sc.knobs.sysfs() {
            put("roce_rp", name, u64::from(value));
        }
        put(
            "roce_np",
            "min_time_between_cnps",
            host.min_time_between_cnps_ns / 1_000,
        );
        put("roce_np", "cnp_dscp", u64::from(host.cnp_dscp));
        put("roce_np", "cnp_802p_prio", u64::from(host.cnp_prio));
        for prio in 0..8 {
            put("roce_rp", &format!("enable/{prio}"), u64::from(host.rp));
            put("roce_np", &format!("enable/{prio}"), u64::from(host.np));
        }
    }
    (!knobs.is_empty()).then(|| Knobs {
        version: VERSION,
        ts_ns: sc.files.get(file).map_or(0, |f| f.local_ns(0)),
        knobs,
        captured,
        addrs,
        ..Knobs::default()
    })
}
