//! One decoder for every consumer: a captured record becomes a [`Frame`].
//!
//! L2–L4 go through etherparse's lax per-layer slices, so a frame cut by the snap length still yields every
//! header that fits; the InfiniBand transport headers go through `roce-wire`. The analyzer's passes, the `decode` command
//! and the live tracer all call [`Decoder::decode`], so a field can never mean two things in two places.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{
    Ethernet2Slice, IpNumber, LaxIpPayloadSlice, LaxIpv4Slice, LaxIpv6Slice, SingleVlanSlice,
    UdpSlice,
};
use roce_wire::grh::{ETHERTYPE_ROCE_V1, GrhRepr};
use roce_wire::icrc::{Crc32, icrc_with};
use roce_wire::packet::LaxRocePacket;
use roce_wire::pfc::{ETHERTYPE_MAC_CONTROL, MacControlRepr};
use roce_wire::{BthRepr, Opcode};

use roce_capture::{LinkType, Record};

/// UDP destination port that marks RoCEv2 (IANA). The source port is per-flow entropy and means nothing.
pub const ROCEV2_PORT: u16 = 4791;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;

/// What a frame is, as far as congestion analysis cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// RoCE transport packet (v1 or v2) other than a CNP.
    Roce,
    /// Congestion Notification Packet (BTH opcode 0x81).
    Cnp,
    /// 802.1Qbb priority flow control.
    Pfc,
    /// 802.3x link-level PAUSE.
    Pause,
    /// Anything else: ARP, TCP, LLDP, non-RoCE UDP, unsupported link types.
    Other,
}

impl Kind {
    /// The name used in JSON output and filters.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Roce => "roce",
            Kind::Cnp => "cnp",
            Kind::Pfc => "pfc",
            Kind::Pause => "pause",
            Kind::Other => "other",
        }
    }

    /// Every kind, in the order tables list them.
    pub const ALL: [Kind; 5] = [Kind::Roce, Kind::Cnp, Kind::Pfc, Kind::Pause, Kind::Other];
}

/// The IP layer facts that matter for RoCE: who talks to whom, and the DSCP/ECN byte the switches act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpInfo {
    /// The IP (or GRH) source address.
    pub src: IpAddr,
    /// The IP (or GRH) destination address.
    pub dst: IpAddr,
    /// The DSCP, which untagged traffic's priority comes from.
    pub dscp: u8,
    /// 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub ecn: u8,
    /// The packet's length on the wire, its header included, as the header states it (IPv4's total length,
    /// IPv6's and the GRH's payload length plus their 40 bytes): the frame length less the link overhead.
    pub len: u32,
}

/// ECN codepoint for Congestion Experienced.
pub const ECN_CE: u8 = 3;

/// Whether the ICRC could be checked, and how that went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icrc {
    /// The stored ICRC equals the one computed over the frame.
    Ok,
    /// The stored ICRC differs: the frame was corrupted between sender and tap.
    Bad {
        /// The ICRC the frame carries.
        stored: u32,
        /// The ICRC computed over the frame's invariant fields.
        computed: u32,
    },
    /// The frame was cut before the ICRC, or the headers needed to compute it are missing.
    Unknown,
}

impl Icrc {
    /// JSON's tri-state: true, false, or null when it could not be checked.
    pub fn as_option(self) -> Option<bool> {
        match self {
            Icrc::Ok => Some(true),
            Icrc::Bad { .. } => Some(false),
            Icrc::Unknown => None,
        }
    }
}

/// The InfiniBand transport part of a RoCE frame.
#[derive(Debug, Clone, Copy)]
pub struct RoceInfo<'a> {
    /// 1 (ethertype 0x8915, GRH) or 2 (UDP 4791).
    pub version: u8,
    /// UDP source port (RoCEv2 only).
    pub sport: Option<u16>,
    /// What roce-wire read: the BTH (`None` when the frame was cut inside it), the extension headers, the
    /// payload length on the wire (from the IP/UDP lengths, so a snap-length capture still counts payload
    /// bytes), and why parsing stopped early, when it did.
    pub packet: LaxRocePacket<'a>,
    /// The ICRC verdict.
    pub icrc: Icrc,
    /// Offset of the first payload byte inside the record, for consumers that look into payloads (CM MADs).
    pub payload_offset: usize,
}

/// One decoded record. Borrowed from the reader's buffer: passes copy out what they keep.
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    /// 1-based frame number as Wireshark gives it (custom blocks take numbers too; docs/decode.md).
    pub number: u64,
    /// The capture's timestamp in ns since the epoch.
    pub ts_ns: u64,
    /// Bytes stored in the record.
    pub caplen: u32,
    /// Bytes the frame had on the wire.
    pub len: u32,
    /// The tap's index over the capture.
    pub iface: u32,
    /// The tap's recorded `if_speed`, bit/s ([`roce_capture::Record::speed_bps`]): a pass turns it into the
    /// tap's line rate through [`crate::line::LineRates`].
    pub speed_bps: Option<u64>,
    /// The record's bytes.
    pub data: &'a [u8],
    /// What the frame is, decided once here so that every pass agrees.
    pub kind: Kind,
    /// Outer 802.1Q/802.1ad tag: its PCP is the priority PFC acts on.
    pub vlan: Option<u16>,
    /// The outer tag's priority code point.
    pub pcp: Option<u8>,
    /// Inner tag of a QinQ frame.
    pub inner_vlan: Option<u16>,
    /// The Ethernet source (none on raw-IP link types).
    pub src_mac: Option<[u8; 6]>,
    /// The Ethernet destination.
    pub dst_mac: Option<[u8; 6]>,
    /// The IP layer, when there is one.
    pub ip: Option<IpInfo>,
    /// The InfiniBand transport part of a RoCE frame.
    pub roce: Option<RoceInfo<'a>>,
    /// A PFC or 802.3x PAUSE frame's content.
    pub mac_control: Option<MacControlRepr>,
    /// The record is shorter than the frame on the wire.
    pub truncated: bool,
}

impl<'a> Frame<'a> {
    /// A frame with the record's metadata and nothing decoded yet: `Other` until a decoder fills it in.
    pub fn empty(number: u64, rec: &Record<'a>) -> Self {
        Frame {
            number,
            ts_ns: rec.ts_ns,
            caplen: rec.caplen,
            len: rec.len,
            iface: rec.iface,
            speed_bps: rec.speed_bps,
            data: rec.data,
            kind: Kind::Other,
            vlan: None,
            pcp: None,
            inner_vlan: None,
            src_mac: None,
            dst_mac: None,
            ip: None,
            roce: None,
            mac_control: None,
            truncated: rec.caplen < rec.len,
        }
    }

    /// The 802.1p priority in the frame itself: the VLAN PCP when tagged. An untagged frame's priority comes
    /// from its DSCP through a map known only with the host's setup: see [`crate::priority`].
    pub fn priority(&self) -> Option<u8> {
        self.pcp
    }

    /// The frame's BTH, when it is RoCE and the BTH was captured.
    pub fn bth(&self) -> Option<&BthRepr> {
        self.roce.as_ref().and_then(|r| r.packet.bth.as_ref())
    }
}

/// `crc32fast` implements the same CRC-32 as roce-wire's table version but uses carry-less multiplication
/// where the CPU has it, which matters when every full-size frame of a multi-gigabyte capture is checked.
#[derive(Default)]
struct FastCrc(crc32fast::Hasher);

impl Crc32 for FastCrc {
    fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    fn finish(self) -> u32 {
        self.0.finalize()
    }
}

/// Decoding options.
#[derive(Debug, Clone, Copy)]
pub struct Decoder {
    /// Check the ICRC of complete RoCEv2 frames (costs a CRC over the whole frame).
    pub check_icrc: bool,
    /// Treat these UDP destination ports as RoCEv2 besides 4791.
    pub extra_port: Option<u16>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            check_icrc: true,
            extra_port: None,
        }
    }
}

/// Where an IP header and its UDP datagram sit inside the record, for the ICRC.
struct IcrcInput<'a> {
    ip_header: &'a [u8],
    udp: &'a [u8],
}

impl Decoder {
    /// Decodes one record. Never fails: what cannot be read is left `None` and the frame's kind says what is
    /// known. `number` is the 1-based frame number.
    pub fn decode<'a>(&self, number: u64, rec: &Record<'a>) -> Frame<'a> {
        let mut f = Frame::empty(number, rec);
        self.decode_into(&mut f, rec.link);
        f
    }

    /// [`Decoder::decode`] for hot loops: fills a frame made by [`Frame::empty`] in place. Returning the
    /// 360-byte frame by value cost a copy per frame, a tenth of `stats`'s time.
    pub fn decode_into<'a>(&self, f: &mut Frame<'a>, link: LinkType) {
        self.link(f, link);
    }

    /// Whether frames of this link type are read at all: records of any other link type decode as `Other`,
    /// which the commands tell the user about rather than show silently.
    pub fn reads_link(link: LinkType) -> bool {
        matches!(
            link,
            LinkType::ETHERNET
                | LinkType::RAW
                | LinkType::IPV4
                | LinkType::IPV6
                | LinkType::LINUX_SLL
                | LinkType::LINUX_SLL2
        )
    }

    /// The link header, then everything above it; the link types are those of [`Decoder::reads_link`].
    fn link<'a>(&self, f: &mut Frame<'a>, link: LinkType) {
        // The one list of link types read: a type added below but not there would stay unread (and a test
        // would say so), never read silently while the commands warn that it is not.
        if !Self::reads_link(link) {
            return;
        }
        let data = f.data;
        // Each layer is sliced with etherparse's per-header types rather than its whole-packet slicer: the
        // latter returns a large struct by value, and moving it dominated the per-frame cost.
        let (ether_type, payload) = match link {
            LinkType::ETHERNET => match Ethernet2Slice::from_slice_without_fcs(data) {
                Ok(eth) => {
                    f.dst_mac = Some(eth.destination());
                    f.src_mac = Some(eth.source());
                    let p = eth.payload();
                    (p.ether_type.0, p.payload)
                }
                Err(_) => return,
            },
            LinkType::RAW | LinkType::IPV4 | LinkType::IPV6 => match data.first().map(|b| b >> 4) {
                Some(4) => (ETHERTYPE_IPV4, data),
                Some(6) => (ETHERTYPE_IPV6, data),
                _ => return,
            },
            LinkType::LINUX_SLL => match cooked(data, 16, 14, 5, 6) {
                Some((mac, et, rest)) => {
                    f.src_mac = mac;
                    (et, rest)
                }
                None => return,
            },
            LinkType::LINUX_SLL2 => match cooked(data, 20, 0, 11, 12) {
                Some((mac, et, rest)) => {
                    f.src_mac = mac;
                    (et, rest)
                }
                None => return,
            },
            _ => return,
        };
        self.ether(f, ether_type, payload);
    }

    /// Everything after the link header: VLAN tags, then MAC control, RoCEv1 or IP.
    #[inline]
    fn ether<'a>(&self, f: &mut Frame<'a>, mut ether_type: u16, mut payload: &'a [u8]) {
        for depth in 0..3 {
            if !matches!(ether_type, 0x8100 | 0x88a8 | 0x9100) {
                break;
            }
            let Ok(tag) = SingleVlanSlice::from_slice(payload) else {
                return;
            };
            match depth {
                0 => {
                    f.vlan = Some(tag.vlan_identifier().value());
                    f.pcp = Some(tag.priority_code_point().value());
                }
                1 => f.inner_vlan = Some(tag.vlan_identifier().value()),
                _ => {}
            }
            ether_type = tag.ether_type().0;
            payload = tag.payload_slice();
        }
        match ether_type {
            ETHERTYPE_MAC_CONTROL => {
                if let Ok(ctl) = MacControlRepr::parse(payload) {
                    f.kind = match ctl {
                        MacControlRepr::Pfc(_) => Kind::Pfc,
                        MacControlRepr::Pause { .. } => Kind::Pause,
                        MacControlRepr::Other { .. } => Kind::Other,
                    };
                    f.mac_control = Some(ctl);
                }
            }
            ETHERTYPE_ROCE_V1 => self.roce_v1(f, payload),
            ETHERTYPE_IPV4 => {
                let Ok((v4, _)) = LaxIpv4Slice::from_slice(payload) else {
                    return;
                };
                let h = v4.header();
                f.ip = Some(IpInfo {
                    src: IpAddr::V4(Ipv4Addr::from(h.source())),
                    dst: IpAddr::V4(Ipv4Addr::from(h.destination())),
                    dscp: h.dcp().value(),
                    ecn: h.ecn().value(),
                    len: u32::from(h.total_len()),
                });
                let ip_header = reborrow(f.data, h.slice());
                self.udp(f, ip_header, v4.payload());
            }
            ETHERTYPE_IPV6 => {
                let Ok((v6, _)) = LaxIpv6Slice::from_slice(payload) else {
                    return;
                };
                let h = v6.header();
                let tc = h.traffic_class();
                f.ip = Some(IpInfo {
                    src: IpAddr::V6(Ipv6Addr::from(h.source())),
                    dst: IpAddr::V6(Ipv6Addr::from(h.destination())),
                    dscp: tc >> 2,
                    ecn: tc & 3,
                    len: u32::from(h.payload_length()) + 40,
                });
                let ip_header = reborrow(f.data, h.slice());
                self.udp(f, ip_header, v6.payload());
            }
            _ => {}
        }
    }

    /// A UDP datagram to the RoCEv2 port carries a BTH; anything else stays `Other`.
    #[inline]
    fn udp<'a>(&self, f: &mut Frame<'a>, ip_header: &'a [u8], ip: &LaxIpPayloadSlice<'a>) {
        if ip.ip_number != IpNumber::UDP || ip.fragmented {
            return;
        }
        let Ok(udp) = UdpSlice::from_slice_lax(ip.payload) else {
            return;
        };
        let dport = udp.destination_port();
        if dport != ROCEV2_PORT && Some(dport) != self.extra_port {
            return;
        }
        // The UDP length is what the datagram had on the wire, even when the record was cut short.
        let wire_len = usize::from(udp.length()).saturating_sub(8);
        let icrc_input = IcrcInput {
            ip_header,
            udp: udp.slice(),
        };
        let bth_offset = offset_in(f.data, udp.payload());
        self.transport(
            f,
            udp.payload(),
            wire_len,
            bth_offset,
            2,
            Some(udp.source_port()),
            Some(icrc_input),
        );
    }

    fn roce_v1<'a>(&self, f: &mut Frame<'a>, bytes: &'a [u8]) {
        let grh = match GrhRepr::parse(bytes) {
            Ok(grh) => grh,
            Err(e) => {
                f.kind = Kind::Roce;
                let mut packet = LaxRocePacket::empty();
                packet.stop = Some(e);
                f.roce = Some(RoceInfo {
                    version: 1,
                    sport: None,
                    packet,
                    icrc: Icrc::Unknown,
                    payload_offset: 0,
                });
                return;
            }
        };
        f.ip = Some(IpInfo {
            src: IpAddr::V6(Ipv6Addr::from(grh.sgid)),
            dst: IpAddr::V6(Ipv6Addr::from(grh.dgid)),
            dscp: grh.tclass >> 2,
            ecn: grh.tclass & 3,
            len: u32::from(grh.payload_len) + GrhRepr::LEN as u32,
        });
        let rest = bytes.get(GrhRepr::LEN..).unwrap_or(&[]);
        let offset = offset_in(f.data, rest);
        // RoCEv1 ICRC covers the GRH with its own masking rules; only v2's is checked.
        self.transport(f, rest, usize::from(grh.payload_len), offset, 1, None, None);
    }

    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn transport<'a>(
        &self,
        f: &mut Frame<'a>,
        bytes: &'a [u8],
        wire_len: usize,
        bth_offset: usize,
        version: u8,
        sport: Option<u16>,
        icrc_input: Option<IcrcInput<'a>>,
    ) {
        // Filled where the frame keeps it: building the packet elsewhere and moving it in cost a copy per frame.
        let roce = f.roce.insert(RoceInfo {
            version,
            sport,
            packet: LaxRocePacket::empty(),
            icrc: Icrc::Unknown,
            payload_offset: bth_offset,
        });
        let lax = &mut roce.packet;
        lax.read(bytes, wire_len);
        roce.payload_offset += lax.header_len;
        let is_cnp = lax.bth.is_some_and(|b| b.opcode == Opcode::CNP);
        if let (Some(stored), Some(input), true) = (lax.icrc, icrc_input, self.check_icrc) {
            // Everything of the UDP datagram but its last 4 bytes (the ICRC itself) is covered.
            let covered = input.udp.len().saturating_sub(4);
            roce.icrc = match icrc_with(FastCrc::default(), input.ip_header, &input.udp[..covered])
            {
                Ok(computed) if computed == stored => Icrc::Ok,
                Ok(computed) => Icrc::Bad { stored, computed },
                Err(_) => Icrc::Unknown,
            };
        }
        f.kind = if is_cnp { Kind::Cnp } else { Kind::Roce };
    }
}

/// What a Linux cooked header says: the sender's MAC (when its address is one), the ethertype, the rest.
type Cooked<'a> = (Option<[u8; 6]>, u16, &'a [u8]);

/// Reads a Linux cooked header: the source link address (when 6 bytes long) and the protocol (an ethertype).
fn cooked(
    data: &[u8],
    header_len: usize,
    proto_at: usize,
    addr_len_at: usize,
    addr_at: usize,
) -> Option<Cooked<'_>> {
    let header = data.get(..header_len)?;
    let proto = u16::from_be_bytes([header[proto_at], header[proto_at + 1]]);
    let mac = if header[addr_len_at] == 6 {
        header[addr_at..addr_at + 6].try_into().ok()
    } else {
        None
    };
    Some((mac, proto, &data[header_len..]))
}

/// Position of `part` inside `whole`; both come from the same record, so the subtraction is in range.
fn offset_in(whole: &[u8], part: &[u8]) -> usize {
    (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize)
}

/// Re-slices `part` out of `whole`, giving it the record's lifetime rather than that of the header view
/// that produced it (etherparse ties some header slices to the view, not to the bytes).
fn reborrow<'a>(whole: &'a [u8], part: &[u8]) -> &'a [u8] {
    let at = offset_in(whole, part);
    whole.get(at..at + part.len()).unwrap_or(&[])
}

/// Formats a MAC address the way the JSON contract and tshark do: lowercase, colon-separated.
pub fn mac_to_string(mac: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]
    )
}
