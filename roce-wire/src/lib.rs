//! RoCE on the wire: the InfiniBand transport headers that RoCEv2 carries in UDP (and RoCEv1 behind a GRH), the
//! congestion notification packet, PFC and PAUSE frames, IB CM handshakes, and the invariant CRC.
//!
//! # Layering
//!
//! Three levels, in the manner of smoltcp and etherparse:
//!
//! 1. **Views** ([`Bth`], [`Reth`], [`Aeth`], [`Deth`], ..., [`Grh`], [`MacControl`], [`Mad`]) wrap any
//!    `T: AsRef<[u8]>`; their field offsets live in a `field` module beside them. Setters exist where
//!    `T: AsMut<[u8]>`.
//! 2. **Reprs** ([`BthRepr`], [`RethRepr`], ..., [`ExtHeaders`], [`GrhRepr`], [`MacControlRepr`],
//!    [`CmMadRepr`]) are owned, `Copy` values with `parse(&[u8])` and `emit(&mut [u8])`. Reserved bits are not
//!    kept and are written as 0.
//! 3. **Packets**: [`RocePacket`] is one whole transport packet (BTH, the extension headers its opcode calls for,
//!    payload, pad, ICRC), parsed strictly; [`RocePacket::parse_lax`] reads what a snap length left of one and
//!    says where it stopped. [`build::RoceFrame`] writes whole Ethernet frames with correct lengths, checksum and
//!    ICRC.
//!
//! Which extension headers follow a BTH is decided by the opcode alone ([`Opcode::layout`]), so the opcode is an
//! open newtype: any byte is representable, and an undefined one is reported, not guessed at.
//!
//! Ethernet, VLAN, IP and UDP parsing are left to a general crate (the analyzer uses etherparse); this crate only
//! builds those layers, for tests, and reads the IP header for the ICRC.
//!
//! # The no-panic contract
//!
//! No function of this crate panics on any input bytes. Every `parse`, `parse_lax`, `new_checked` and `emit`
//! checks lengths before it reads or writes and returns an [`Error`] naming the layer and the byte offset
//! instead; after `new_checked` succeeded, every accessor of that view is in bounds. The one exception is
//! `new_unchecked`: accessors of a view made that way panic if the caller's buffer is too short, exactly as
//! slice indexing does, so use it only on buffers whose length you have checked yourself.
//!
//! Emitters refuse values that do not fit their field (a 25-bit PSN, a pad count of 4) with
//! [`Error::Malformed`] rather than cut them silently.
//!
//! The crate is `no_std`, has no dependencies, does not allocate and contains no `unsafe` code.
//!
//! # Example
//!
//! Build a CNP the way a NIC sends it, then read it back as a capture tool would:
//!
//! ```
//! use roce_wire::{BthRepr, ExtHeaders, IpSpec, Opcode, RoceFrame, RocePacket, icrc_matches};
//!
//! let frame = RoceFrame {
//!     src_mac: [2, 0, 0, 0, 0, 1],
//!     dst_mac: [2, 0, 0, 0, 0, 2],
//!     vlan: None,
//!     ip: IpSpec::V4 { src: [10, 0, 0, 2], dst: [10, 0, 0, 1], dscp: 48, ecn: 0, ttl: 64, ident: 1 },
//!     sport: 0,
//!     bth: BthRepr::cnp(0x118),
//!     ext: ExtHeaders::default(),
//!     payload: &[0; 16],
//! };
//! let mut buf = [0u8; 128];
//! let len = frame.emit(&mut buf)?;
//!
//! let udp = &buf[frame.udp_offset()..len];
//! assert!(icrc_matches(&buf[frame.ip_offset()..frame.udp_offset()], udp)?);
//! let pkt = RocePacket::parse(&udp[8..])?;
//! assert_eq!(pkt.bth.opcode, Opcode::CNP);
//! assert!(pkt.bth.becn);
//! assert_eq!(pkt.payload.len(), 16);
//! # Ok::<(), roce_wire::Error>(())
//! ```

#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// Declares a view over a byte buffer with the usual constructors.
macro_rules! view {
    ($(#[$doc:meta])* $name:ident, $layer:expr, $len:expr) => {
        $(#[$doc])*
        ///
        /// `new_checked` guarantees the length, so that no accessor can panic afterwards.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of the header.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length.
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wraps a buffer after checking that it holds the whole header (it may hold more).
            pub fn new_checked(buffer: T) -> Result<Self, $crate::Error> {
                $crate::error::check_len($layer, buffer.as_ref(), Self::LEN)?;
                Ok($name { buffer })
            }

            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

pub mod bth;
pub mod build;
pub mod error;
pub mod ext;
pub mod field;
pub mod grh;
pub mod icrc;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod pfc;

pub use bth::{Bth, BthRepr};
pub use build::{IpSpec, RoceFrame, Vlan, emit_mac_control};
pub use error::{Error, Layer, LenError};
pub use ext::{
    Aeth, AethKind, AethRepr, AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr, Deth,
    DethRepr, ExtHeaders, Ieth, IethRepr, ImmDt, ImmDtRepr, NakCode, Rdeth, RdethRepr, Reth,
    RethRepr, XrcEth, XrcEthRepr,
};
pub use grh::{ETHERTYPE_ROCE_V1, Grh, GrhRepr};
pub use icrc::{Crc32, SoftCrc32, crc32, icrc, icrc_matches, icrc_v1, icrc_v1_with, icrc_with};
pub use mad::{CmMadRepr, CmMessage, Mad, MadHeaderRepr, parse_cm};
pub use opcode::{ExtLayout, Opcode, Transport};
pub use packet::{LaxRocePacket, RocePacket, pad_for};
pub use pfc::{
    ETHERTYPE_MAC_CONTROL, MacControl, MacControlRepr, OPCODE_PAUSE, OPCODE_PFC, PAUSE_DST_MAC,
    PfcRepr, quanta_to_ps,
};
