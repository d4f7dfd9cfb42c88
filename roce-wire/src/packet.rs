//! A whole IB transport packet: BTH, extension headers, payload, pad and ICRC.
//!
//! In RoCEv2 this is the UDP payload; in RoCEv1 it is what follows the GRH. The payload has no length field of its
//! own: it is whatever lies between the headers and the `PadCnt` pad bytes before the 4-byte ICRC. So a strict
//! parse must be given exactly one packet, and a capture cut by its snap length can only be read with the length
//! the packet had on the wire ([`RocePacket::parse_lax`]).

use crate::bth::BthRepr;
use crate::error::{Error, Layer, LenError};
use crate::ext::ExtHeaders;
use crate::opcode::ExtLayout;

/// Length of the invariant CRC at the end of every packet.
pub const ICRC_LEN: usize = 4;
/// Length of the reserved block a CNP carries after its BTH.
pub const CNP_RESERVED_LEN: usize = 16;

static ZERO_PAD: [u8; 3] = [0; 3];

/// A parsed transport packet whose bytes were all present.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RocePacket<'a> {
    /// The base transport header.
    pub bth: BthRepr,
    /// The extension headers the opcode calls for.
    pub ext: ExtHeaders,
    /// BTH plus extension headers, in bytes.
    pub header_len: usize,
    /// The payload without pad; for a CNP its 16 reserved bytes.
    pub payload: &'a [u8],
    /// The `PadCnt` pad bytes.
    pub pad: &'a [u8],
    /// The ICRC as stored on the wire, least significant byte first (`u32::from_le_bytes`), so that it compares
    /// equal to [`crate::icrc()`] of a good packet.
    pub icrc: u32,
}

/// What could be read of a packet that may have been cut by a capture's snap length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaxRocePacket<'a> {
    /// The BTH, when its 12 bytes were captured.
    pub bth: Option<BthRepr>,
    /// The extension headers that were captured whole.
    pub ext: ExtHeaders,
    /// Bytes of BTH and extension headers read (12 + the headers present in `ext`; 0 without a BTH).
    pub header_len: usize,
    /// The payload length on the wire: `wire_len` less the headers the opcode calls for, the pad and the 4-byte
    /// ICRC. Known once the BTH is read, even when an extension header was cut (their sizes follow from the
    /// opcode); `None` without a BTH or a defined opcode, or when `wire_len` is too short to hold the headers,
    /// pad and ICRC (a malformed packet).
    pub payload_len: Option<usize>,
    /// The captured part of the payload (all of it when the capture is complete).
    pub payload: &'a [u8],
    /// The ICRC, when its four bytes were captured; `None` means unknown, not bad.
    pub icrc: Option<u32>,
    /// What stopped parsing: `Error::Len` for a cut (with the layer that was cut), `Error::Malformed` for an
    /// undefined opcode or a packet too short on the wire. `None` when the whole packet was read.
    pub stop: Option<Error>,
}

impl<'a> LaxRocePacket<'a> {
    /// Nothing read yet: the starting point of [`LaxRocePacket::read`]. A function rather than a constant:
    /// a constant is copied in whole from read-only memory, where this only writes the `None` tags.
    #[inline]
    pub fn empty() -> Self {
        LaxRocePacket {
            bth: None,
            ext: ExtHeaders::default(),
            header_len: 0,
            payload_len: None,
            payload: &[],
            icrc: None,
            stop: None,
        }
    }

    /// True when every byte of the packet was captured and understood.
    pub fn is_complete(&self) -> bool {
        self.stop.is_none()
    }

    /// [`RocePacket::parse_lax`] written into `self`, which must be [`LaxRocePacket::empty`]. For callers that
    /// keep the result inside a larger struct: filling it where it lives saves copying 250 bytes per packet.
    pub fn read(&mut self, bytes: &'a [u8], wire_len: usize) {
        let out = self;
        let bytes = bytes.get(..wire_len).unwrap_or(bytes);
        let bth = match BthRepr::parse(bytes) {
            Ok(b) => b,
            Err(e) => {
                out.stop = Some(e);
                return;
            }
        };
        out.bth = Some(bth);
        out.header_len = BthRepr::LEN;
        let layout = match layout_of(&bth) {
            Ok(l) => l,
            Err(e) => {
                out.stop = Some(e);
                return;
            }
        };
        let rest = bytes.get(BthRepr::LEN..).unwrap_or(&[]);
        let (len, stop) = out.ext.read_partial(&layout, rest);
        out.header_len += len;
        if let Some(e) = stop {
            // The opcode fixes every header's size, so the payload's length on the wire is known even when
            // the capture cut one of them: a snap length inside a RETH still counts the bytes behind it.
            let full = BthRepr::LEN + layout.len();
            let pad = usize::from(bth.pad_count);
            if let Some(tail) = wire_len.checked_sub(full)
                && trailer_error(tail, pad, layout.cnp, full).is_none()
            {
                out.payload_len = Some(tail - ICRC_LEN - pad);
            }
            out.stop = Some(e.shifted(BthRepr::LEN));
            return;
        }
        let h = out.header_len;
        let pad = usize::from(bth.pad_count);
        // bytes.len() <= wire_len and the headers were read from bytes, so wire_len >= h.
        let wire_tail = wire_len.saturating_sub(h);
        if let Some(e) = trailer_error(wire_tail, pad, layout.cnp, h) {
            out.stop = Some(e);
            return;
        }
        let n = wire_tail - ICRC_LEN - pad;
        out.payload_len = Some(n);
        let cut = bytes.len();
        out.payload = bytes.get(h..cut.min(h + n)).unwrap_or(&[]);
        if cut == wire_len {
            out.icrc = read_icrc(bytes);
            return;
        }
        let payload_layer = if layout.cnp {
            Layer::CnpReserved
        } else {
            Layer::Payload
        };
        let (layer, start, required) = if cut < h + n {
            (payload_layer, h, n)
        } else if cut < h + n + pad {
            (Layer::Pad, h + n, pad)
        } else {
            (Layer::Icrc, h + n + pad, ICRC_LEN)
        };
        out.stop = Some(Error::Len(LenError {
            required_len: required,
            len: cut - start,
            layer,
            layer_start_offset: start,
        }));
    }
}

/// Pad bytes needed after a payload of `payload_len` bytes so that the packet ends on a 4-byte boundary.
pub const fn pad_for(payload_len: usize) -> u8 {
    ((4 - payload_len % 4) % 4) as u8
}

/// The error for a packet whose `tail` bytes after the headers cannot hold the payload minimum, pad and ICRC.
/// The trailer is taken from the end: first the ICRC, then the pad, then a CNP's reserved block, and each error
/// counts from `header_len`, where the unclaimed bytes start.
fn trailer_error(tail: usize, pad: usize, cnp: bool, header_len: usize) -> Option<Error> {
    let err = |layer, required_len, len| {
        Some(Error::Len(LenError {
            required_len,
            len,
            layer,
            layer_start_offset: header_len,
        }))
    };
    if tail < ICRC_LEN {
        return err(Layer::Icrc, ICRC_LEN, tail);
    }
    let tail = tail - ICRC_LEN;
    if tail < pad {
        return err(Layer::Pad, pad, tail);
    }
    let tail = tail - pad;
    if cnp && tail < CNP_RESERVED_LEN {
        return err(Layer::CnpReserved, CNP_RESERVED_LEN, tail);
    }
    None
}

fn read_icrc(bytes: &[u8]) -> Option<u32> {
    let n = bytes.len();
    let b = bytes.get(n.checked_sub(ICRC_LEN)?..)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn layout_of(bth: &BthRepr) -> Result<ExtLayout, Error> {
    bth.opcode.layout().ok_or(Error::malformed(
        Layer::Bth,
        0,
        "opcode not defined by IBTA",
    ))
}

impl<'a> RocePacket<'a> {
    /// Parses one whole packet. Strict: the opcode must be defined, TVer must be 0, every header the opcode calls
    /// for must be there, and pad and ICRC must fit (a CNP also needs its 16 reserved bytes). The ICRC is read, not
    /// checked: that needs the IP header, see [`crate::icrc()`].
    ///
    /// The whole of `bytes` is taken as the packet. A payload cut short cannot be seen here (its length is only
    /// implied); use [`RocePacket::parse_lax`] with the wire length for captured data.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        let bth = BthRepr::parse(bytes)?;
        let layout = layout_of(&bth)?;
        if bth.tver != 0 {
            return Err(Error::malformed(
                Layer::Bth,
                crate::bth::field::FLAGS,
                "transport version is not 0",
            ));
        }
        let rest = bytes.get(BthRepr::LEN..).unwrap_or(&[]);
        let (ext, n) = ExtHeaders::parse(&layout, rest).map_err(|e| e.shifted(BthRepr::LEN))?;
        let header_len = BthRepr::LEN + n;
        let pad = usize::from(bth.pad_count);
        let tail = bytes.len().saturating_sub(header_len);
        if let Some(e) = trailer_error(tail, pad, layout.cnp, header_len) {
            return Err(e);
        }
        let pad_start = bytes.len() - ICRC_LEN - pad;
        let payload = bytes.get(header_len..pad_start).unwrap_or(&[]);
        let pad_bytes = bytes.get(pad_start..bytes.len() - ICRC_LEN).unwrap_or(&[]);
        let icrc = read_icrc(bytes).unwrap_or(0);
        Ok(RocePacket {
            bth,
            ext,
            header_len,
            payload,
            pad: pad_bytes,
            icrc,
        })
    }

    /// Reads what it can of a packet that had `wire_len` bytes on the wire (UDP length − 8 for RoCEv2) of which
    /// `bytes` were captured. Never fails: it returns the layers it read and, in `stop`, what stopped it. Bytes
    /// beyond `wire_len` (Ethernet padding) are ignored. An undefined opcode gives the BTH only and a `Malformed`
    /// stop; TVer is not checked (it is in `bth` for the caller to judge).
    pub fn parse_lax(bytes: &'a [u8], wire_len: usize) -> LaxRocePacket<'a> {
        let mut out = LaxRocePacket::empty();
        out.read(bytes, wire_len);
        out
    }

    /// A packet ready to emit: `bth.pad_count` is set from the payload length, the pad is zeros, the ICRC is 0
    /// (the ICRC needs the IP header: [`crate::build::RoceFrame`] fills it in). Fails when the opcode is not
    /// defined or `ext` is not what the opcode calls for.
    pub fn new(bth: BthRepr, ext: ExtHeaders, payload: &'a [u8]) -> Result<Self, Error> {
        let layout = layout_of(&bth)?;
        if !ext.matches(&layout) {
            return Err(Error::malformed(
                Layer::Bth,
                0,
                "extension headers do not match the opcode",
            ));
        }
        let pad = pad_for(payload.len());
        let bth = BthRepr {
            pad_count: pad,
            ..bth
        };
        Ok(RocePacket {
            bth,
            ext,
            header_len: BthRepr::LEN + ext.len(),
            payload,
            pad: ZERO_PAD.get(..usize::from(pad)).unwrap_or(&[]),
            icrc: 0,
        })
    }

    /// Bytes this packet takes on the wire, ICRC included.
    pub fn wire_len(&self) -> usize {
        BthRepr::LEN + self.ext.len() + self.payload.len() + self.pad.len() + ICRC_LEN
    }

    /// Bytes a packet with these headers and `payload_len` bytes of payload takes on the wire (pad and ICRC
    /// included).
    pub fn emit_len(ext: &ExtHeaders, payload_len: usize) -> usize {
        BthRepr::LEN + ext.len() + payload_len + usize::from(pad_for(payload_len)) + ICRC_LEN
    }

    /// Writes the packet (headers, payload, pad, and `icrc` as stored) into the start of `buf`, and returns the
    /// bytes written. `header_len` is not read: it follows from the headers. Fails when the extension headers do
    /// not match the opcode, when `pad` is not `bth.pad_count` bytes long, or when `buf` is too short (the error
    /// names the first layer that does not fit).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let layout = layout_of(&self.bth)?;
        if !self.ext.matches(&layout) {
            return Err(Error::malformed(
                Layer::Bth,
                0,
                "extension headers do not match the opcode",
            ));
        }
        if self.pad.len() != usize::from(self.bth.pad_count) {
            return Err(Error::malformed(
                Layer::Bth,
                crate::bth::field::FLAGS,
                "pad count differs from the pad",
            ));
        }
        self.bth.emit(buf)?;
        let mut off = BthRepr::LEN;
        off += self
            .ext
            .emit(buf.get_mut(off..).unwrap_or(&mut []))
            .map_err(|e| e.shifted(off))?;
        let payload_layer = if layout.cnp {
            Layer::CnpReserved
        } else {
            Layer::Payload
        };
        for (layer, part) in [
            (payload_layer, self.payload),
            (Layer::Pad, self.pad),
            (Layer::Icrc, &self.icrc.to_le_bytes()[..]),
        ] {
            let avail = buf.len().saturating_sub(off);
            let dst = buf
                .get_mut(off..off + part.len())
                .ok_or(Error::Len(LenError {
                    required_len: part.len(),
                    len: avail,
                    layer,
                    layer_start_offset: off,
                }))?;
            dst.copy_from_slice(part);
            off += part.len();
        }
        Ok(off)
    }

    /// The bytes covered by the ICRC after the IP and UDP headers, i.e. everything but the ICRC, given the buffer
    /// this packet was parsed from.
    pub fn without_icrc(bytes: &[u8]) -> &[u8] {
        bytes
            .get(..bytes.len().saturating_sub(ICRC_LEN))
            .unwrap_or(&[])
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::Opcode;

    // The UDP payload of the ConnectX-4 Lx CNP in scapy_roce_uts_cx4lx_cnp.pcap.
    static CNP: [u8; 32] = [
        0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00, // BTH
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // reserved
        0x82, 0xfd, 0x00, 0x2a, // ICRC, least significant byte first
    ];

    #[test]
    fn cnp_payload_is_its_reserved_block() {
        let p = RocePacket::parse(&CNP).unwrap();
        assert_eq!(p.bth, BthRepr::cnp(0x118));
        assert_eq!(p.header_len, 12);
        assert_eq!(p.payload.len(), 16);
        assert!(p.pad.is_empty());
        assert_eq!(p.icrc, 0x2a00_fd82);
        // Without its reserved block a CNP is short.
        let mut short = [0u8; 20];
        short[..12].copy_from_slice(&CNP[..12]);
        assert_eq!(
            RocePacket::parse(&short),
            Err(Error::Len(LenError {
                required_len: 16,
                len: 4,
                layer: Layer::CnpReserved,
                layer_start_offset: 12
            }))
        );
    }

    #[test]
    fn undefined_opcode_and_tver() {
        let mut b = CNP;
        b[0] = 0x80;
        assert!(matches!(
            RocePacket::parse(&b),
            Err(Error::Malformed {
                layer: Layer::Bth,
                offset: 0,
                ..
            })
        ));
        let lax = RocePacket::parse_lax(&b, b.len());
        assert_eq!(lax.bth.map(|b| b.opcode), Some(Opcode(0x80)));
        assert_eq!(lax.header_len, 12);
        assert!(matches!(lax.stop, Some(Error::Malformed { .. })));
        let mut b = CNP;
        b[1] = 0x01;
        assert!(matches!(
            RocePacket::parse(&b),
            Err(Error::Malformed {
                layer: Layer::Bth,
                offset: 1,
                ..
            })
        ));
        assert!(RocePacket::parse_lax(&b, b.len()).is_complete());
    }

    #[test]
    fn pad_and_icrc_positions() {
        // RC SEND ONLY with a 5-byte payload: 3 pad bytes.
        let bth = BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            ..BthRepr::cnp(5)
        };
        let pkt = RocePacket::new(bth, ExtHeaders::default(), b"hello").unwrap();
        assert_eq!(pkt.bth.pad_count, 3);
        let mut buf = [0u8; 64];
        let pkt = RocePacket {
            icrc: 0x0403_0201,
            ..pkt
        };
        let n = pkt.emit(&mut buf).unwrap();
        assert_eq!(n, 12 + 5 + 3 + 4);
        assert_eq!(n, RocePacket::emit_len(&ExtHeaders::default(), 5));
        assert_eq!(&buf[17..24], &[0, 0, 0, 1, 2, 3, 4]);
        let back = RocePacket::parse(&buf[..n]).unwrap();
        assert_eq!(back, pkt);
        // 6 bytes after the headers: the ICRC takes 4, leaving 2 of 3 pad bytes.
        assert_eq!(
            RocePacket::parse(&buf[..18]),
            Err(Error::Len(LenError {
                required_len: 3,
                len: 2,
                layer: Layer::Pad,
                layer_start_offset: 12
            }))
        );
        assert_eq!(
            RocePacket::parse(&buf[..15]),
            Err(Error::Len(LenError {
                required_len: 4,
                len: 3,
                layer: Layer::Icrc,
                layer_start_offset: 12
            }))
        );
    }

    #[test]
    fn lax_names_the_cut_layer() {
        let bth = BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            ..BthRepr::cnp(5)
        };
        let pkt = RocePacket::new(bth, ExtHeaders::default(), b"hello").unwrap();
        let mut buf = [0u8; 24];
        pkt.emit(&mut buf).unwrap();
        let lax = RocePacket::parse_lax(&buf[..14], 24);
        assert_eq!(lax.payload_len, Some(5));
        assert_eq!(lax.payload, b"he");
        assert_eq!(lax.icrc, None);
        assert_eq!(
            lax.stop,
            Some(Error::Len(LenError {
                required_len: 5,
                len: 2,
                layer: Layer::Payload,
                layer_start_offset: 12
            }))
        );
        let lax = RocePacket::parse_lax(&buf[..22], 24);
        assert_eq!(
            lax.stop,
            Some(Error::Len(LenError {
                required_len: 4,
                len: 2,
                layer: Layer::Icrc,
                layer_start_offset: 20
            }))
        );
        // Ethernet padding after the packet is ignored.
        let mut padded = [0u8; 30];
        padded[..24].copy_from_slice(&buf);
        let lax = RocePacket::parse_lax(&padded, 24);
        assert!(lax.is_complete());
        assert_eq!(lax.icrc, Some(0));
        assert_eq!(lax.payload, b"hello");
    }

    #[test]
    fn new_rejects_headers_the_opcode_does_not_have() {
        let bth = BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            ..BthRepr::cnp(5)
        };
        let ext = ExtHeaders {
            imm: Some(1),
            ..ExtHeaders::default()
        };
        assert!(matches!(
            RocePacket::new(bth, ext, &[]),
            Err(Error::Malformed { .. })
        ));
    }
}
