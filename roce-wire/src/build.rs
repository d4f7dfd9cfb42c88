//! Whole Ethernet frames, written into a caller's buffer: for tests and the packet simulator.
//!
//! Everything a receiver checks is filled in (IPv4 header checksum, UDP length, pad count, ICRC), so a frame
//! built here is one that tshark and a NIC would accept. Frames are padded to the 60-byte Ethernet minimum and
//! carry no FCS, as captures on Linux show them.

use crate::bth::BthRepr;
use crate::error::{Error, Layer, LenError};
use crate::ext::ExtHeaders;
use crate::icrc::icrc;
use crate::packet::{ICRC_LEN, RocePacket};
use crate::pfc::{ETHERTYPE_MAC_CONTROL, MacControlRepr, PAUSE_DST_MAC};

/// UDP destination port of RoCEv2.
pub const ROCE_V2_PORT: u16 = 4791;
/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Ethertype of an 802.1Q tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// Shortest Ethernet frame without FCS.
pub const ETHERNET_MIN_LEN: usize = 60;

const ETH_LEN: usize = 14;
const VLAN_LEN: usize = 4;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;

/// An 802.1Q tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Vlan {
    /// Priority code point, 0–7: the priority PFC acts on.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN ID, 12 bits.
    pub vid: u16,
}

impl Vlan {
    fn tci(&self) -> Result<u16, Error> {
        if self.pcp > 7 {
            return Err(Error::malformed(Layer::Vlan, 0, "PCP wider than 3 bits"));
        }
        if self.vid > 0x0fff {
            return Err(Error::malformed(
                Layer::Vlan,
                0,
                "VLAN ID wider than 12 bits",
            ));
        }
        Ok((u16::from(self.pcp) << 13) | (u16::from(self.dei) << 12) | self.vid)
    }
}

/// The IP header of a RoCEv2 frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpSpec {
    /// IPv4, with DF set and no options.
    V4 {
        /// Source address.
        src: [u8; 4],
        /// Destination address.
        dst: [u8; 4],
        /// DSCP, 6 bits.
        dscp: u8,
        /// ECN, 2 bits (3 = CE).
        ecn: u8,
        /// Time to live.
        ttl: u8,
        /// Identification.
        ident: u16,
    },
    /// IPv6 with UDP as the next header.
    V6 {
        /// Source address.
        src: [u8; 16],
        /// Destination address.
        dst: [u8; 16],
        /// DSCP, 6 bits.
        dscp: u8,
        /// ECN, 2 bits.
        ecn: u8,
        /// Flow label, 20 bits.
        flow_label: u32,
        /// Hop limit.
        hop_limit: u8,
    },
}

impl IpSpec {
    const fn header_len(&self) -> usize {
        match self {
            IpSpec::V4 { .. } => IPV4_LEN,
            IpSpec::V6 { .. } => IPV6_LEN,
        }
    }

    fn validate(&self) -> Result<(), Error> {
        let (layer, dscp, ecn) = match *self {
            IpSpec::V4 { dscp, ecn, .. } => (Layer::Ipv4, dscp, ecn),
            IpSpec::V6 {
                dscp,
                ecn,
                flow_label,
                ..
            } => {
                if flow_label > 0x000f_ffff {
                    return Err(Error::malformed(
                        Layer::Ipv6,
                        1,
                        "flow label wider than 20 bits",
                    ));
                }
                (Layer::Ipv6, dscp, ecn)
            }
        };
        if dscp > 63 {
            return Err(Error::malformed(layer, 1, "DSCP wider than 6 bits"));
        }
        if ecn > 3 {
            return Err(Error::malformed(layer, 1, "ECN wider than 2 bits"));
        }
        Ok(())
    }
}

/// The RFC 1071 checksum of an IPv4 header (whose checksum field is zero). Public for the code that edits
/// headers after they were built (options added, fields changed) and must put the checksum right again.
pub fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for pair in h.chunks(2) {
        let hi = pair.first().copied().unwrap_or(0);
        let lo = pair.get(1).copied().unwrap_or(0);
        sum += u32::from(u16::from_be_bytes([hi, lo]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Writes a 14-byte Ethernet header (plus a tag) and returns its length.
fn emit_ethernet(
    dst: [u8; 6],
    src: [u8; 6],
    vlan: Option<Vlan>,
    ethertype: u16,
    buf: &mut [u8],
) -> Result<usize, Error> {
    let mut off = 0;
    buf[0..6].copy_from_slice(&dst);
    buf[6..12].copy_from_slice(&src);
    off += 12;
    if let Some(v) = vlan {
        let tci = v.tci().map_err(|e| e.shifted(12))?;
        buf[off..off + 2].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        buf[off + 2..off + 4].copy_from_slice(&tci.to_be_bytes());
        off += VLAN_LEN;
    }
    buf[off..off + 2].copy_from_slice(&ethertype.to_be_bytes());
    Ok(off + 2)
}

/// A RoCEv2 frame to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoceFrame<'a> {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Optional 802.1Q tag.
    pub vlan: Option<Vlan>,
    /// IP header.
    pub ip: IpSpec,
    /// UDP source port (the flow's entropy).
    pub sport: u16,
    /// BTH; `pad_count` is ignored and set from the payload length.
    pub bth: BthRepr,
    /// Extension headers; they must be exactly those the opcode calls for.
    pub ext: ExtHeaders,
    /// Payload (for a CNP, its 16 reserved bytes).
    pub payload: &'a [u8],
}

impl RoceFrame<'_> {
    fn l2_len(&self) -> usize {
        ETH_LEN + if self.vlan.is_some() { VLAN_LEN } else { 0 }
    }

    /// Offset of the IP header in the frame.
    pub fn ip_offset(&self) -> usize {
        self.l2_len()
    }

    /// Offset of the UDP header in the frame.
    pub fn udp_offset(&self) -> usize {
        self.l2_len() + self.ip.header_len()
    }

    /// Length of the UDP payload: the IB transport packet, ICRC included.
    pub fn roce_len(&self) -> usize {
        RocePacket::emit_len(&self.ext, self.payload.len())
    }

    /// Length of the whole frame as [`RoceFrame::emit`] writes it (at least 60 bytes, no FCS).
    pub fn len(&self) -> usize {
        (self.udp_offset() + UDP_LEN + self.roce_len()).max(ETHERNET_MIN_LEN)
    }

    /// Never empty; here for symmetry with `len`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes the frame into the start of `buf` and returns its length. Fails when a field does not fit its
    /// width, when the extension headers are not those the opcode calls for, when the packet is too long for the
    /// IP or UDP length fields, or when `buf` is shorter than [`RoceFrame::len`] (an `Ethernet` length error).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let pkt = RocePacket::new(self.bth, self.ext, self.payload)?;
        self.ip.validate()?;
        let total = self.len();
        let udp_off = self.udp_offset();
        let ip_off = self.ip_offset();
        let roce_len = self.roce_len();
        let udp_len = UDP_LEN + roce_len;
        let udp_len16 = u16::try_from(udp_len)
            .map_err(|_| Error::malformed(Layer::Udp, udp_off + 4, "packet too long for UDP"))?;
        let ip_total = u16::try_from(IPV4_LEN + udp_len)
            .map_err(|_| Error::malformed(Layer::Ipv4, ip_off + 2, "packet too long for IPv4"))?;
        if buf.len() < total {
            return Err(Error::Len(LenError::new(Layer::Ethernet, total, buf.len())));
        }
        let buf = &mut buf[..total];
        buf.fill(0);
        let ethertype = match self.ip {
            IpSpec::V4 { .. } => ETHERTYPE_IPV4,
            IpSpec::V6 { .. } => ETHERTYPE_IPV6,
        };
        emit_ethernet(self.dst_mac, self.src_mac, self.vlan, ethertype, buf)?;

        match self.ip {
            IpSpec::V4 {
                src,
                dst,
                dscp,
                ecn,
                ttl,
                ident,
            } => {
                let h = &mut buf[ip_off..ip_off + IPV4_LEN];
                h[0] = 0x45;
                h[1] = (dscp << 2) | ecn;
                h[2..4].copy_from_slice(&ip_total.to_be_bytes());
                h[4..6].copy_from_slice(&ident.to_be_bytes());
                h[6] = 0x40; // DF: RoCE is never fragmented
                h[8] = ttl;
                h[9] = 17;
                h[12..16].copy_from_slice(&src);
                h[16..20].copy_from_slice(&dst);
                let c = ipv4_checksum(h);
                h[10..12].copy_from_slice(&c.to_be_bytes());
            }
            IpSpec::V6 {
                src,
                dst,
                dscp,
                ecn,
                flow_label,
                hop_limit,
            } => {
                let h = &mut buf[ip_off..ip_off + IPV6_LEN];
                let tc = u32::from((dscp << 2) | ecn);
                let w = (6u32 << 28) | (tc << 20) | flow_label;
                h[0..4].copy_from_slice(&w.to_be_bytes());
                h[4..6].copy_from_slice(&udp_len16.to_be_bytes());
                h[6] = 17;
                h[7] = hop_limit;
                h[8..24].copy_from_slice(&src);
                h[24..40].copy_from_slice(&dst);
            }
        }

        let u = &mut buf[udp_off..udp_off + UDP_LEN];
        u[0..2].copy_from_slice(&self.sport.to_be_bytes());
        u[2..4].copy_from_slice(&ROCE_V2_PORT.to_be_bytes());
        u[4..6].copy_from_slice(&udp_len16.to_be_bytes());
        // Checksum 0: RoCEv2 relies on the ICRC, and RFC 6935 allows a zero UDP checksum for such tunnels on IPv6.

        let roce_off = udp_off + UDP_LEN;
        pkt.emit(&mut buf[roce_off..roce_off + roce_len])
            .map_err(|e| e.shifted(roce_off))?;
        let icrc_off = roce_off + roce_len - ICRC_LEN;
        let (head, tail) = buf.split_at_mut(icrc_off);
        let crc = icrc(&head[ip_off..udp_off], &head[udp_off..])?;
        tail[..ICRC_LEN].copy_from_slice(&crc.to_le_bytes());
        Ok(total)
    }
}

/// Writes a MAC Control frame (PAUSE, PFC or another opcode) to 01:80:c2:00:00:01, padded with zeros to the
/// 60-byte minimum (no FCS), and returns its length.
pub fn emit_mac_control(
    src_mac: [u8; 6],
    vlan: Option<Vlan>,
    ctl: &MacControlRepr,
    buf: &mut [u8],
) -> Result<usize, Error> {
    let l2 = ETH_LEN + if vlan.is_some() { VLAN_LEN } else { 0 };
    let total = (l2 + ctl.len()).max(ETHERNET_MIN_LEN);
    if buf.len() < total {
        return Err(Error::Len(LenError::new(Layer::Ethernet, total, buf.len())));
    }
    let buf = &mut buf[..total];
    buf.fill(0);
    emit_ethernet(PAUSE_DST_MAC, src_mac, vlan, ETHERTYPE_MAC_CONTROL, buf)?;
    ctl.emit(&mut buf[l2..]).map_err(|e| e.shifted(l2))?;
    Ok(total)
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::pfc::PfcRepr;
    use crate::{Opcode, icrc::icrc_matches};

    #[test]
    fn ipv4_checksum_of_a_captured_header() {
        // The IPv4 header of the CNP in scapy_roce_uts_cx4lx_cnp.pcap, checksum 0x9161.
        let mut h = [
            0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0x0a, 0x00,
            0x11, 0x01, 0x0a, 0x00, 0x12, 0x01,
        ];
        assert_eq!(ipv4_checksum(&h), 0x9161);
        h[10] = 0x91;
        h[11] = 0x61;
        assert_eq!(ipv4_checksum(&h), 0);
    }

    #[test]
    fn rebuild_the_hardware_cnp_byte_for_byte() {
        let frame = RoceFrame {
            src_mac: [0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32],
            dst_mac: [0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2],
            vlan: None,
            ip: IpSpec::V4 {
                src: [10, 0, 17, 1],
                dst: [10, 0, 18, 1],
                dscp: 48,
                ecn: 2,
                ttl: 64,
                ident: 0x718c,
            },
            sport: 0,
            bth: BthRepr::cnp(0x118),
            ext: ExtHeaders::default(),
            payload: &[0; 16],
        };
        let mut buf = [0u8; 80];
        let n = frame.emit(&mut buf).unwrap();
        assert_eq!(n, 74);
        let expect: [u8; 74] = [
            0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2, 0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32, 0x08, 0x00,
            0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00,
            0x11, 0x01, 0x0a, 0x00, 0x12, 0x01, 0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00,
            0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x82, 0xfd, 0x00, 0x2a,
        ];
        assert_eq!(buf[..n], expect);
    }

    #[test]
    fn short_frames_are_padded_and_icrc_found_by_udp_length() {
        let frame = RoceFrame {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            vlan: None,
            ip: IpSpec::V4 {
                src: [10, 0, 0, 1],
                dst: [10, 0, 0, 2],
                dscp: 26,
                ecn: 3,
                ttl: 64,
                ident: 7,
            },
            sport: 49152,
            bth: BthRepr {
                opcode: Opcode::RC_SEND_ONLY,
                becn: false,
                pkey: 0xffff,
                ..BthRepr::cnp(0x11)
            },
            ext: ExtHeaders::default(),
            payload: b"",
        };
        let mut buf = [0xeeu8; 64];
        let n = frame.emit(&mut buf).unwrap();
        assert_eq!(n, 60);
        assert_eq!(frame.roce_len(), 12 + 4);
        let udp = frame.udp_offset();
        assert!(icrc_matches(&buf[14..34], &buf[udp..udp + 8 + frame.roce_len()]).unwrap());
        assert_eq!(&buf[udp + 8 + frame.roce_len()..n], &[0, 0]);
        assert!(frame.emit(&mut buf[..59]).unwrap_err().is_len());
    }

    #[test]
    fn invalid_specs_are_rejected() {
        let base = RoceFrame {
            src_mac: [0; 6],
            dst_mac: [0; 6],
            vlan: Some(Vlan {
                pcp: 8,
                dei: false,
                vid: 1,
            }),
            ip: IpSpec::V4 {
                src: [0; 4],
                dst: [0; 4],
                dscp: 0,
                ecn: 0,
                ttl: 1,
                ident: 0,
            },
            sport: 1,
            bth: BthRepr::cnp(1),
            ext: ExtHeaders::default(),
            payload: &[0; 16],
        };
        let mut buf = [0u8; 128];
        assert!(matches!(
            base.emit(&mut buf),
            Err(Error::Malformed {
                layer: Layer::Vlan,
                ..
            })
        ));
        let f = RoceFrame {
            vlan: None,
            ip: IpSpec::V4 {
                src: [0; 4],
                dst: [0; 4],
                dscp: 64,
                ecn: 0,
                ttl: 1,
                ident: 0,
            },
            ..base
        };
        assert!(matches!(
            f.emit(&mut buf),
            Err(Error::Malformed {
                layer: Layer::Ipv4,
                ..
            })
        ));
        let f = RoceFrame {
            vlan: None,
            ext: ExtHeaders {
                imm: Some(1),
                ..ExtHeaders::default()
            },
            ..base
        };
        assert!(matches!(
            f.emit(&mut buf),
            Err(Error::Malformed {
                layer: Layer::Bth,
                ..
            })
        ));
    }

    #[test]
    fn pfc_frame() {
        let pfc = MacControlRepr::Pfc(PfcRepr {
            enable: 0x08,
            quanta: [0, 0, 0, 0xffff, 0, 0, 0, 0],
        });
        let mut buf = [0xaau8; 64];
        let n = emit_mac_control(
            [2, 0, 0, 0, 0, 9],
            Some(Vlan {
                pcp: 3,
                dei: false,
                vid: 100,
            }),
            &pfc,
            &mut buf,
        )
        .unwrap();
        assert_eq!(n, 60);
        assert_eq!(&buf[..6], &PAUSE_DST_MAC);
        assert_eq!(&buf[12..18], &[0x81, 0x00, 0x60, 0x64, 0x88, 0x08]);
        assert_eq!(MacControlRepr::parse(&buf[18..n]), Ok(pfc));
        assert!(buf[38..60].iter().all(|&b| b == 0));
    }
}
