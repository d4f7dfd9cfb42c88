//! Matching one packet's copies across taps, in a window of time.
//!
//! A switch leaves the addresses, the BTH, the payload and so the ICRC alone; it may rewrite ECN, TTL, the IP
//! checksum, VLAN tags and MACs. So a packet is known by (source, destination, destination QP, PSN, opcode,
//! payload length), and by its ICRC when the frame was captured whole. A PSN recurs only when the sender
//! retransmits (or after 2^24 packets of the flow), so copies are grouped within a window of time from the
//! first copy: memory holds the packets in flight between taps, never the capture.

use std::collections::VecDeque;
use std::net::IpAddr;

use roce_core::decode::{Frame, Kind};
use rustc_hash::FxHashMap;

/// How many taps one packet's group records; a copy at a further tap is counted and left out.
pub const MAX_COPIES: usize = 6;

/// What a switch does not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub src: u128,
    pub dst: u128,
    pub dest_qp: u32,
    pub psn: u32,
    pub opcode: u8,
    pub payload_len: u32,
    /// The ICRC, when the frame was captured whole.
    pub icrc: Option<u32>,
}

/// An address as one number, IPv4 in the low 32 bits.
pub fn ip_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

impl Key {
    /// Mixes every field into 64 bits (multiply-xorshift rounds): cheaper to hash and move than the key.
    #[inline]
    pub fn digest(&self) -> u64 {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut h = 0u64;
        for w in [
            self.src as u64,
            (self.src >> 64) as u64,
            self.dst as u64,
            (self.dst >> 64) as u64,
            ((self.dest_qp as u64) << 32) | self.psn as u64,
            ((self.opcode as u64) << 32) | self.payload_len as u64,
            self.icrc.map_or(1 << 32, |c| c as u64),
        ] {
            h = (h ^ w).wrapping_mul(K);
            h ^= h >> 29;
        }
        h
    }
}

/// One copy of a packet at one tap.
#[derive(Debug, Clone, Copy, Default)]
pub struct Copy {
    pub ts: u64,
    pub tap: u32,
    /// ECN as this tap saw it (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE).
    pub ecn: u8,
    /// VLAN PCP, 0xff untagged.
    pub pcp: u8,
    /// Times this tap saw the packet in the window (a retransmission within it, or a duplicate).
    pub seen: u8,
    pub len: u32,
    pub dst_mac: [u8; 6],
}

/// One packet's copies, in the order the merged stream delivered them.
#[derive(Debug, Clone)]
pub struct Group {
    pub key: Key,
    pub copies: [Copy; MAX_COPIES],
    pub n: u8,
}

impl Group {
    pub fn copies(&self) -> &[Copy] {
        &self.copies[..self.n as usize]
    }
}

/// Reads the key and the copy out of a RoCE frame (CNPs included: they cross switches too).
pub fn observe(f: &Frame<'_>) -> Option<(Key, Copy)> {
    if !matches!(f.kind, Kind::Roce | Kind::Cnp) {
        return None;
    }
    let ip = f.ip?;
    let roce = f.roce.as_ref()?;
    let bth = roce.packet.bth.as_ref()?;
    let whole = !f.truncated && roce.packet.stop.is_none();
    let key = Key {
        src: ip_bits(ip.src),
        dst: ip_bits(ip.dst),
        dest_qp: bth.dest_qp,
        psn: bth.psn,
        opcode: bth.opcode.0,
        payload_len: roce.packet.payload_len.unwrap_or(0) as u32,
        icrc: if whole { roce.packet.icrc } else { None },
    };
    let copy = Copy {
        ts: f.ts_ns,
        tap: f.iface,
        ecn: ip.ecn,
        pcp: f.pcp.unwrap_or(0xff),
        seen: 1,
        len: f.len,
        dst_mac: f.dst_mac.unwrap_or_default(),
    };
    Some((key, copy))
}

/// Groups copies within `window_ns` of a packet's first copy; hands out each group once its window has passed.
/// Groups live in a slab, so the hash map moves only an index, never a group.
#[derive(Debug)]
pub struct Matcher {
    window_ns: u64,
    /// A 64-bit digest of the key → slot; the slot's own key is checked, so two packets whose digests collide
    /// are never merged (the later one is then matched only by itself).
    open: FxHashMap<u64, u32>,
    slab: Vec<Group>,
    free: Vec<u32>,
    /// (first copy's stream time, slot), in stream order: the order groups close in.
    order: VecDeque<(u64, u32)>,
    /// Copies left out because a group already held MAX_COPIES taps.
    pub overflow: u64,
    /// Copies left out because another open packet's key had the same digest.
    pub collisions: u64,
    /// The most groups open at once: the memory the window costs.
    pub peak_open: usize,
}

impl Matcher {
    pub fn new(window_ns: u64) -> Self {
        Matcher {
            window_ns,
            open: FxHashMap::default(),
            slab: Vec::new(),
            free: Vec::new(),
            order: VecDeque::new(),
            overflow: 0,
            collisions: 0,
            peak_open: 0,
        }
    }

    /// Adds a copy seen at stream time `now` (its own timestamp), first closing every group whose window
    /// ended before it.
    #[inline]
    pub fn add(&mut self, key: Key, copy: Copy, mut closed: impl FnMut(&Group)) {
        self.close_before(copy.ts.saturating_sub(self.window_ns), &mut closed);
        let digest = key.digest();
        match self.open.entry(digest) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let g = &mut self.slab[*e.get() as usize];
                if g.key != key {
                    self.collisions += 1;
                    return;
                }
                if let Some(c) = g.copies[..g.n as usize]
                    .iter_mut()
                    .find(|c| c.tap == copy.tap)
                {
                    c.seen = c.seen.saturating_add(1);
                } else if (g.n as usize) < MAX_COPIES {
                    g.copies[g.n as usize] = copy;
                    g.n += 1;
                } else {
                    self.overflow += 1;
                }
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                let slot = match self.free.pop() {
                    Some(i) => {
                        let g = &mut self.slab[i as usize];
                        g.key = key;
                        g.copies[0] = copy;
                        g.n = 1;
                        i
                    }
                    None => {
                        let mut copies = [Copy::default(); MAX_COPIES];
                        copies[0] = copy;
                        self.slab.push(Group { key, copies, n: 1 });
                        (self.slab.len() - 1) as u32
                    }
                };
                e.insert(slot);
                self.order.push_back((copy.ts, slot));
                self.peak_open = self.peak_open.max(self.order.len());
            }
        }
    }

    /// Closes the groups whose first copy came before `t`.
    pub fn close_before(&mut self, t: u64, closed: &mut impl FnMut(&Group)) {
        while let Some(&(first, slot)) = self.order.front() {
            if first >= t {
                break;
            }
            self.order.pop_front();
            let g = &self.slab[slot as usize];
            self.open.remove(&g.key.digest());
            closed(g);
            self.free.push(slot);
        }
    }

    /// Closes every group.
    pub fn close_all(&mut self, closed: &mut impl FnMut(&Group)) {
        self.close_before(u64::MAX, closed);
    }
}
