//! The BTH opcode: an open newtype, because a capture can hold any byte and the tool must still show it.
//!
//! Bits 7–5 select the transport, bits 4–0 the operation. The operation decides which extension headers follow
//! the BTH; the transport adds its own (RDETH and DETH for RD, DETH for UD, XRCETH for XRC requests). The table
//! below follows IBTA vol. 1, chapter 9 (and annex A14 for XRC).

/// A BTH opcode byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

/// The transport class of an opcode (its top three bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connection, `000`.
    Rc,
    /// Unreliable Connection, `001`.
    Uc,
    /// Reliable Datagram, `010`.
    Rd,
    /// Unreliable Datagram, `011`.
    Ud,
    /// `100`: the RoCEv2 Congestion Notification Packet (only `0x81` is defined).
    Cnp,
    /// Extended Reliable Connection, `101`.
    Xrc,
    /// `110` and `111`: the manufacturer-specific ranges.
    Reserved,
}

impl Transport {
    /// The prefix used in opcode names (`RC`, `UD`, ...).
    pub const fn prefix(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Rd => "RD",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
            Transport::Xrc => "XRC",
            Transport::Reserved => "RESERVED",
        }
    }
}

/// Which extension headers follow the BTH, in the order they appear on the wire:
/// XRCETH, RDETH, DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtLayout {
    /// XRC Extended Transport Header (4 bytes).
    pub xrceth: bool,
    /// Reliable Datagram Extended Transport Header (4 bytes).
    pub rdeth: bool,
    /// Datagram Extended Transport Header (8 bytes).
    pub deth: bool,
    /// RDMA Extended Transport Header (16 bytes).
    pub reth: bool,
    /// Atomic Extended Transport Header (28 bytes).
    pub atomic_eth: bool,
    /// ACK Extended Transport Header (4 bytes).
    pub aeth: bool,
    /// Atomic ACK Extended Transport Header (8 bytes).
    pub atomic_ack_eth: bool,
    /// Immediate data (4 bytes).
    pub imm: bool,
    /// Invalidate Extended Transport Header (4 bytes).
    pub ieth: bool,
    /// The packet is a CNP: 16 reserved bytes follow the BTH. They are the CNP's payload, not a header.
    pub cnp: bool,
}

impl ExtLayout {
    /// Bytes of extension headers after the BTH. A CNP's 16 reserved bytes are not counted: they are its payload.
    pub const fn len(&self) -> usize {
        let mut n = 0;
        if self.xrceth {
            n += 4;
        }
        if self.rdeth {
            n += 4;
        }
        if self.deth {
            n += 8;
        }
        if self.reth {
            n += 16;
        }
        if self.atomic_eth {
            n += 28;
        }
        if self.aeth {
            n += 4;
        }
        if self.atomic_ack_eth {
            n += 8;
        }
        if self.imm {
            n += 4;
        }
        if self.ieth {
            n += 4;
        }
        n
    }

    /// True when no extension header follows the BTH.
    pub const fn is_empty(&self) -> bool {
        !self.has_headers()
    }

    /// True when at least one extension header follows the BTH. The non-short-circuit `|` lets the compiler
    /// test the flags together, without a branch per flag.
    pub const fn has_headers(&self) -> bool {
        self.xrceth
            | self.rdeth
            | self.deth
            | self.reth
            | self.atomic_eth
            | self.aeth
            | self.atomic_ack_eth
            | self.imm
            | self.ieth
    }
}

/// Operation codes (low five bits), shared by every transport that defines them.
mod op {
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_IMM: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_IMM: u8 = 0x05;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_LAST_IMM: u8 = 0x09;
    pub const WRITE_ONLY: u8 = 0x0a;
    pub const WRITE_ONLY_IMM: u8 = 0x0b;
    pub const READ_REQUEST: u8 = 0x0c;
    pub const READ_RESPONSE_FIRST: u8 = 0x0d;
    pub const READ_RESPONSE_MIDDLE: u8 = 0x0e;
    pub const READ_RESPONSE_LAST: u8 = 0x0f;
    pub const READ_RESPONSE_ONLY: u8 = 0x10;
    pub const ACKNOWLEDGE: u8 = 0x11;
    pub const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
    pub const COMPARE_SWAP: u8 = 0x13;
    pub const FETCH_ADD: u8 = 0x14;
    pub const RESYNC: u8 = 0x15;
    pub const SEND_LAST_INV: u8 = 0x16;
    pub const SEND_ONLY_INV: u8 = 0x17;
}

macro_rules! opcodes {
    ($($(#[$doc:meta])* $name:ident = $value:expr;)*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", stringify!($name), "`.")]
                $(#[$doc])*
                pub const $name: Opcode = Opcode($value);
            )*
        }
    };
}

const RC: u8 = 0x00;
const UC: u8 = 0x20;
const RD: u8 = 0x40;
const UD: u8 = 0x60;
const XRC: u8 = 0xa0;

opcodes! {
    RC_SEND_FIRST = RC | op::SEND_FIRST;
    RC_SEND_MIDDLE = RC | op::SEND_MIDDLE;
    RC_SEND_LAST = RC | op::SEND_LAST;
    RC_SEND_LAST_WITH_IMMEDIATE = RC | op::SEND_LAST_IMM;
    RC_SEND_ONLY = RC | op::SEND_ONLY;
    RC_SEND_ONLY_WITH_IMMEDIATE = RC | op::SEND_ONLY_IMM;
    RC_RDMA_WRITE_FIRST = RC | op::WRITE_FIRST;
    RC_RDMA_WRITE_MIDDLE = RC | op::WRITE_MIDDLE;
    RC_RDMA_WRITE_LAST = RC | op::WRITE_LAST;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = RC | op::WRITE_LAST_IMM;
    RC_RDMA_WRITE_ONLY = RC | op::WRITE_ONLY;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = RC | op::WRITE_ONLY_IMM;
    RC_RDMA_READ_REQUEST = RC | op::READ_REQUEST;
    RC_RDMA_READ_RESPONSE_FIRST = RC | op::READ_RESPONSE_FIRST;
    RC_RDMA_READ_RESPONSE_MIDDLE = RC | op::READ_RESPONSE_MIDDLE;
    RC_RDMA_READ_RESPONSE_LAST = RC | op::READ_RESPONSE_LAST;
    RC_RDMA_READ_RESPONSE_ONLY = RC | op::READ_RESPONSE_ONLY;
    RC_ACKNOWLEDGE = RC | op::ACKNOWLEDGE;
    RC_ATOMIC_ACKNOWLEDGE = RC | op::ATOMIC_ACKNOWLEDGE;
    RC_COMPARE_SWAP = RC | op::COMPARE_SWAP;
    RC_FETCH_ADD = RC | op::FETCH_ADD;
    RC_SEND_LAST_WITH_INVALIDATE = RC | op::SEND_LAST_INV;
    RC_SEND_ONLY_WITH_INVALIDATE = RC | op::SEND_ONLY_INV;

    UC_SEND_FIRST = UC | op::SEND_FIRST;
    UC_SEND_MIDDLE = UC | op::SEND_MIDDLE;
    UC_SEND_LAST = UC | op::SEND_LAST;
    UC_SEND_LAST_WITH_IMMEDIATE = UC | op::SEND_LAST_IMM;
    UC_SEND_ONLY = UC | op::SEND_ONLY;
    UC_SEND_ONLY_WITH_IMMEDIATE = UC | op::SEND_ONLY_IMM;
    UC_RDMA_WRITE_FIRST = UC | op::WRITE_FIRST;
    UC_RDMA_WRITE_MIDDLE = UC | op::WRITE_MIDDLE;
    UC_RDMA_WRITE_LAST = UC | op::WRITE_LAST;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = UC | op::WRITE_LAST_IMM;
    UC_RDMA_WRITE_ONLY = UC | op::WRITE_ONLY;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = UC | op::WRITE_ONLY_IMM;

    RD_SEND_FIRST = RD | op::SEND_FIRST;
    RD_SEND_MIDDLE = RD | op::SEND_MIDDLE;
    RD_SEND_LAST = RD | op::SEND_LAST;
    RD_SEND_LAST_WITH_IMMEDIATE = RD | op::SEND_LAST_IMM;
    RD_SEND_ONLY = RD | op::SEND_ONLY;
    RD_SEND_ONLY_WITH_IMMEDIATE = RD | op::SEND_ONLY_IMM;
    RD_RDMA_WRITE_FIRST = RD | op::WRITE_FIRST;
    RD_RDMA_WRITE_MIDDLE = RD | op::WRITE_MIDDLE;
    RD_RDMA_WRITE_LAST = RD | op::WRITE_LAST;
    RD_RDMA_WRITE_LAST_WITH_IMMEDIATE = RD | op::WRITE_LAST_IMM;
    RD_RDMA_WRITE_ONLY = RD | op::WRITE_ONLY;
    RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE = RD | op::WRITE_ONLY_IMM;
    RD_RDMA_READ_REQUEST = RD | op::READ_REQUEST;
    RD_RDMA_READ_RESPONSE_FIRST = RD | op::READ_RESPONSE_FIRST;
    RD_RDMA_READ_RESPONSE_MIDDLE = RD | op::READ_RESPONSE_MIDDLE;
    RD_RDMA_READ_RESPONSE_LAST = RD | op::READ_RESPONSE_LAST;
    RD_RDMA_READ_RESPONSE_ONLY = RD | op::READ_RESPONSE_ONLY;
    RD_ACKNOWLEDGE = RD | op::ACKNOWLEDGE;
    RD_ATOMIC_ACKNOWLEDGE = RD | op::ATOMIC_ACKNOWLEDGE;
    RD_COMPARE_SWAP = RD | op::COMPARE_SWAP;
    RD_FETCH_ADD = RD | op::FETCH_ADD;
    RD_RESYNC = RD | op::RESYNC;

    UD_SEND_ONLY = UD | op::SEND_ONLY;
    UD_SEND_ONLY_WITH_IMMEDIATE = UD | op::SEND_ONLY_IMM;

    /// RoCEv2 Congestion Notification Packet.
    CNP = 0x81;

    XRC_SEND_FIRST = XRC | op::SEND_FIRST;
    XRC_SEND_MIDDLE = XRC | op::SEND_MIDDLE;
    XRC_SEND_LAST = XRC | op::SEND_LAST;
    XRC_SEND_LAST_WITH_IMMEDIATE = XRC | op::SEND_LAST_IMM;
    XRC_SEND_ONLY = XRC | op::SEND_ONLY;
    XRC_SEND_ONLY_WITH_IMMEDIATE = XRC | op::SEND_ONLY_IMM;
    XRC_RDMA_WRITE_FIRST = XRC | op::WRITE_FIRST;
    XRC_RDMA_WRITE_MIDDLE = XRC | op::WRITE_MIDDLE;
    XRC_RDMA_WRITE_LAST = XRC | op::WRITE_LAST;
    XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE = XRC | op::WRITE_LAST_IMM;
    XRC_RDMA_WRITE_ONLY = XRC | op::WRITE_ONLY;
    XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = XRC | op::WRITE_ONLY_IMM;
    XRC_RDMA_READ_REQUEST = XRC | op::READ_REQUEST;
    XRC_RDMA_READ_RESPONSE_FIRST = XRC | op::READ_RESPONSE_FIRST;
    XRC_RDMA_READ_RESPONSE_MIDDLE = XRC | op::READ_RESPONSE_MIDDLE;
    XRC_RDMA_READ_RESPONSE_LAST = XRC | op::READ_RESPONSE_LAST;
    XRC_RDMA_READ_RESPONSE_ONLY = XRC | op::READ_RESPONSE_ONLY;
    XRC_ACKNOWLEDGE = XRC | op::ACKNOWLEDGE;
    XRC_ATOMIC_ACKNOWLEDGE = XRC | op::ATOMIC_ACKNOWLEDGE;
    XRC_COMPARE_SWAP = XRC | op::COMPARE_SWAP;
    XRC_FETCH_ADD = XRC | op::FETCH_ADD;
    XRC_SEND_LAST_WITH_INVALIDATE = XRC | op::SEND_LAST_INV;
    XRC_SEND_ONLY_WITH_INVALIDATE = XRC | op::SEND_ONLY_INV;
}

/// The operation part of an opcode name, without the transport prefix.
const fn op_name(op: u8) -> &'static str {
    match op {
        op::SEND_FIRST => "SEND_FIRST",
        op::SEND_MIDDLE => "SEND_MIDDLE",
        op::SEND_LAST => "SEND_LAST",
        op::SEND_LAST_IMM => "SEND_LAST_WITH_IMMEDIATE",
        op::SEND_ONLY => "SEND_ONLY",
        op::SEND_ONLY_IMM => "SEND_ONLY_WITH_IMMEDIATE",
        op::WRITE_FIRST => "RDMA_WRITE_FIRST",
        op::WRITE_MIDDLE => "RDMA_WRITE_MIDDLE",
        op::WRITE_LAST => "RDMA_WRITE_LAST",
        op::WRITE_LAST_IMM => "RDMA_WRITE_LAST_WITH_IMMEDIATE",
        op::WRITE_ONLY => "RDMA_WRITE_ONLY",
        op::WRITE_ONLY_IMM => "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        op::READ_REQUEST => "RDMA_READ_REQUEST",
        op::READ_RESPONSE_FIRST => "RDMA_READ_RESPONSE_FIRST",
        op::READ_RESPONSE_MIDDLE => "RDMA_READ_RESPONSE_MIDDLE",
        op::READ_RESPONSE_LAST => "RDMA_READ_RESPONSE_LAST",
        op::READ_RESPONSE_ONLY => "RDMA_READ_RESPONSE_ONLY",
        op::ACKNOWLEDGE => "ACKNOWLEDGE",
        op::ATOMIC_ACKNOWLEDGE => "ATOMIC_ACKNOWLEDGE",
        op::COMPARE_SWAP => "COMPARE_SWAP",
        op::FETCH_ADD => "FETCH_ADD",
        op::RESYNC => "RESYNC",
        op::SEND_LAST_INV => "SEND_LAST_WITH_INVALIDATE",
        op::SEND_ONLY_INV => "SEND_ONLY_WITH_INVALIDATE",
        _ => "UNKNOWN",
    }
}

/// Extension headers an operation brings regardless of transport (the RC column of the IBTA table).
const fn op_layout(op: u8) -> ExtLayout {
    let mut l = ExtLayout {
        xrceth: false,
        rdeth: false,
        deth: false,
        reth: false,
        atomic_eth: false,
        aeth: false,
        atomic_ack_eth: false,
        imm: false,
        ieth: false,
        cnp: false,
    };
    match op {
        op::SEND_LAST_IMM | op::SEND_ONLY_IMM | op::WRITE_LAST_IMM => l.imm = true,
        op::WRITE_FIRST | op::WRITE_ONLY | op::READ_REQUEST => l.reth = true,
        op::WRITE_ONLY_IMM => {
            l.reth = true;
            l.imm = true;
        }
        op::READ_RESPONSE_FIRST
        | op::READ_RESPONSE_LAST
        | op::READ_RESPONSE_ONLY
        | op::ACKNOWLEDGE => l.aeth = true,
        op::ATOMIC_ACKNOWLEDGE => {
            l.aeth = true;
            l.atomic_ack_eth = true;
        }
        op::COMPARE_SWAP | op::FETCH_ADD => l.atomic_eth = true,
        op::SEND_LAST_INV | op::SEND_ONLY_INV => l.ieth = true,
        _ => {}
    }
    l
}

/// True for operations sent by a responder (read responses and acknowledgements).
const fn is_response_op(op: u8) -> bool {
    matches!(
        op,
        op::READ_RESPONSE_FIRST
            | op::READ_RESPONSE_MIDDLE
            | op::READ_RESPONSE_LAST
            | op::READ_RESPONSE_ONLY
            | op::ACKNOWLEDGE
            | op::ATOMIC_ACKNOWLEDGE
    )
}

impl Opcode {
    /// The transport class (bits 7–5).
    pub const fn transport(self) -> Transport {
        match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            5 => Transport::Xrc,
            _ => Transport::Reserved,
        }
    }

    /// The operation (bits 4–0).
    pub const fn operation(self) -> u8 {
        self.0 & 0x1f
    }

    /// Whether IBTA (or the RoCEv2 annex, for the CNP) defines this opcode for its transport.
    pub const fn is_defined(self) -> bool {
        let op = self.operation();
        match self.transport() {
            Transport::Rc | Transport::Xrc => {
                op <= op::FETCH_ADD || op == op::SEND_LAST_INV || op == op::SEND_ONLY_INV
            }
            Transport::Uc => op <= op::WRITE_ONLY_IMM,
            Transport::Rd => op <= op::RESYNC,
            Transport::Ud => op == op::SEND_ONLY || op == op::SEND_ONLY_IMM,
            Transport::Cnp => self.0 == Opcode::CNP.0,
            Transport::Reserved => false,
        }
    }

    /// The name used in the `decode` output: transport prefix and IBTA operation name, e.g.
    /// `RC_RDMA_WRITE_FIRST`, `UD_SEND_ONLY`, `CNP`; `UNKNOWN` for an opcode IBTA does not define.
    pub fn name(self) -> &'static str {
        if !self.is_defined() {
            return "UNKNOWN";
        }
        macro_rules! names {
            ($($name:ident)*) => {
                match self {
                    $(Opcode::$name => stringify!($name),)*
                    _ => "UNKNOWN",
                }
            };
        }
        names! {
            RC_SEND_FIRST RC_SEND_MIDDLE RC_SEND_LAST RC_SEND_LAST_WITH_IMMEDIATE RC_SEND_ONLY
            RC_SEND_ONLY_WITH_IMMEDIATE RC_RDMA_WRITE_FIRST RC_RDMA_WRITE_MIDDLE RC_RDMA_WRITE_LAST
            RC_RDMA_WRITE_LAST_WITH_IMMEDIATE RC_RDMA_WRITE_ONLY RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
            RC_RDMA_READ_REQUEST RC_RDMA_READ_RESPONSE_FIRST RC_RDMA_READ_RESPONSE_MIDDLE
            RC_RDMA_READ_RESPONSE_LAST RC_RDMA_READ_RESPONSE_ONLY RC_ACKNOWLEDGE RC_ATOMIC_ACKNOWLEDGE
            RC_COMPARE_SWAP RC_FETCH_ADD RC_SEND_LAST_WITH_INVALIDATE RC_SEND_ONLY_WITH_INVALIDATE
            UC_SEND_FIRST UC_SEND_MIDDLE UC_SEND_LAST UC_SEND_LAST_WITH_IMMEDIATE UC_SEND_ONLY
            UC_SEND_ONLY_WITH_IMMEDIATE UC_RDMA_WRITE_FIRST UC_RDMA_WRITE_MIDDLE UC_RDMA_WRITE_LAST
            UC_RDMA_WRITE_LAST_WITH_IMMEDIATE UC_RDMA_WRITE_ONLY UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
            RD_SEND_FIRST RD_SEND_MIDDLE RD_SEND_LAST RD_SEND_LAST_WITH_IMMEDIATE RD_SEND_ONLY
            RD_SEND_ONLY_WITH_IMMEDIATE RD_RDMA_WRITE_FIRST RD_RDMA_WRITE_MIDDLE RD_RDMA_WRITE_LAST
            RD_RDMA_WRITE_LAST_WITH_IMMEDIATE RD_RDMA_WRITE_ONLY RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE
            RD_RDMA_READ_REQUEST RD_RDMA_READ_RESPONSE_FIRST RD_RDMA_READ_RESPONSE_MIDDLE
            RD_RDMA_READ_RESPONSE_LAST RD_RDMA_READ_RESPONSE_ONLY RD_ACKNOWLEDGE RD_ATOMIC_ACKNOWLEDGE
            RD_COMPARE_SWAP RD_FETCH_ADD RD_RESYNC
            UD_SEND_ONLY UD_SEND_ONLY_WITH_IMMEDIATE
            CNP
            XRC_SEND_FIRST XRC_SEND_MIDDLE XRC_SEND_LAST XRC_SEND_LAST_WITH_IMMEDIATE XRC_SEND_ONLY
            XRC_SEND_ONLY_WITH_IMMEDIATE XRC_RDMA_WRITE_FIRST XRC_RDMA_WRITE_MIDDLE XRC_RDMA_WRITE_LAST
            XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE XRC_RDMA_WRITE_ONLY XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
            XRC_RDMA_READ_REQUEST XRC_RDMA_READ_RESPONSE_FIRST XRC_RDMA_READ_RESPONSE_MIDDLE
            XRC_RDMA_READ_RESPONSE_LAST XRC_RDMA_READ_RESPONSE_ONLY XRC_ACKNOWLEDGE XRC_ATOMIC_ACKNOWLEDGE
            XRC_COMPARE_SWAP XRC_FETCH_ADD XRC_SEND_LAST_WITH_INVALIDATE XRC_SEND_ONLY_WITH_INVALIDATE
        }
    }

    /// The operation name without the transport prefix (`RDMA_WRITE_FIRST`); `UNKNOWN` when not defined.
    pub fn operation_name(self) -> &'static str {
        if !self.is_defined() {
            "UNKNOWN"
        } else if self.0 == Opcode::CNP.0 {
            "CNP"
        } else {
            op_name(self.operation())
        }
    }

    /// The extension headers that follow the BTH, or `None` when the opcode is not defined (then nothing after
    /// the BTH can be located).
    pub const fn layout(self) -> Option<ExtLayout> {
        // Every frame asks this, so the answers are worked out at compile time; indexing by a u8 is in range.
        LAYOUTS[self.0 as usize]
    }

    const fn compute_layout(self) -> Option<ExtLayout> {
        if !self.is_defined() {
            return None;
        }
        let op = self.operation();
        let mut l = op_layout(op);
        match self.transport() {
            Transport::Rd => {
                l.rdeth = true;
                // Responses travel back on the EE context: no datagram header.
                l.deth = !is_response_op(op);
            }
            Transport::Ud => l.deth = true,
            Transport::Xrc => l.xrceth = !is_response_op(op),
            Transport::Cnp => {
                l = ExtLayout {
                    cnp: true,
                    ..ExtLayout::EMPTY
                }
            }
            Transport::Rc | Transport::Uc | Transport::Reserved => {}
        }
        Some(l)
    }

    /// An ACKNOWLEDGE or ATOMIC ACKNOWLEDGE.
    pub const fn is_ack(self) -> bool {
        self.is_defined()
            && matches!(self.operation(), op::ACKNOWLEDGE | op::ATOMIC_ACKNOWLEDGE)
            && !matches!(self.transport(), Transport::Cnp)
    }

    /// An RDMA READ RESPONSE FIRST, MIDDLE, LAST or ONLY.
    pub const fn is_read_response(self) -> bool {
        self.is_defined()
            && matches!(
                self.operation(),
                op::READ_RESPONSE_FIRST
                    | op::READ_RESPONSE_MIDDLE
                    | op::READ_RESPONSE_LAST
                    | op::READ_RESPONSE_ONLY
            )
    }

    /// An RDMA READ REQUEST.
    pub const fn is_read_request(self) -> bool {
        self.is_defined() && self.operation() == op::READ_REQUEST
    }

    /// True for packets a requester numbers from its own PSN space: sends, writes, read requests, atomics and RD
    /// RESYNC. Acknowledgements and read responses carry the responder's echo of those PSNs, and a CNP carries none.
    /// (A read request reserves one PSN per expected response packet; that count is the caller's business.)
    pub const fn consumes_request_psn(self) -> bool {
        self.is_defined()
            && !matches!(self.transport(), Transport::Cnp)
            && !is_response_op(self.operation())
    }
}

impl ExtLayout {
    /// No extension header at all.
    pub const EMPTY: ExtLayout = ExtLayout {
        xrceth: false,
        rdeth: false,
        deth: false,
        reth: false,
        atomic_eth: false,
        aeth: false,
        atomic_ack_eth: false,
        imm: false,
        ieth: false,
        cnp: false,
    };
}

impl core::fmt::Display for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} (0x{:02x})", self.name(), self.0)
    }
}

/// [`Opcode::layout`] for each of the 256 opcodes.
const LAYOUTS: [Option<ExtLayout>; 256] = {
    let mut table = [None; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = Opcode(i as u8).compute_layout();
        i += 1;
    }
    table
};

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn defined_opcode_count_matches_ibta_tables() {
        // RC 23, UC 12, RD 22, UD 2, CNP 1, XRC 23.
        let n = (0..=255u8).filter(|&b| Opcode(b).is_defined()).count();
        assert_eq!(n, 23 + 12 + 22 + 2 + 1 + 23);
        for b in 0..=255u8 {
            let o = Opcode(b);
            assert_eq!(o.is_defined(), o.layout().is_some());
            assert_eq!(o.is_defined(), o.name() != "UNKNOWN", "{b:#x}");
            if o.is_defined() {
                assert!(o.name().starts_with(o.transport().prefix()));
            }
        }
    }

    #[test]
    fn names_and_transports() {
        assert_eq!(Opcode(0x06).name(), "RC_RDMA_WRITE_FIRST");
        assert_eq!(Opcode(0x64).name(), "UD_SEND_ONLY");
        assert_eq!(Opcode(0x81).name(), "CNP");
        assert_eq!(Opcode(0x80).name(), "UNKNOWN");
        assert_eq!(Opcode(0x15).name(), "UNKNOWN");
        assert_eq!(Opcode(0x55).name(), "RD_RESYNC");
        assert_eq!(Opcode(0xb7).name(), "XRC_SEND_ONLY_WITH_INVALIDATE");
        assert_eq!(Opcode(0x2c).name(), "UNKNOWN");
        assert_eq!(Opcode(0xc0).transport(), Transport::Reserved);
        assert_eq!(Opcode::RC_RDMA_READ_REQUEST.operation(), 0x0c);
        assert_eq!(
            Opcode::RC_RDMA_WRITE_ONLY.operation_name(),
            "RDMA_WRITE_ONLY"
        );
    }

    #[test]
    fn layouts_follow_the_wire_table() {
        let l = Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.layout().unwrap();
        assert!(l.reth && l.imm && !l.aeth);
        assert_eq!(l.len(), 20);
        let l = Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.layout().unwrap();
        assert!(l.deth && l.imm);
        assert_eq!(l.len(), 12);
        let l = Opcode::RD_RDMA_READ_RESPONSE_MIDDLE.layout().unwrap();
        assert!(l.rdeth && !l.deth && !l.aeth);
        let l = Opcode::RD_COMPARE_SWAP.layout().unwrap();
        assert!(l.rdeth && l.deth && l.atomic_eth);
        assert_eq!(l.len(), 4 + 8 + 28);
        let l = Opcode::XRC_RDMA_READ_REQUEST.layout().unwrap();
        assert!(l.xrceth && l.reth);
        assert!(!Opcode::XRC_ACKNOWLEDGE.layout().unwrap().xrceth);
        let l = Opcode::RC_ATOMIC_ACKNOWLEDGE.layout().unwrap();
        assert_eq!(l.len(), 12);
        let l = Opcode::CNP.layout().unwrap();
        assert!(l.cnp);
        assert_eq!(l.len(), 0);
        assert!(
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
                .layout()
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn classification() {
        assert!(Opcode::RC_ACKNOWLEDGE.is_ack());
        assert!(Opcode::XRC_ATOMIC_ACKNOWLEDGE.is_ack());
        assert!(!Opcode(0x91).is_ack());
        assert!(!Opcode(0x31).is_ack(), "UC has no ACK");
        assert!(Opcode::RD_RDMA_READ_RESPONSE_ONLY.is_read_response());
        assert!(!Opcode::RC_RDMA_READ_REQUEST.is_read_response());
        assert!(Opcode::RC_RDMA_READ_REQUEST.is_read_request());
        assert!(Opcode::RC_SEND_FIRST.consumes_request_psn());
        assert!(Opcode::RC_FETCH_ADD.consumes_request_psn());
        assert!(Opcode::RC_RDMA_READ_REQUEST.consumes_request_psn());
        assert!(!Opcode::RC_ACKNOWLEDGE.consumes_request_psn());
        assert!(!Opcode::RC_RDMA_READ_RESPONSE_FIRST.consumes_request_psn());
        assert!(!Opcode::CNP.consumes_request_psn());
        assert!(!Opcode(0x1f).consumes_request_psn());
    }
}
