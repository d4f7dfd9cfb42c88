//! Errors that name the layer and the byte where parsing stopped.
//!
//! A capture is read by people who want to know *where* a packet went wrong, so every error carries the layer and
//! the offset of that layer from the start of the buffer handed to the parser, in the manner of etherparse.

use core::fmt;

/// The header or trailer an error refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// Base Transport Header.
    Bth,
    /// RDMA Extended Transport Header.
    Reth,
    /// ACK Extended Transport Header.
    Aeth,
    /// Datagram Extended Transport Header.
    Deth,
    /// Reliable Datagram Extended Transport Header.
    Rdeth,
    /// XRC Extended Transport Header.
    XrcEth,
    /// Atomic Extended Transport Header.
    AtomicEth,
    /// Atomic ACK Extended Transport Header.
    AtomicAckEth,
    /// Immediate data.
    ImmDt,
    /// Invalidate Extended Transport Header.
    Ieth,
    /// The 16 reserved bytes that follow the BTH of a CNP.
    CnpReserved,
    /// The transport payload.
    Payload,
    /// The pad bytes (`PadCnt`) between payload and ICRC.
    Pad,
    /// The invariant CRC.
    Icrc,
    /// The Global Route Header of RoCEv1.
    Grh,
    /// The MAC Control opcode that starts every 0x8808 payload.
    MacControl,
    /// The body of a priority flow control frame.
    Pfc,
    /// The body of an 802.3x PAUSE frame.
    Pause,
    /// A management datagram (IB CM).
    Mad,
    /// The Ethernet II header.
    Ethernet,
    /// An 802.1Q tag.
    Vlan,
    /// The IPv4 header.
    Ipv4,
    /// The IPv6 header.
    Ipv6,
    /// The UDP header.
    Udp,
}

impl Layer {
    /// The name a network engineer would look for in a dissector.
    pub const fn name(self) -> &'static str {
        match self {
            Layer::Bth => "BTH",
            Layer::Reth => "RETH",
            Layer::Aeth => "AETH",
            Layer::Deth => "DETH",
            Layer::Rdeth => "RDETH",
            Layer::XrcEth => "XRCETH",
            Layer::AtomicEth => "AtomicETH",
            Layer::AtomicAckEth => "AtomicAckETH",
            Layer::ImmDt => "ImmDt",
            Layer::Ieth => "IETH",
            Layer::CnpReserved => "CNP reserved bytes",
            Layer::Payload => "payload",
            Layer::Pad => "pad",
            Layer::Icrc => "ICRC",
            Layer::Grh => "GRH",
            Layer::MacControl => "MAC Control",
            Layer::Pfc => "PFC",
            Layer::Pause => "PAUSE",
            Layer::Mad => "MAD",
            Layer::Ethernet => "Ethernet",
            Layer::Vlan => "VLAN tag",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Udp => "UDP",
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A layer did not fit in the bytes that were left for it.
///
/// `required_len` and `len` are both counted from `layer_start_offset`, so a truncated capture can be told apart
/// from a malformed packet, and the report can say how much was missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LenError {
    /// Bytes the layer needs, counted from its start.
    pub required_len: usize,
    /// Bytes that were available from its start.
    pub len: usize,
    /// The layer that did not fit.
    pub layer: Layer,
    /// Where the layer starts in the buffer given to the parser (or written by an emitter).
    pub layer_start_offset: usize,
}

impl LenError {
    /// A length error for a layer that starts at offset 0 of the buffer.
    pub const fn new(layer: Layer, required_len: usize, len: usize) -> Self {
        LenError {
            required_len,
            len,
            layer,
            layer_start_offset: 0,
        }
    }

    /// The same error seen from a buffer in which this layer starts `by` bytes later.
    pub const fn shifted(self, by: usize) -> Self {
        LenError {
            layer_start_offset: self.layer_start_offset.saturating_add(by),
            ..self
        }
    }
}

impl fmt::Display for LenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at byte {}: need {} bytes, have {}",
            self.layer, self.layer_start_offset, self.required_len, self.len
        )
    }
}

impl core::error::Error for LenError {}

/// Why a buffer could not be parsed or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Too few bytes: a truncated capture, or an output buffer that is too small.
    Len(LenError),
    /// The bytes are all there but do not make sense (an undefined opcode, a version that is not 0, a value too
    /// wide for its field when emitting).
    Malformed {
        /// The layer at fault.
        layer: Layer,
        /// Byte offset of the offending field in the buffer given to the parser.
        offset: usize,
        /// What is wrong, for a human.
        what: &'static str,
    },
}

impl Error {
    /// The layer the error is about.
    pub const fn layer(&self) -> Layer {
        match self {
            Error::Len(e) => e.layer,
            Error::Malformed { layer, .. } => *layer,
        }
    }

    /// True when the error only means that bytes are missing (e.g. a snap length cut the packet).
    pub const fn is_len(&self) -> bool {
        matches!(self, Error::Len(_))
    }

    /// The same error seen from a buffer in which the failing layer starts `by` bytes later.
    pub const fn shifted(self, by: usize) -> Self {
        match self {
            Error::Len(e) => Error::Len(e.shifted(by)),
            Error::Malformed {
                layer,
                offset,
                what,
            } => Error::Malformed {
                layer,
                offset: offset.saturating_add(by),
                what,
            },
        }
    }

    pub(crate) const fn len(layer: Layer, required_len: usize, len: usize) -> Self {
        Error::Len(LenError::new(layer, required_len, len))
    }

    pub(crate) const fn malformed(layer: Layer, offset: usize, what: &'static str) -> Self {
        Error::Malformed {
            layer,
            offset,
            what,
        }
    }
}

impl From<LenError> for Error {
    fn from(e: LenError) -> Self {
        Error::Len(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Len(e) => e.fmt(f),
            Error::Malformed {
                layer,
                offset,
                what,
            } => write!(f, "{layer} at byte {offset}: {what}"),
        }
    }
}

impl core::error::Error for Error {}

/// Checks that `buf` holds at least `need` bytes for `layer`, which starts at offset 0 of `buf`.
pub(crate) const fn check_len(layer: Layer, buf: &[u8], need: usize) -> Result<(), Error> {
    if buf.len() < need {
        Err(Error::len(layer, need, buf.len()))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;
    extern crate std;
    use std::string::ToString;

    #[test]
    fn display_names_layer_offset_and_lengths() {
        let e = Error::Len(LenError {
            required_len: 12,
            len: 7,
            layer: Layer::Bth,
            layer_start_offset: 42,
        });
        assert_eq!(e.to_string(), "BTH at byte 42: need 12 bytes, have 7");
        let m = Error::malformed(Layer::Bth, 0, "undefined opcode 0x1f").shifted(42);
        assert_eq!(m.to_string(), "BTH at byte 42: undefined opcode 0x1f");
    }
}
