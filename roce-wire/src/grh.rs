//! The 40-byte Global Route Header that carries RoCEv1 (ethertype 0x8915) in place of IP and UDP.
//!
//! Its layout is that of an IPv6 header with IB names: the GIDs play the part of addresses and the next header
//! is 0x1B (an IBA transport header).

use crate::error::{Error, Layer};
use crate::field::{get_u16, set_u16};

/// Ethertype of RoCEv1.
pub const ETHERTYPE_ROCE_V1: u16 = 0x8915;
/// Next-header value for a BTH.
pub const NEXT_HEADER_BTH: u8 = 0x1b;

/// Byte ranges of the GRH.
pub mod field {
    use crate::field::Field;
    /// IPVer (4 bits, always 6), TClass (8 bits), FlowLabel (20 bits).
    pub const VER_TC_FLOW: Field = 0..4;
    /// Payload length: bytes after the GRH, ICRC included.
    pub const PAYLOAD_LEN: Field = 4..6;
    /// Next header.
    pub const NEXT_HEADER: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source GID.
    pub const SGID: Field = 8..24;
    /// Destination GID.
    pub const DGID: Field = 24..40;
}

view!(
    /// A view of a GRH.
    Grh, Layer::Grh, 40
);

impl<T: AsRef<[u8]>> Grh<T> {
    fn word0(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    /// IP version nibble (6 in a valid GRH).
    pub fn ip_ver(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    /// Traffic class.
    pub fn tclass(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    /// Flow label, 20 bits.
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000f_ffff
    }
    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }
    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source GID.
    pub fn sgid(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g.copy_from_slice(&self.buffer.as_ref()[field::SGID]);
        g
    }
    /// Destination GID.
    pub fn dgid(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g.copy_from_slice(&self.buffer.as_ref()[field::DGID]);
        g
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Grh<T> {
    /// Sets version 6, the traffic class and the flow label (low 20 bits).
    pub fn set_ver_tclass_flow(&mut self, tclass: u8, flow_label: u32) {
        let w = (6u32 << 28) | (u32::from(tclass) << 20) | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }
    /// Sets the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::PAYLOAD_LEN, v)
    }
    /// Sets the next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v;
    }
    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }
    /// Sets the source GID.
    pub fn set_sgid(&mut self, g: [u8; 16]) {
        self.buffer.as_mut()[field::SGID].copy_from_slice(&g);
    }
    /// Sets the destination GID.
    pub fn set_dgid(&mut self, g: [u8; 16]) {
        self.buffer.as_mut()[field::DGID].copy_from_slice(&g);
    }
}

/// GRH fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GrhRepr {
    /// Traffic class (its low two bits are ECN, as in IPv6).
    pub tclass: u8,
    /// Flow label, 20 bits.
    pub flow_label: u32,
    /// Bytes after the GRH, ICRC included.
    pub payload_len: u16,
    /// Next header, [`NEXT_HEADER_BTH`] for RoCEv1.
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source GID.
    pub sgid: [u8; 16],
    /// Destination GID.
    pub dgid: [u8; 16],
}

impl GrhRepr {
    /// Length of the header.
    pub const LEN: usize = 40;

    /// Reads a GRH at the start of `bytes`; the version nibble must be 6.
    pub fn parse(bytes: &[u8]) -> Result<Self, Error> {
        let g = Grh::new_checked(bytes)?;
        if g.ip_ver() != 6 {
            return Err(Error::malformed(Layer::Grh, 0, "IPVer is not 6"));
        }
        Ok(GrhRepr {
            tclass: g.tclass(),
            flow_label: g.flow_label(),
            payload_len: g.payload_len(),
            next_header: g.next_header(),
            hop_limit: g.hop_limit(),
            sgid: g.sgid(),
            dgid: g.dgid(),
        })
    }

    /// Writes the header into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        if self.flow_label > 0x000f_ffff {
            return Err(Error::malformed(
                Layer::Grh,
                1,
                "flow label wider than 20 bits",
            ));
        }
        let mut g = Grh::new_checked(buf)?;
        g.set_ver_tclass_flow(self.tclass, self.flow_label);
        g.set_payload_len(self.payload_len);
        g.set_next_header(self.next_header);
        g.set_hop_limit(self.hop_limit);
        g.set_sgid(self.sgid);
        g.set_dgid(self.dgid);
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    static GRH: [u8; 40] = [
        0x6a, 0xb1, 0x23, 0x45, // version 6, tclass 0xab, flow label 0x12345
        0x00, 0x24, 0x1b, 0x40, // payload 36, next header BTH, hop limit 64
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55, // sgid
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x66, 0x77, 0xff, 0xfe, 0x88, 0x99, 0xaa, // dgid
    ];

    fn repr() -> GrhRepr {
        GrhRepr {
            tclass: 0xab,
            flow_label: 0x12345,
            payload_len: 36,
            next_header: NEXT_HEADER_BTH,
            hop_limit: 64,
            sgid: [
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
            ],
            dgid: [
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x66, 0x77, 0xff, 0xfe, 0x88, 0x99, 0xaa,
            ],
        }
    }

    #[test]
    fn deconstruct() {
        assert_eq!(GrhRepr::parse(&GRH), Ok(repr()));
        assert_eq!(Grh::new_checked(&GRH[..]).unwrap().ip_ver(), 6);
        let mut bad = GRH;
        bad[0] = 0x4a;
        assert!(matches!(
            GrhRepr::parse(&bad),
            Err(Error::Malformed {
                layer: Layer::Grh,
                ..
            })
        ));
        assert_eq!(
            GrhRepr::parse(&GRH[..39]),
            Err(Error::len(Layer::Grh, 40, 39))
        );
    }

    #[test]
    fn construct() {
        let mut buf = [0xffu8; 40];
        repr().emit(&mut buf).unwrap();
        assert_eq!(buf, GRH);
    }
}
