//! The 12-byte Base Transport Header that starts every InfiniBand transport packet.

use crate::error::{Error, Layer, check_len};
use crate::field::{get_u16, get_u24, set_u16, set_u24};
use crate::opcode::Opcode;

/// Byte ranges of the BTH fields.
pub mod field {
    use crate::field::Field;
    /// OpCode.
    pub const OPCODE: usize = 0;
    /// SE (bit 7), MigReq (bit 6), PadCnt (bits 5–4), TVer (bits 3–0).
    pub const FLAGS: usize = 1;
    /// Partition key.
    pub const PKEY: Field = 2..4;
    /// FECN (bit 7), BECN (bit 6), six reserved bits. The ICRC masks this whole byte.
    pub const FECN_BECN: usize = 4;
    /// Destination QP number, 24 bits.
    pub const DEST_QP: Field = 5..8;
    /// AckReq (bit 7), seven reserved bits.
    pub const ACK_REQ: usize = 8;
    /// Packet sequence number, 24 bits.
    pub const PSN: Field = 9..12;
}

/// A read/write view of a BTH at the start of a buffer.
///
/// Once [`Bth::new_checked`] has succeeded no accessor can panic; [`Bth::new_unchecked`] leaves that check to the
/// caller (accessors on a short buffer then panic, which is only acceptable for buffers the caller sized itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Bth<T> {
    /// Length of the header.
    pub const LEN: usize = 12;

    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        Bth { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole BTH (it may hold more).
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        check_len(Layer::Bth, buffer.as_ref(), Self::LEN)?;
        Ok(Bth { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// OpCode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref()[field::OPCODE])
    }
    /// Solicited event.
    pub fn se(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x80 != 0
    }
    /// Migration request.
    pub fn migreq(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x40 != 0
    }
    /// Number of pad bytes (0–3) between payload and ICRC.
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 4) & 0x3
    }
    /// Transport header version; 0 is the only one defined.
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0x0f
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::PKEY)
    }
    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::FECN_BECN] & 0x80 != 0
    }
    /// Backward explicit congestion notification (set on every CNP).
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::FECN_BECN] & 0x40 != 0
    }
    /// The six reserved bits of byte 4 (right-aligned); senders set them to 0.
    pub fn reserved_4(&self) -> u8 {
        self.buffer.as_ref()[field::FECN_BECN] & 0x3f
    }
    /// Destination QP.
    pub fn dest_qp(&self) -> u32 {
        get_u24(self.buffer.as_ref(), field::DEST_QP)
    }
    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK_REQ] & 0x80 != 0
    }
    /// The seven reserved bits of byte 8 (right-aligned).
    pub fn reserved_8(&self) -> u8 {
        self.buffer.as_ref()[field::ACK_REQ] & 0x7f
    }
    /// Packet sequence number.
    pub fn psn(&self) -> u32 {
        get_u24(self.buffer.as_ref(), field::PSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    fn set_bit(&mut self, byte: usize, mask: u8, on: bool) {
        let b = &mut self.buffer.as_mut()[byte];
        if on {
            *b |= mask;
        } else {
            *b &= !mask;
        }
    }
    /// Sets the opcode.
    pub fn set_opcode(&mut self, value: Opcode) {
        self.buffer.as_mut()[field::OPCODE] = value.0;
    }
    /// Sets the solicited event bit.
    pub fn set_se(&mut self, value: bool) {
        self.set_bit(field::FLAGS, 0x80, value);
    }
    /// Sets the migration request bit.
    pub fn set_migreq(&mut self, value: bool) {
        self.set_bit(field::FLAGS, 0x40, value);
    }
    /// Sets the pad count; only the low two bits are kept.
    pub fn set_pad_count(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !0x30) | ((value & 0x3) << 4);
    }
    /// Sets the transport version; only the low four bits are kept.
    pub fn set_tver(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !0x0f) | (value & 0x0f);
    }
    /// Sets the partition key.
    pub fn set_pkey(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), field::PKEY, value);
    }
    /// Sets FECN.
    pub fn set_fecn(&mut self, value: bool) {
        self.set_bit(field::FECN_BECN, 0x80, value);
    }
    /// Sets BECN.
    pub fn set_becn(&mut self, value: bool) {
        self.set_bit(field::FECN_BECN, 0x40, value);
    }
    /// Sets the destination QP; only the low 24 bits are kept.
    pub fn set_dest_qp(&mut self, value: u32) {
        set_u24(self.buffer.as_mut(), field::DEST_QP, value);
    }
    /// Sets the acknowledge request bit.
    pub fn set_ack_req(&mut self, value: bool) {
        self.set_bit(field::ACK_REQ, 0x80, value);
    }
    /// Sets the PSN; only the low 24 bits are kept.
    pub fn set_psn(&mut self, value: u32) {
        set_u24(self.buffer.as_mut(), field::PSN, value);
    }
    /// Zeroes the reserved bits of bytes 4 and 8, as a sender must.
    pub fn clear_reserved(&mut self) {
        let buf = self.buffer.as_mut();
        buf[field::FECN_BECN] &= 0xc0;
        buf[field::ACK_REQ] &= 0x80;
    }
}

/// The fields of a BTH, owned. Reserved bits are not kept: they are zero when emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// OpCode.
    pub opcode: Opcode,
    /// Solicited event.
    pub se: bool,
    /// Migration request.
    pub migreq: bool,
    /// Pad bytes before the ICRC, 0–3.
    pub pad_count: u8,
    /// Transport header version, 0–15 (0 is the only defined value).
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward ECN.
    pub fecn: bool,
    /// Backward ECN.
    pub becn: bool,
    /// Destination QP, 24 bits.
    pub dest_qp: u32,
    /// Acknowledge request.
    pub ack_req: bool,
    /// Packet sequence number, 24 bits.
    pub psn: u32,
}

impl BthRepr {
    /// Length of the header.
    pub const LEN: usize = 12;

    /// Reads the fields of a BTH at the start of `bytes`. Any opcode and version are accepted here: the packet
    /// parser decides what it can make of them.
    #[inline]
    pub fn parse(bytes: &[u8]) -> Result<Self, Error> {
        // A fixed-size array lets the compiler drop the bounds check of every field read: this runs per frame.
        let Some(fixed) = bytes.first_chunk::<{ Self::LEN }>() else {
            return Err(Error::len(Layer::Bth, Self::LEN, bytes.len()));
        };
        Ok(Self::from_view(&Bth { buffer: fixed }))
    }

    /// Reads the fields of a checked view.
    pub fn from_view<T: AsRef<[u8]>>(h: &Bth<T>) -> Self {
        BthRepr {
            opcode: h.opcode(),
            se: h.se(),
            migreq: h.migreq(),
            pad_count: h.pad_count(),
            tver: h.tver(),
            pkey: h.pkey(),
            fecn: h.fecn(),
            becn: h.becn(),
            dest_qp: h.dest_qp(),
            ack_req: h.ack_req(),
            psn: h.psn(),
        }
    }

    /// Writes the header into the first 12 bytes of `buf`. Fails rather than truncate a field that is too wide.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        self.validate()?;
        let mut h = Bth::new_checked(buf)?;
        h.set_opcode(self.opcode);
        let flags = (u8::from(self.se) << 7)
            | (u8::from(self.migreq) << 6)
            | (self.pad_count << 4)
            | self.tver;
        h.buffer[field::FLAGS] = flags;
        h.set_pkey(self.pkey);
        h.buffer[field::FECN_BECN] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        h.set_dest_qp(self.dest_qp);
        h.buffer[field::ACK_REQ] = u8::from(self.ack_req) << 7;
        h.set_psn(self.psn);
        Ok(())
    }

    /// Checks that every field fits its width on the wire.
    pub fn validate(&self) -> Result<(), Error> {
        if self.pad_count > 3 {
            return Err(Error::malformed(
                Layer::Bth,
                field::FLAGS,
                "pad count wider than 2 bits",
            ));
        }
        if self.tver > 0x0f {
            return Err(Error::malformed(
                Layer::Bth,
                field::FLAGS,
                "transport version wider than 4 bits",
            ));
        }
        if self.dest_qp > 0x00ff_ffff {
            return Err(Error::malformed(
                Layer::Bth,
                field::DEST_QP.start,
                "dest QP wider than 24 bits",
            ));
        }
        if self.psn > 0x00ff_ffff {
            return Err(Error::malformed(
                Layer::Bth,
                field::PSN.start,
                "PSN wider than 24 bits",
            ));
        }
        Ok(())
    }

    /// A BTH as a sender usually fills it: the default partition (P_Key 0xFFFF), TVer 0, every flag clear;
    /// the pad count is what the payload needs, which frame builders set when they emit. Callers change the
    /// flags they need with struct update syntax.
    pub const fn new(opcode: Opcode, dest_qp: u32, psn: u32) -> Self {
        BthRepr {
            opcode,
            se: false,
            migreq: false,
            pad_count: 0,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: dest_qp & 0x00ff_ffff,
            ack_req: false,
            psn: psn & 0x00ff_ffff,
        }
    }

    /// The BTH of a RoCEv2 CNP sent to the data sender's `dest_qp`: opcode 0x81, P_Key 0xFFFF, BECN set, every
    /// other field zero (RoCEv2 annex A17.9).
    pub const fn cnp(dest_qp: u32) -> Self {
        BthRepr {
            becn: true,
            ..BthRepr::new(Opcode::CNP, dest_qp, 0)
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    // RC RDMA WRITE ONLY from test.pcap, frame 4: SE 0, M 0, pad 2, P_Key 0xffff, QP 0x11, A 1, PSN 0xc23298.
    static WRITE_ONLY: [u8; 12] = [
        0x0a, 0x20, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0xc2, 0x32, 0x98,
    ];
    static CNP: [u8; 12] = [
        0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x00, 0xd2, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn deconstruct() {
        let h = Bth::new_checked(&WRITE_ONLY[..]).unwrap();
        assert_eq!(h.opcode(), Opcode::RC_RDMA_WRITE_ONLY);
        assert!(!h.se());
        assert!(!h.migreq());
        assert_eq!(h.pad_count(), 2);
        assert_eq!(h.tver(), 0);
        assert_eq!(h.pkey(), 0xffff);
        assert!(!h.fecn() && !h.becn());
        assert_eq!(h.dest_qp(), 0x11);
        assert!(h.ack_req());
        assert_eq!(h.psn(), 0xc23298);
    }

    #[test]
    fn construct() {
        let mut buf = [0xaau8; 12];
        let mut h = Bth::new_unchecked(&mut buf[..]);
        h.set_opcode(Opcode::RC_RDMA_WRITE_ONLY);
        h.set_se(false);
        h.set_migreq(false);
        h.set_pad_count(2);
        h.set_tver(0);
        h.set_pkey(0xffff);
        h.set_fecn(false);
        h.set_becn(false);
        h.clear_reserved();
        h.set_dest_qp(0x11);
        h.set_ack_req(true);
        h.set_psn(0xc23298);
        assert_eq!(buf, WRITE_ONLY);
    }

    #[test]
    fn cnp_repr_matches_the_reference_bytes() {
        let repr = BthRepr::parse(&CNP).unwrap();
        assert_eq!(repr, BthRepr::cnp(0xd2));
        let mut buf = [0xffu8; 12];
        repr.emit(&mut buf).unwrap();
        assert_eq!(buf, CNP);
    }

    #[test]
    fn flag_bits_are_independent() {
        let mut buf = [0u8; 12];
        let mut h = Bth::new_unchecked(&mut buf[..]);
        h.set_pad_count(3);
        h.set_se(true);
        h.set_tver(0xf);
        h.set_migreq(true);
        h.set_fecn(true);
        assert_eq!(buf[1], 0x80 | 0x40 | 0x30 | 0x0f);
        assert_eq!(buf[4], 0x80);
        let h = Bth::new_checked(&buf[..]).unwrap();
        assert_eq!(
            (h.pad_count(), h.tver(), h.migreq(), h.becn()),
            (3, 0xf, true, false)
        );
    }

    #[test]
    fn short_buffer_and_wide_fields_are_errors() {
        assert_eq!(
            Bth::new_checked(&CNP[..11]).unwrap_err(),
            Error::len(Layer::Bth, 12, 11)
        );
        let mut buf = [0u8; 11];
        assert!(BthRepr::cnp(1).emit(&mut buf).unwrap_err().is_len());
        let mut buf = [0u8; 12];
        let bad = BthRepr {
            psn: 1 << 24,
            ..BthRepr::cnp(1)
        };
        assert!(matches!(
            bad.emit(&mut buf),
            Err(Error::Malformed {
                layer: Layer::Bth,
                offset: 9,
                ..
            })
        ));
    }
}
