//! The invariant CRC (ICRC) that ends every RoCE packet.
//!
//! It is the Ethernet CRC-32 over the parts of the packet that no router may change: the fields a hop rewrites
//! (IP TOS/traffic class, TTL/hop limit, IPv4 checksum, IPv6 flow label, UDP checksum, and BTH byte 4 with FECN
//! and BECN) are replaced by ones before hashing, and 8 bytes of ones stand in for the InfiniBand LRH that RoCE
//! does not carry (IBTA annex A17.8). It is stored least-significant byte first.
//!
//! The CRC itself is behind the small [`Crc32`] trait so that a caller with a faster implementation (for example
//! `crc32fast::Hasher` in a crate that may depend on it) can plug it in; [`SoftCrc32`] is the table-driven
//! fallback this crate ships.

use crate::error::{Error, Layer};

/// A running CRC-32 in the IEEE 802.3 flavour: reflected polynomial 0xEDB88320, initial value all ones, final
/// complement.
pub trait Crc32 {
    /// Feeds bytes.
    fn update(&mut self, bytes: &[u8]);
    /// The CRC of everything fed.
    fn finish(self) -> u32;
}

const POLY: u32 = 0xedb8_8320;

/// Eight lookup tables for slice-by-8: table `k` advances the CRC over a byte followed by `k` zero bytes.
const fn make_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut j = 1;
        while j < 8 {
            let prev = t[j - 1][i];
            t[j][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            j += 1;
        }
        i += 1;
    }
    t
}

static TABLES: [[u32; 256]; 8] = make_tables();

/// Table-driven CRC-32 (slice-by-8, tables computed at compile time). Roughly 1–2 GB/s on one core, which is ample
/// for captures.
#[derive(Clone, Copy, Debug)]
pub struct SoftCrc32 {
    state: u32,
}

impl Default for SoftCrc32 {
    fn default() -> Self {
        SoftCrc32 { state: !0 }
    }
}

impl SoftCrc32 {
    /// A fresh CRC.
    pub fn new() -> Self {
        Self::default()
    }
}

#[inline]
fn t(k: usize, idx: u32) -> u32 {
    TABLES[k][(idx & 0xff) as usize]
}

impl Crc32 for SoftCrc32 {
    fn update(&mut self, bytes: &[u8]) {
        let mut crc = self.state;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let lo = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) ^ crc;
            let hi = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
            crc = t(7, lo)
                ^ t(6, lo >> 8)
                ^ t(5, lo >> 16)
                ^ t(4, lo >> 24)
                ^ t(3, hi)
                ^ t(2, hi >> 8)
                ^ t(1, hi >> 16)
                ^ t(0, hi >> 24);
        }
        for &b in chunks.remainder() {
            crc = (crc >> 8) ^ t(0, crc ^ u32::from(b));
        }
        self.state = crc;
    }

    fn finish(self) -> u32 {
        !self.state
    }
}

/// CRC-32 (IEEE) of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut h = SoftCrc32::new();
    h.update(bytes);
    h.finish()
}

const IPV4_MIN: usize = 20;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;
const BTH_LEN: usize = 12;
const PSEUDO_LRH: [u8; 8] = [0xff; 8];

/// Feeds a 40-byte IPv6 header or GRH with traffic class, flow label and hop limit set to ones.
fn feed_v6_masked<H: Crc32>(h: &mut H, hdr: &[u8], layer: Layer) -> Result<(), Error> {
    if hdr.len() < IPV6_LEN {
        return Err(Error::len(layer, IPV6_LEN, hdr.len()));
    }
    let mut b = [0u8; IPV6_LEN];
    b.copy_from_slice(&hdr[..IPV6_LEN]);
    b[0] |= 0x0f;
    b[1] = 0xff;
    b[2] = 0xff;
    b[3] = 0xff;
    b[7] = 0xff;
    h.update(&b);
    Ok(())
}

/// Feeds a BTH with byte 4 (FECN, BECN, reserved) set to ones, then the rest.
fn feed_bth_and_rest<H: Crc32>(h: &mut H, bth_on: &[u8], offset: usize) -> Result<(), Error> {
    if bth_on.len() < BTH_LEN {
        return Err(Error::len(Layer::Bth, BTH_LEN, bth_on.len()).shifted(offset));
    }
    let mut b = [0u8; BTH_LEN];
    b.copy_from_slice(&bth_on[..BTH_LEN]);
    b[4] = 0xff;
    h.update(&b);
    h.update(&bth_on[BTH_LEN..]);
    Ok(())
}

/// ICRC of a RoCEv2 packet, with a CRC implementation of the caller's choice.
///
/// `ip_header` is the IPv4 header including its options (exactly IHL × 4 bytes), or the fixed 40-byte IPv6
/// header. IPv6 extension headers are not supported: RoCEv2 puts UDP right after the fixed header, and the annex
/// does not say how extension headers would be covered, so an IPv6 header whose next header is not UDP is
/// rejected rather than guessed at. `udp_to_icrc` is the UDP header, the BTH and everything after it up to but
/// excluding the 4 ICRC bytes. Errors name the layer that is too short or inconsistent; offsets in them are
/// relative to `ip_header` for IP errors and to `udp_to_icrc` otherwise.
pub fn icrc_with<H: Crc32>(hasher: H, ip_header: &[u8], udp_to_icrc: &[u8]) -> Result<u32, Error> {
    let mut h = hasher;
    h.update(&PSEUDO_LRH);
    match ip_header.first().map(|b| b >> 4) {
        Some(4) => {
            if ip_header.len() < IPV4_MIN {
                return Err(Error::len(Layer::Ipv4, IPV4_MIN, ip_header.len()));
            }
            let ihl = usize::from(ip_header[0] & 0x0f) * 4;
            if ihl < IPV4_MIN {
                return Err(Error::malformed(Layer::Ipv4, 0, "IHL is below 5"));
            }
            if ip_header.len() < ihl {
                return Err(Error::len(Layer::Ipv4, ihl, ip_header.len()));
            }
            if ip_header.len() > ihl {
                return Err(Error::malformed(
                    Layer::Ipv4,
                    0,
                    "more bytes given than the IHL says",
                ));
            }
            let mut b = [0u8; IPV4_MIN];
            b.copy_from_slice(&ip_header[..IPV4_MIN]);
            b[1] = 0xff; // TOS: DSCP and ECN
            b[8] = 0xff; // TTL
            b[10] = 0xff; // header checksum
            b[11] = 0xff;
            h.update(&b);
            h.update(&ip_header[IPV4_MIN..]);
        }
        Some(6) => {
            if ip_header.len() > IPV6_LEN {
                return Err(Error::malformed(
                    Layer::Ipv6,
                    IPV6_LEN,
                    "only the fixed 40-byte IPv6 header is covered",
                ));
            }
            if ip_header.len() == IPV6_LEN && ip_header[6] != 17 {
                return Err(Error::malformed(
                    Layer::Ipv6,
                    6,
                    "IPv6 extension headers are not supported by the ICRC",
                ));
            }
            feed_v6_masked(&mut h, ip_header, Layer::Ipv6)?;
        }
        None => return Err(Error::len(Layer::Ipv4, IPV4_MIN, 0)),
        Some(_) => {
            return Err(Error::malformed(
                Layer::Ipv4,
                0,
                "IP version is neither 4 nor 6",
            ));
        }
    }
    if udp_to_icrc.len() < UDP_LEN {
        return Err(Error::len(Layer::Udp, UDP_LEN, udp_to_icrc.len()));
    }
    let mut udp = [0u8; UDP_LEN];
    udp.copy_from_slice(&udp_to_icrc[..UDP_LEN]);
    udp[6] = 0xff; // checksum
    udp[7] = 0xff;
    h.update(&udp);
    feed_bth_and_rest(&mut h, &udp_to_icrc[UDP_LEN..], UDP_LEN)?;
    Ok(h.finish())
}

/// ICRC of a RoCEv2 packet with [`SoftCrc32`]; see [`icrc_with`].
pub fn icrc(ip_header: &[u8], udp_to_icrc: &[u8]) -> Result<u32, Error> {
    icrc_with(SoftCrc32::new(), ip_header, udp_to_icrc)
}

/// Checks the ICRC of a whole UDP datagram (`udp_datagram` ends with the 4 ICRC bytes). `Ok(false)` means the
/// bytes are all there and the CRC is wrong.
pub fn icrc_matches(ip_header: &[u8], udp_datagram: &[u8]) -> Result<bool, Error> {
    let need = UDP_LEN + BTH_LEN + 4;
    if udp_datagram.len() < need {
        return Err(Error::len(Layer::Udp, need, udp_datagram.len()));
    }
    let (covered, stored) = udp_datagram.split_at(udp_datagram.len() - 4);
    let stored = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
    Ok(icrc(ip_header, covered)? == stored)
}

/// ICRC of a RoCEv1 packet: `grh` is the 40-byte GRH, `bth_to_icrc` the BTH and everything after it up to but
/// excluding the ICRC.
///
/// The GRH is masked like an IPv6 header (traffic class, flow label, hop limit), with the same 8-byte pseudo LRH
/// of ones before it (IBTA annex A16). No RoCEv1 capture was at hand to check this against real hardware; only
/// RoCEv2 is checked against captured packets.
pub fn icrc_v1_with<H: Crc32>(hasher: H, grh: &[u8], bth_to_icrc: &[u8]) -> Result<u32, Error> {
    let mut h = hasher;
    h.update(&PSEUDO_LRH);
    if grh.len() > IPV6_LEN {
        return Err(Error::malformed(
            Layer::Grh,
            IPV6_LEN,
            "a GRH is exactly 40 bytes",
        ));
    }
    feed_v6_masked(&mut h, grh, Layer::Grh)?;
    feed_bth_and_rest(&mut h, bth_to_icrc, 0)?;
    Ok(h.finish())
}

/// [`icrc_v1_with`] with [`SoftCrc32`].
pub fn icrc_v1(grh: &[u8], bth_to_icrc: &[u8]) -> Result<u32, Error> {
    icrc_v1_with(SoftCrc32::new(), grh, bth_to_icrc)
}

#[cfg(test)]
mod test {
    use super::*;

    /// Bit-at-a-time reference, independent of the tables.
    fn slow_crc(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            }
        }
        !c
    }

    #[test]
    fn crc32_check_values() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
        let data: [u8; 100] = core::array::from_fn(|i| (i * 37 + 11) as u8);
        for start in 0..20 {
            for end in start..100 {
                assert_eq!(crc32(&data[start..end]), slow_crc(&data[start..end]));
            }
        }
        // Split updates give the same CRC.
        let mut h = SoftCrc32::new();
        h.update(&data[..13]);
        h.update(&data[13..]);
        assert_eq!(h.finish(), crc32(&data));
    }

    // The CNP of scapy_roce_uts_cx4lx_cnp.pcap (ConnectX-4 Lx): DSCP 48, ECT(0), TTL 64.
    static CNP_IP: [u8; 20] = [
        0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00, 0x11,
        0x01, 0x0a, 0x00, 0x12, 0x01,
    ];
    static CNP_UDP: [u8; 40] = [
        0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, // UDP
        0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00, // BTH
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // reserved
        0x82, 0xfd, 0x00, 0x2a, // ICRC
    ];

    #[test]
    fn hardware_cnp_icrc() {
        assert_eq!(icrc(&CNP_IP, &CNP_UDP[..36]), Ok(0x2a00_fd82));
        assert_eq!(icrc_matches(&CNP_IP, &CNP_UDP), Ok(true));
        // The masked fields do not matter ...
        let mut ip = CNP_IP;
        ip[1] = 0x03; // CE
        ip[8] = 0x01;
        ip[10] = 0;
        let mut udp = CNP_UDP;
        udp[6] = 0x12;
        udp[12] = 0x80; // FECN instead of BECN
        assert_eq!(icrc_matches(&ip, &udp), Ok(true));
        // ... every other byte does.
        for i in 0..36 {
            if [6, 7, 12].contains(&i) {
                continue;
            }
            let mut udp = CNP_UDP;
            udp[i] ^= 0x01;
            assert_eq!(icrc_matches(&CNP_IP, &udp), Ok(false), "udp byte {i}");
        }
        for i in [2usize, 3, 4, 5, 6, 7, 9, 12, 19] {
            let mut ip = CNP_IP;
            ip[i] ^= 0x10;
            assert_eq!(icrc_matches(&ip, &CNP_UDP), Ok(false), "ip byte {i}");
        }
    }

    #[test]
    fn ip_header_errors() {
        assert_eq!(icrc(&[], &CNP_UDP), Err(Error::len(Layer::Ipv4, 20, 0)));
        assert_eq!(
            icrc(&CNP_IP[..19], &CNP_UDP),
            Err(Error::len(Layer::Ipv4, 20, 19))
        );
        let mut ip = [0u8; 24];
        ip[..20].copy_from_slice(&CNP_IP);
        assert!(matches!(
            icrc(&ip, &CNP_UDP),
            Err(Error::Malformed {
                layer: Layer::Ipv4,
                ..
            })
        ));
        ip[0] = 0x46;
        assert!(icrc(&ip, &CNP_UDP).is_ok());
        assert_eq!(
            icrc(&ip[..22], &CNP_UDP),
            Err(Error::len(Layer::Ipv4, 24, 22))
        );
        assert_eq!(
            icrc(&CNP_IP, &CNP_UDP[..7]),
            Err(Error::len(Layer::Udp, 8, 7))
        );
        assert_eq!(
            icrc(&CNP_IP, &CNP_UDP[..19]),
            Err(Error::len(Layer::Bth, 12, 11).shifted(8))
        );
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        v6[6] = 0; // hop-by-hop options
        assert!(matches!(
            icrc(&v6, &CNP_UDP),
            Err(Error::Malformed {
                layer: Layer::Ipv6,
                offset: 6,
                ..
            })
        ));
        assert_eq!(
            icrc(&v6[..39], &CNP_UDP),
            Err(Error::len(Layer::Ipv6, 40, 39))
        );
    }
}
