//! Which IP address sits behind a MAC address, learned from RoCE frames, so that a PFC frame from a host (not a
//! switch port) can be tied to the host's flows. A MAC seen with several source IPs (a router) is ambiguous and
//! maps to nothing.

use std::net::IpAddr;

use rustc_hash::FxHashMap;

use super::brief::Brief;
use crate::decode::{Kind, mac_to_string};

/// Which MAC belongs to which IP, from RoCE frames: PFC frames carry only a MAC, and the report names a
/// pausing host by its address when it can.
#[derive(Debug)]
pub struct HostsPass {
    macs: FxHashMap<[u8; 6], Option<IpAddr>>,
    /// What `macs` says of a recent MAC, by the MAC's last byte: a frame that changes nothing (the address
    /// already known, or the MAC already ambiguous) is done without hashing, which is nearly every frame.
    recent: [Option<([u8; 6], Option<IpAddr>)>; 256],
}

impl Default for HostsPass {
    fn default() -> Self {
        HostsPass {
            macs: FxHashMap::default(),
            recent: [None; 256],
        }
    }
}

impl HostsPass {
    /// Learns the source MAC's address from a RoCE or CNP frame.
    pub fn frame(&mut self, f: &Brief) {
        if !matches!(f.kind, Kind::Roce | Kind::Cnp) {
            return;
        }
        let (Some(mac), Some(ip)) = (f.src_mac, f.ip) else {
            return;
        };
        let slot = &mut self.recent[usize::from(mac[5])];
        if let Some((m, known)) = *slot
            && m == mac
            && known.is_none_or(|a| a == ip.src)
        {
            return;
        }
        let e = self.macs.entry(mac).or_insert(Some(ip.src));
        if *e != Some(ip.src) {
            *e = None;
        }
        *slot = Some((mac, *e));
    }

    /// (MAC as text, IP) for every MAC that always carried one source IP.
    pub fn finish(self) -> Vec<(String, IpAddr)> {
        let mut v: Vec<(String, IpAddr)> = self
            .macs
            .into_iter()
            .filter_map(|(m, ip)| ip.map(|ip| (mac_to_string(&m), ip)))
            .collect();
        v.sort();
        v
    }
}
