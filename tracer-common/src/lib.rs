//! What roce-tracer's eBPF probe and its userspace agree on: the layout of the ring-buffer records and map
//! values, the map names, and the header classifier itself.
//!
//! The classifier lives here rather than in the probe so that it is one piece of code with two callers: the
//! probe runs it in the kernel over `bpf_skb_load_bytes`, and the host tests run it over byte slices and hold
//! it against roce-wire. Everything is `#[repr(C)]` with explicit padding and fixed-width integers, because
//! the kernel side and userspace see the same bytes through different compilers.
#![no_std]
#![warn(missing_docs)]

/// The largest snap length the probe can copy: each ring-buffer record is a reservation of one of a few
/// fixed sizes (the verifier wants a constant size), so this bounds both the copy and the ring's memory per
/// frame.
pub const MAX_SNAPLEN: usize = 2048;

/// The largest record below [`MAX_SNAPLEN`]: copies up to this take a record of 64, 128 or this many data
/// bytes, whichever is the smallest that holds them. At the default snap length a 64 MiB ring then holds
/// 700 000 header copies of 64 bytes (96-byte records), rather than 32 000 frames at 2 KiB.
pub const SMALL_SNAPLEN: usize = 256;

/// The data sizes of the records below [`SMALL_SNAPLEN`], smallest first.
pub const RECORD_CLASSES: [usize; 2] = [64, 128];

pub mod kevents;

/// Names of the maps in the eBPF object, so both sides spell them once.
pub mod maps {
    /// `ArrayOfMaps` of ring buffers of [`super::PacketEvent`] records, indexed by CPU: each probe run writes
    /// into the ring of the CPU it runs on, so CPUs never wait for each other's ring lock, and each ring has
    /// one reader. Userspace creates the rings (their sizes depend on how many CPUs share the budget) and
    /// puts one in every slot; the object's own slot count and inner ring are placeholders.
    pub const RINGS: &str = "RINGS";
    /// `PerCpuArray<ProbeCounters>` with one element.
    pub const COUNTERS: &str = "COUNTERS";
    /// `PerCpuHashMap<u32 dest QP, QpCounters>`.
    pub const QP_STATS: &str = "QP_STATS";
    /// `PerCpuArray<PrioCounters>`: priorities 0–7, then [`super::UNTAGGED`].
    pub const PRIO_STATS: &str = "PRIO_STATS";
    /// `PerCpuHashMap<u32 ifindex, u64>`: frames lost to a full ring buffer, per interface, so that each
    /// interface's statistics block gets its own drop count.
    pub const RING_FULL_BY_IF: &str = "RING_FULL_BY_IF";
    /// `Array<DropConfig>` with one element: where the `skb:kfree_skb` fields are on this kernel.
    pub const DROP_CONFIG: &str = "DROP_CONFIG";
    /// `PerCpuHashMap<DropKey, u64>`: kernel drops per protocol and reason.
    pub const DROPS: &str = "DROPS";
}

/// Name of the packet probe's [`Config`], a global in the object's read-only data that userspace sets when
/// it loads the object (before the verifier sees the programs).
pub const CONFIG_GLOBAL: &str = "PROBE_CONFIG";

/// Name of the `skb:kfree_skb` tracepoint program in the eBPF object.
pub const KFREE_SKB_PROGRAM: &str = "tracer_kfree_skb";

/// Size of the drop map: the four protocols below times every drop reason a kernel has (about 120 in 6.x),
/// with room for the reasons later kernels add.
pub const MAX_DROP_KEYS: u32 = 1024;

/// Ethertypes whose drops are counted. An IPv4 or IPv6 drop is counted only when the packet is RoCEv2 (UDP
/// to port 4791), which the counter reads from the packet when [`DropConfig`] knows where `struct sk_buff`
/// keeps it; without that layout (a kernel without BTF) every IP drop is counted.
pub const DROP_PROTOCOLS: [u16; 4] = [
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ETHERTYPE_ROCE_V1,
    ETHERTYPE_MAC_CONTROL,
];

/// Where the tracepoint's fields are, read by userspace from the event's `format` file: the record layout
/// changes between kernels (`rx_sk` appeared in 6.8 and moved `protocol`), so it is never compiled in.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropConfig {
    /// Offset of the `protocol` field (2 bytes, host order).
    pub protocol_offset: u32,
    /// Offset of the `reason` field (4 bytes), or [`NO_REASON`] on kernels without drop reasons.
    pub reason_offset: u32,
    /// Offset of the `skbaddr` field (the buffer's address, 8 bytes), or [`NO_LAYOUT`].
    pub skbaddr_offset: u32,
    /// Offsets inside `struct sk_buff` of `head` and of the 16-bit `network_header`, from the kernel's BTF,
    /// or [`NO_LAYOUT`]: then IP drops are counted without looking at the packet.
    pub skb_head: u32,
    /// See `skb_head`: the 16-bit offset of the network header from `head`.
    pub skb_network_header: u32,
}
const _: () = assert!(core::mem::size_of::<DropConfig>() == 20);

/// A [`DropConfig`] offset that is not known on this kernel.
pub const NO_LAYOUT: u32 = u32::MAX;

/// UDP destination port of RoCEv2, which an IP drop must have to be counted.
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// [`DropConfig::reason_offset`] of a kernel whose tracepoint has no `reason` field: drops are then all
/// counted under reason 0.
pub const NO_REASON: u32 = u32::MAX;

/// Key of the drop map.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DropKey {
    /// Ethertype, host order.
    pub protocol: u16,
    /// Zero: keeps `reason` 4-aligned and every byte of the key defined, since the kernel hashes all of them.
    pub _pad: u16,
    /// The kernel's `enum skb_drop_reason` value.
    pub reason: u32,
}
const _: () = assert!(core::mem::size_of::<DropKey>() == 8);

/// The packet probe's own counters, one per CPU (the `COUNTERS` map's only element): one struct rather than
/// an array of counters, so the probe looks it up once per frame instead of once per counter.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProbeCounters {
    /// Frames the probe ran on.
    pub seen: u64,
    /// Frames that matched (RoCE, CNP, PFC, PAUSE).
    pub matched: u64,
    /// Matched frames sent to userspace.
    pub emitted: u64,
    /// Matched frames lost because this CPU's ring buffer was full (or it had none): the capture's drop
    /// count, per CPU and so per ring.
    pub ring_full: u64,
    /// Ring-buffer bytes this CPU's records have taken so far (headers and padding included): the probe
    /// wakes the reader each time it passes a multiple of [`Config::wakeup_bytes`].
    pub ring_bytes: u64,
}
const _: () = assert!(core::mem::size_of::<ProbeCounters>() == 40);

/// Size of the per-interface drop map: the probe is attached to the `-i` interfaces only, so this is room
/// for far more than a capture uses.
pub const MAX_IFACES: u32 = 256;

/// Index of the per-priority slot for frames without an 802.1Q tag (and for 802.3x PAUSE, which has no
/// priority).
pub const UNTAGGED: u32 = 8;
/// Number of per-priority slots.
pub const PRIO_SLOTS: u32 = 9;
/// Size of the per-QP map: enough for a large host's QPs; further QPs are not counted in the map (the pcapng
/// still holds every frame).
pub const MAX_QPS: u32 = 16384;

/// Frame kinds, numbered like the analyzer's `Kind`.
pub mod kind {
    /// RoCE (v1 or v2) data and ACKs.
    pub const ROCE: u32 = 0;
    /// A congestion notification packet (BTH opcode 0x81).
    pub const CNP: u32 = 1;
    /// An 802.1Qbb PFC frame.
    pub const PFC: u32 = 2;
    /// An 802.3x PAUSE frame.
    pub const PAUSE: u32 = 3;
    /// Anything else (sent only with `--all-frames`).
    pub const OTHER: u32 = 4;
}

/// Bits of [`PacketEvent::flags`].
pub mod flag {
    /// The kernel had already removed the outer VLAN tag into the skb (`vlan_tci`/`vlan_proto` hold it):
    /// userspace puts it back so the pcapng shows the frame as it was on the wire.
    pub const VLAN_OFFLOADED: u32 = 1;
    /// Seen on egress rather than ingress.
    pub const EGRESS: u32 = 2;
    /// `ts_ns` is the receive time the kernel's stack stamped on the frame (`CLOCK_REALTIME`), not the
    /// probe's own `bpf_ktime_get_ns()` (`CLOCK_MONOTONIC`).
    pub const TS_REALTIME: u32 = 4;
}

/// Probe configuration: the object's [`CONFIG_GLOBAL`], fixed at load time so that the verifier knows
/// every value and drops the code the configuration cannot reach.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Config {
    /// Bytes of each matching frame to copy; capped at [`MAX_SNAPLEN`]. Zero sends no frames (counters only).
    pub snaplen: u32,
    /// Non-zero: send every frame, not just the RoCE/CNP/PFC/PAUSE ones.
    pub all_frames: u32,
    /// Wake the reader each time a CPU's records have taken another this many bytes of ring (a power of
    /// two; userspace rounds down); other records are submitted without a wakeup and the reader finds them
    /// at its next poll timeout. Waking on every record costs an interrupt per frame whenever the reader
    /// keeps up. Zero keeps the kernel's default (wake when the reader has caught up with the record).
    pub wakeup_bytes: u32,
    /// Non-zero: copy each frame's headers only (see [`copy_len`]) instead of its first `snaplen` bytes.
    /// Userspace sets it for the short snap lengths, which exist to keep headers: the copy into the ring is
    /// most of the probe's cost, and the headers are a third of 256 bytes or less.
    pub headers_only: u32,
}
const _: () = assert!(core::mem::size_of::<Config>() == 16);

/// One captured frame as the probe hands it to userspace, in a record of `N` data bytes (the probe picks
/// the smallest of a few sizes that holds its copy). Only `data[..caplen]` is meaningful. The fields are
/// as narrow as their values allow: every byte of a record is ring memory the probe writes for each frame,
/// and writing memory not touched for a whole turn of the ring is most of its cost.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PacketEvent<const N: usize> {
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC, to which userspace adds the offset to the wall clock; or, with
    /// [`flag::TS_REALTIME`], the stack's receive stamp, already wall-clock time.
    pub ts_ns: u64,
    /// Length of the frame on the wire, without a VLAN tag the kernel removed.
    pub len: u32,
    /// The interface the frame was seen on, matched to a `-i` interface by userspace.
    pub ifindex: u32,
    /// At most [`MAX_SNAPLEN`].
    pub caplen: u16,
    /// The tag the kernel removed (PCP, DEI, VID), valid with [`flag::VLAN_OFFLOADED`].
    pub vlan_tci: u16,
    /// The removed tag's TPID in host order (0x8100 or 0x88a8).
    pub vlan_proto: u16,
    /// [`flag`] bits.
    pub flags: u8,
    /// A [`kind`] value.
    pub kind: u8,
    /// The copied bytes; only `data[..caplen]` is meaningful.
    pub data: [u8; N],
}

/// Size of the header fields in front of `data`.
pub const EVENT_HEADER_LEN: usize = 24;
const _: () =
    assert!(core::mem::size_of::<PacketEvent<MAX_SNAPLEN>>() == EVENT_HEADER_LEN + MAX_SNAPLEN);
const _: () =
    assert!(core::mem::size_of::<PacketEvent<SMALL_SNAPLEN>>() == EVENT_HEADER_LEN + SMALL_SNAPLEN);
const _: () = assert!(core::mem::offset_of!(PacketEvent<MAX_SNAPLEN>, data) == EVENT_HEADER_LEN);
const _: () = assert!(MAX_SNAPLEN <= u16::MAX as usize);

/// Per destination QP counters (per CPU in the kernel; userspace sums them).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// RoCE packets (not CNPs) to this QP.
    pub packets: u64,
    /// Their wire bytes.
    pub bytes: u64,
    /// Of those, marked Congestion Experienced.
    pub ce: u64,
    /// CNPs naming this QP (the notified sender's QP).
    pub cnps: u64,
}
const _: () = assert!(core::mem::size_of::<QpCounters>() == 32);

/// Per 802.1p priority counters.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrioCounters {
    /// RoCE packets and CNPs travelling on this priority.
    pub roce_packets: u64,
    /// Their wire bytes.
    pub roce_bytes: u64,
    /// Of those, marked Congestion Experienced.
    pub ce: u64,
    /// PFC frames that name this priority (class-enable bit set).
    pub pfc_frames: u64,
    /// Of those, with a non-zero pause time.
    pub pfc_xoff: u64,
    /// Of those, with a zero time (resume).
    pub pfc_xon: u64,
    /// 802.3x PAUSE frames (counted in the [`UNTAGGED`] slot).
    pub pause_frames: u64,
    /// Zero: rounds the struct to a cache line, so that one CPU's slot never shares a line with the next.
    pub _reserved: u64,
}
const _: () = assert!(core::mem::size_of::<PrioCounters>() == 64);

#[cfg(feature = "user")]
mod user {
    // SAFETY: plain #[repr(C)] structs of integers without implicit padding (the size asserts above prove
    // that every byte belongs to a field), so any bit pattern is a valid value.
    unsafe impl aya::Pod for super::Config {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::QpCounters {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ProbeCounters {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PrioCounters {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::DropConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::DropKey {}
}

/// Read access to a frame's bytes, a fixed-size chunk at a time, each read checked: the probe implements it
/// with one `bpf_skb_load_bytes` per chunk (so a RoCEv2 frame costs four helper calls), the tests with a
/// slice.
pub trait Bytes {
    /// The `N` bytes at `offset`, or `None` past the end of the frame.
    fn chunk<const N: usize>(&self, offset: usize) -> Option<[u8; N]>;
}

impl Bytes for [u8] {
    fn chunk<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        self.get(offset..offset.checked_add(N)?)?.try_into().ok()
    }
}

fn be16(b0: u8, b1: u8) -> u16 {
    u16::from_be_bytes([b0, b1])
}

/// What the probe needs to know about a frame to count it; the full decode happens in userspace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// A [`kind`] value.
    pub kind: u32,
    /// PCP of the outer tag, or [`UNTAGGED`].
    pub prio: u32,
    /// IP ECN bits (RoCE and CNP).
    pub ecn: u8,
    /// The BTH was captured: `opcode`, `dest_qp` and `psn` are valid.
    pub has_bth: bool,
    /// The BTH opcode.
    pub opcode: u8,
    /// The BTH destination QP.
    pub dest_qp: u32,
    /// The BTH packet sequence number.
    pub psn: u32,
    /// PFC class-enable vector (low byte).
    pub pfc_enable: u8,
    /// Priorities whose PFC pause time is non-zero.
    pub pfc_nonzero: u8,
    /// PAUSE time in quanta.
    pub pause_quanta: u16,
    /// Bytes from the start of the frame (as the probe sees it) through the BTH, or through a MAC Control
    /// frame's minimum-size body; 0 when unknown (no BTH was read). [`header_len`] adds the extension
    /// headers, only where a copy needs them: worked out here, the opcode table was inlined at each of the
    /// three places a BTH is found and made the probe's code a fifth larger.
    pub headers: u32,
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
const ETHERTYPE_ROCE_V1: u16 = 0x8915;
const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
const ROCE_V2_PORT: u16 = 4791;
const OPCODE_CNP: u8 = 0x81;
const GRH_LEN: usize = 40;
const BTH_LEN: usize = 12;
/// The smallest Ethernet frame without its FCS: a MAC Control frame's opcode and times are padded to it.
const MIN_FRAME: usize = 60;
/// A MAC Control frame's bytes after the ethertype, padding included.
const MAC_CONTROL_LEN: usize = MIN_FRAME - 14;

/// The QP every CM MAD is sent to: userspace pairs the two sides of a connection from these MADs' payloads.
pub const CM_QP: u32 = 1;

/// Header copies are rounded up to a multiple of this. It keeps frames that are headers and little else
/// (acknowledgements, CNPs, PFC) whole, so userspace can still check their ICRC, and costs little: the copy's
/// price is the ring's cache lines it writes.
pub const HEADER_COPY_ROUND: usize = 64;

/// Bytes of extension headers that follow the BTH of `opcode` (IBTA vol. 1 ch. 9, annex A14 for XRC),
/// counting a CNP's 16 reserved bytes as a header. Opcodes IBTA leaves undefined get the answer of the
/// operation's RC column, which only decides how many bytes are copied: userspace decodes nothing after the
/// BTH of an undefined opcode.
///
/// A table lookup rather than the branches that work it out: in the probe, branches on the opcode became
/// one path per answer through the rest of the program, which the verifier then checked one by one (the
/// copy's length, compared with the snap length, a constant there, had to stay exact on each), and code the
/// CPU had to run through.
#[inline(always)]
pub fn ext_len(opcode: u8) -> usize {
    match EXT_LEN.get(usize::from(opcode)) {
        Some(&n) => n as usize,
        None => 0,
    }
}

/// [`ext_len`] of every opcode, worked out at compile time.
static EXT_LEN: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut opcode = 0;
    while opcode < 256 {
        table[opcode] = ext_len_of(opcode as u8) as u8;
        opcode += 1;
    }
    table
};

/// The extension headers' length from the opcode's two fields: the operation (low five bits) brings its
/// own headers, the transport (high three) a datagram or XRC header on some of them.
const fn ext_len_of(opcode: u8) -> usize {
    if opcode == OPCODE_CNP {
        return 16;
    }
    let operation = opcode & 0x1f;
    // The operation's own headers: ImmDt, IETH, AETH 4; RETH 16; AtomicETH 28; AETH + AtomicAckETH 12.
    let own = match operation {
        0x03 | 0x05 | 0x09 => 4,
        0x06 | 0x0a | 0x0c => 16,
        0x0b => 20,
        0x0d | 0x0f | 0x10 | 0x11 => 4,
        0x12 => 12,
        0x13 | 0x14 => 28,
        0x16 | 0x17 => 4,
        _ => 0,
    };
    // Responses (read responses and acknowledgements) carry no datagram or XRC header.
    let response = operation >= 0x0d && operation <= 0x12;
    let transport = match opcode >> 5 {
        // RD: RDETH, and DETH on requests.
        2 => {
            if response {
                4
            } else {
                12
            }
        }
        // UD: DETH.
        3 => 8,
        // XRC: XRCETH on requests.
        5 => {
            if response {
                0
            } else {
                4
            }
        }
        _ => 0,
    };
    own + transport
}

/// Whether a CPU's count of ring bytes going from `before` to `after` passed a multiple of `threshold`, a
/// power of two: the probe then wakes the reader. For a power of two, a multiple lies in `(before, after]`
/// exactly when the two differ in a bit at or above it, which takes no division.
#[inline(always)]
pub fn passes_multiple(before: u64, after: u64, threshold: u64) -> bool {
    before ^ after >= threshold
}

/// Bytes from the start of the frame through the last header userspace decodes: the BTH and the extension
/// headers its opcode brings (a CNP's 16 reserved bytes too), or a MAC Control frame up to the minimum frame
/// size. 0 when unknown.
#[inline(always)]
pub fn header_len(s: &Summary) -> usize {
    if s.has_bth {
        s.headers as usize + ext_len(s.opcode)
    } else {
        s.headers as usize
    }
}

/// Bytes of a matching frame the probe copies into its ring record (before the record's own bound): the
/// first `snaplen`, or with [`Config::headers_only`] the headers rounded up to [`HEADER_COPY_ROUND`] and
/// never more than `snaplen`. CM MADs (UD to QP 1) and frames whose headers are unknown still get `snaplen`
/// bytes: userspace reads QP numbers and PSNs from a MAD's payload.
#[inline(always)]
pub fn copy_len(s: &Summary, len: u32, config: &Config) -> usize {
    let snaplen = config.snaplen as usize;
    let cm_mad = s.has_bth && s.dest_qp == CM_QP && s.opcode >> 5 == 3;
    let want = if config.headers_only != 0 && s.headers != 0 && !cm_mad {
        let rounded = header_len(s).div_ceil(HEADER_COPY_ROUND) * HEADER_COPY_ROUND;
        if rounded < snaplen { rounded } else { snaplen }
    } else {
        snaplen
    };
    let len = len as usize;
    if len < want { len } else { want }
}

fn is_tag(ethertype: u16) -> bool {
    ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ
}

/// Classifies an Ethernet frame. `offloaded_tci` is the outer tag the kernel already removed, if any: its
/// PCP is then the priority, and the bytes start with the next header's ethertype at offset 12.
///
/// Follows at most two tags in the bytes, IPv4 without fragments, IPv6 whose next header is UDP (extension
/// headers are left to userspace's decoder), UDP port 4791, RoCEv1 (GRH) and MAC Control. Anything it cannot
/// read is `OTHER`, or `ROCE` without a BTH when the frame was cut inside the transport headers.
#[inline(always)]
pub fn classify<B: Bytes + ?Sized>(b: &B, offloaded_tci: Option<u16>) -> Summary {
    let mut s = Summary {
        kind: kind::OTHER,
        prio: UNTAGGED,
        ..Summary::default()
    };
    if let Some(tci) = offloaded_tci {
        s.prio = u32::from(tci >> 13);
    }
    // The ethertype and room for two tags in one read; a short frame falls back to the bare ethertype.
    let (ethertype, l3) = match b.chunk::<10>(12) {
        Some(h) => {
            let first = be16(h[0], h[1]);
            if !is_tag(first) {
                (first, 14)
            } else {
                if offloaded_tci.is_none() {
                    s.prio = u32::from(h[2] >> 5);
                }
                let second = be16(h[4], h[5]);
                if is_tag(second) {
                    (be16(h[8], h[9]), 22)
                } else {
                    (second, 18)
                }
            }
        }
        None => match b.chunk::<2>(12) {
            Some(h) => {
                let first = be16(h[0], h[1]);
                if is_tag(first) {
                    // A tag and nothing after it that can be classified.
                    if offloaded_tci.is_none()
                        && let Some(t) = b.chunk::<1>(14)
                    {
                        s.prio = u32::from(t[0] >> 5);
                    }
                    return s;
                }
                (first, 14)
            }
            None => return s,
        },
    };
    match ethertype {
        ETHERTYPE_MAC_CONTROL => mac_control(b, l3, &mut s),
        ETHERTYPE_ROCE_V1 => {
            // GRH: version (4 bits), traffic class (8), flow label (20).
            if let Some(h) = b.chunk::<2>(l3) {
                s.ecn = ((be16(h[0], h[1]) >> 4) & 3) as u8;
                s.kind = kind::ROCE;
                bth(b, l3 + GRH_LEN, &mut s);
            }
        }
        ETHERTYPE_IPV4 => {
            let Some(h) = b.chunk::<10>(l3) else {
                return s;
            };
            let ihl = usize::from(h[0] & 0x0f) * 4;
            let frag = be16(h[6], h[7]);
            // A fragment's UDP header (if any) says nothing about the other fragments: left to userspace.
            if h[0] >> 4 != 4 || ihl < 20 || h[9] != 17 || frag & 0x3fff != 0 {
                return s;
            }
            udp(b, l3 + ihl, h[1] & 3, &mut s);
        }
        ETHERTYPE_IPV6 => {
            let Some(h) = b.chunk::<7>(l3) else {
                return s;
            };
            let first = be16(h[0], h[1]);
            if first >> 12 != 6 || h[6] != 17 {
                return s;
            }
            udp(b, l3 + 40, ((first >> 4) & 3) as u8, &mut s);
        }
        _ => {}
    }
    s
}

#[inline(always)]
fn udp<B: Bytes + ?Sized>(b: &B, at: usize, ecn: u8, s: &mut Summary) {
    match b.chunk::<2>(at + 2) {
        Some(p) if be16(p[0], p[1]) == ROCE_V2_PORT => {}
        _ => return,
    }
    s.ecn = ecn;
    s.kind = kind::ROCE;
    bth(b, at + 8, s);
}

#[inline(always)]
fn bth<B: Bytes + ?Sized>(b: &B, at: usize, s: &mut Summary) {
    let Some(h) = b.chunk::<BTH_LEN>(at) else {
        return;
    };
    s.has_bth = true;
    s.opcode = h[0];
    s.headers = (at + BTH_LEN) as u32;
    s.dest_qp = u32::from_be_bytes([0, h[5], h[6], h[7]]);
    s.psn = u32::from_be_bytes([0, h[9], h[10], h[11]]);
    if h[0] == OPCODE_CNP {
        s.kind = kind::CNP;
    }
}

#[inline(always)]
fn mac_control<B: Bytes + ?Sized>(b: &B, at: usize, s: &mut Summary) {
    let Some(op) = b.chunk::<4>(at) else {
        return;
    };
    s.headers = (at + MAC_CONTROL_LEN) as u32;
    match be16(op[0], op[1]) {
        0x0001 => {
            s.kind = kind::PAUSE;
            s.pause_quanta = be16(op[2], op[3]);
        }
        0x0101 => {
            let Some(q) = b.chunk::<16>(at + 4) else {
                return;
            };
            let mut nonzero = 0u8;
            let mut i = 0;
            while i < 8 {
                if q[2 * i] != 0 || q[2 * i + 1] != 0 {
                    nonzero |= 1 << i;
                }
                i += 1;
            }
            s.kind = kind::PFC;
            s.pfc_enable = op[3];
            s.pfc_nonzero = nonzero;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_wire::build::{IpSpec, RoceFrame, Vlan, emit_mac_control};
    use roce_wire::pfc::{MacControlRepr, PfcRepr};
    use roce_wire::{BthRepr, ExtHeaders, Opcode};

    fn bth_repr(opcode: Opcode, qp: u32, psn: u32) -> BthRepr {
        BthRepr {
            migreq: true,
            becn: opcode == Opcode::CNP,
            ..BthRepr::new(opcode, qp, psn)
        }
    }

    fn roce(
        ip: IpSpec,
        vlan: Option<Vlan>,
        opcode: Opcode,
        qp: u32,
        psn: u32,
    ) -> ([u8; 256], usize) {
        let payload = [0x5au8; 32];
        let frame = RoceFrame {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            vlan,
            ip,
            sport: 49152,
            bth: bth_repr(opcode, qp, psn),
            ext: ExtHeaders::default(),
            payload: if opcode == Opcode::CNP {
                &[0; 16]
            } else {
                &payload
            },
        };
        let mut buf = [0u8; 256];
        let n = frame.emit(&mut buf).unwrap();
        (buf, n)
    }

    fn v4(ecn: u8) -> IpSpec {
        IpSpec::V4 {
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
            dscp: 26,
            ecn,
            ttl: 64,
            ident: 7,
        }
    }

    fn v6() -> IpSpec {
        IpSpec::V6 {
            src: [0xfe; 16],
            dst: [0xfd; 16],
            dscp: 48,
            ecn: 1,
            flow_label: 0,
            hop_limit: 64,
        }
    }

    #[test]
    fn roce_v4_tagged_and_untagged() {
        let (buf, n) = roce(v4(3), None, Opcode::RC_SEND_ONLY, 0x12_3456, 0xab_cdef);
        let s = classify(&buf[..n], None);
        assert_eq!(s.kind, kind::ROCE);
        assert_eq!(
            (s.dest_qp, s.psn, s.ecn, s.prio),
            (0x12_3456, 0xab_cdef, 3, UNTAGGED)
        );
        assert_eq!(s.opcode, Opcode::RC_SEND_ONLY.0);

        let vlan = Vlan {
            pcp: 5,
            dei: false,
            vid: 100,
        };
        let (buf, n) = roce(v4(2), Some(vlan), Opcode::RC_SEND_ONLY, 9, 10);
        let s = classify(&buf[..n], None);
        assert_eq!(
            (s.kind, s.prio, s.ecn, s.dest_qp, s.psn),
            (kind::ROCE, 5, 2, 9, 10)
        );
    }

    #[test]
    fn offloaded_tag_gives_the_priority() {
        let (buf, n) = roce(v4(1), None, Opcode::RC_SEND_ONLY, 1, 2);
        let s = classify(&buf[..n], Some((3 << 13) | 42));
        assert_eq!((s.kind, s.prio), (kind::ROCE, 3));
    }

    #[test]
    fn cnp_over_ipv6() {
        let ip = v6();
        let (buf, n) = roce(ip, None, Opcode::CNP, 0x77, 0);
        let s = classify(&buf[..n], None);
        assert_eq!((s.kind, s.dest_qp, s.ecn), (kind::CNP, 0x77, 1));
    }

    #[test]
    fn truncation_keeps_what_fits() {
        let (buf, n) = roce(v4(0), None, Opcode::RC_SEND_ONLY, 5, 6);
        // Every prefix: never a wrong BTH, and RoCE from the UDP port on.
        for cut in 0..n {
            let s = classify(&buf[..cut], None);
            if cut >= 14 + 20 + 8 + 12 {
                assert!(s.has_bth && s.dest_qp == 5, "cut {cut}");
            } else {
                assert!(!s.has_bth, "cut {cut}");
            }
            let udp_dport_end = 14 + 20 + 4;
            assert_eq!(s.kind == kind::ROCE, cut >= udp_dport_end, "cut {cut}");
        }
    }

    #[test]
    fn pfc_and_pause() {
        let pfc = MacControlRepr::Pfc(PfcRepr {
            enable: 0b1000_0101,
            quanta: [0xffff, 0, 0, 0, 0, 0, 0, 7],
        });
        let mut buf = [0u8; 64];
        let n = emit_mac_control([2, 0, 0, 0, 0, 9], None, &pfc, &mut buf).unwrap();
        let s = classify(&buf[..n], None);
        assert_eq!(
            (s.kind, s.pfc_enable, s.pfc_nonzero),
            (kind::PFC, 0b1000_0101, 0b1000_0001)
        );

        let pause = MacControlRepr::Pause { quanta: 300 };
        let n = emit_mac_control([2, 0, 0, 0, 0, 9], None, &pause, &mut buf).unwrap();
        let s = classify(&buf[..n], None);
        assert_eq!(
            (s.kind, s.pause_quanta, s.prio),
            (kind::PAUSE, 300, UNTAGGED)
        );
    }

    #[test]
    fn extension_header_lengths_follow_roce_wire() {
        let mut defined = 0;
        for op in 0..=255u8 {
            let Some(layout) = Opcode(op).layout() else {
                continue;
            };
            defined += 1;
            let want = layout.len() + if layout.cnp { 16 } else { 0 };
            assert_eq!(ext_len(op), want, "opcode {op:#04x}");
        }
        // RC 23 + UC 12 + RD 22 + UD 2 + CNP + XRC 23: a table that lost a transport would pass vacuously.
        assert_eq!(defined, 83);
    }

    fn config(snaplen: u32, headers_only: bool) -> Config {
        Config {
            snaplen,
            headers_only: u32::from(headers_only),
            ..Config::default()
        }
    }

    #[test]
    fn headers_end_where_the_payload_starts() {
        // The helper's payload is 32 bytes; the ICRC is the last 4.
        let (buf, n) = roce(v4(0), None, Opcode::RC_SEND_ONLY, 5, 6);
        let s = classify(&buf[..n], None);
        assert_eq!(header_len(&s), n - 32 - 4);
        assert_eq!(header_len(&s), 14 + 20 + 8 + 12);
        let vlan = Vlan {
            pcp: 1,
            dei: false,
            vid: 7,
        };
        let (buf, n) = roce(v4(0), Some(vlan), Opcode::RC_SEND_ONLY, 5, 6);
        assert_eq!(header_len(&classify(&buf[..n], None)), n - 32 - 4);
        // A CNP is all headers but its ICRC.
        let ip = v6();
        let (buf, n) = roce(ip, None, Opcode::CNP, 0x77, 0);
        assert_eq!(header_len(&classify(&buf[..n], None)), n - 4);
        // Without a BTH nothing is known.
        assert_eq!(header_len(&classify(&buf[..14 + 40 + 8 + 4], None)), 0);
    }

    #[test]
    fn the_copy_keeps_headers_whole_frames_when_small_and_cm_mads_whole() {
        let (buf, n) = roce(v4(0), None, Opcode::RC_SEND_ONLY, 5, 6);
        let s = classify(&buf[..n], None);
        // 54 bytes of headers round up to 64; the frame is 90.
        assert_eq!(copy_len(&s, n as u32, &config(256, true)), 64);
        // The snap length is an upper bound, and without headers_only the whole of it is copied.
        assert_eq!(copy_len(&s, n as u32, &config(40, true)), 40);
        assert_eq!(copy_len(&s, n as u32, &config(256, false)), n);
        assert_eq!(copy_len(&s, 2000, &config(256, false)), 256);
        // A frame shorter than the rounded headers is copied whole (the ICRC of an ACK or CNP included).
        assert_eq!(copy_len(&s, 62, &config(256, true)), 62);

        // A CM MAD: UD SEND ONLY to QP 1, DETH then the MAD.
        let mad = [0x11u8; 256];
        let frame = RoceFrame {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            vlan: None,
            ip: v4(0),
            sport: 49152,
            bth: BthRepr::new(Opcode::UD_SEND_ONLY, CM_QP, 0),
            ext: ExtHeaders {
                deth: Some(roce_wire::ext::DethRepr {
                    qkey: 0x8001_0000,
                    src_qp: 1,
                }),
                ..ExtHeaders::default()
            },
            payload: &mad,
        };
        let mut buf = [0u8; 512];
        let n = frame.emit(&mut buf).unwrap();
        let s = classify(&buf[..n], None);
        assert_eq!(header_len(&s), 14 + 20 + 8 + 12 + 8);
        assert_eq!(copy_len(&s, n as u32, &config(256, true)), 256);
        assert_eq!(copy_len(&s, n as u32, &config(100, true)), 100);
        // The same datagram to another QP is headers only: 62 bytes, rounded up.
        let mut other = buf;
        other[14 + 20 + 8 + 7] = 2;
        let s = classify(&other[..n], None);
        assert_eq!(copy_len(&s, n as u32, &config(256, true)), 64);

        // PFC is copied up to the minimum frame, which is all of it.
        let pfc = MacControlRepr::Pfc(PfcRepr {
            enable: 1,
            quanta: [1; 8],
        });
        let mut buf = [0u8; 64];
        let n = emit_mac_control([2, 0, 0, 0, 0, 9], None, &pfc, &mut buf).unwrap();
        let s = classify(&buf[..n], None);
        assert_eq!((header_len(&s), n), (60, 60));
        assert_eq!(copy_len(&s, n as u32, &config(256, true)), 60);
    }

    #[test]
    fn passing_a_multiple_is_seen_without_dividing() {
        for threshold in [1u64, 8, 64, 4096] {
            for before in 0..3 * threshold + 5 {
                for step in [1, 7, 40, 296, 2080] {
                    let after = before + step;
                    let divided = before / threshold != after / threshold;
                    assert_eq!(
                        passes_multiple(before, after, threshold),
                        divided,
                        "{before} -> {after} over {threshold}"
                    );
                }
            }
        }
    }

    #[test]
    fn not_roce() {
        let (mut buf, n) = roce(v4(0), None, Opcode::RC_SEND_ONLY, 5, 6);
        // UDP destination port 4790.
        buf[14 + 20 + 3] = 0xb6;
        assert_eq!(classify(&buf[..n], None).kind, kind::OTHER);
        // A later IPv4 fragment.
        let (mut buf, n) = roce(v4(0), None, Opcode::RC_SEND_ONLY, 5, 6);
        buf[14 + 7] = 0x10;
        assert_eq!(classify(&buf[..n], None).kind, kind::OTHER);
        assert_eq!(classify(&[0u8; 5][..], None).kind, kind::OTHER);
    }
}
