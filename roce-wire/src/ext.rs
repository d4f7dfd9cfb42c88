//! The extension transport headers that may follow the BTH, as views and owned reprs.
//!
//! Which of them are present is decided by the opcode alone ([`crate::Opcode::layout`]); nothing in the bytes
//! says so. That is why [`ExtHeaders::parse`] takes the layout as an argument.

use crate::error::{Error, Layer};
use crate::field::{get_u24, get_u32, get_u64, set_u24, set_u32, set_u64};
use crate::opcode::ExtLayout;

const U24_MAX: u32 = 0x00ff_ffff;

/// Byte ranges of the RETH.
pub mod reth_field {
    use crate::field::Field;
    /// Virtual address.
    pub const VA: Field = 0..8;
    /// Remote key.
    pub const RKEY: Field = 8..12;
    /// DMA length.
    pub const DMA_LEN: Field = 12..16;
}

/// Byte ranges of the AETH.
pub mod aeth_field {
    use crate::field::Field;
    /// Syndrome.
    pub const SYNDROME: usize = 0;
    /// Message sequence number, 24 bits.
    pub const MSN: Field = 1..4;
}

/// Byte ranges of the DETH.
pub mod deth_field {
    use crate::field::Field;
    /// Queue key.
    pub const QKEY: Field = 0..4;
    /// Reserved byte.
    pub const RESERVED: usize = 4;
    /// Source QP, 24 bits.
    pub const SRC_QP: Field = 5..8;
}

/// Byte ranges of the RDETH and the XRCETH, which share a shape: a reserved byte, then 24 bits.
pub mod eth24_field {
    use crate::field::Field;
    /// Reserved byte.
    pub const RESERVED: usize = 0;
    /// EE context (RDETH) or XRC SRQ number (XRCETH).
    pub const VALUE: Field = 1..4;
}

/// Byte ranges of the AtomicETH.
pub mod atomic_eth_field {
    use crate::field::Field;
    /// Virtual address.
    pub const VA: Field = 0..8;
    /// Remote key.
    pub const RKEY: Field = 8..12;
    /// Swap (compare-swap) or add (fetch-add) data.
    pub const SWAP_ADD: Field = 12..20;
    /// Compare data.
    pub const COMPARE: Field = 20..28;
}

/// Byte ranges of the AtomicAckETH.
pub mod atomic_ack_eth_field {
    use crate::field::Field;
    /// The remote data as it was before the atomic operation.
    pub const ORIG: Field = 0..8;
}

/// Byte range of ImmDt and IETH (a single 32-bit value).
pub mod u32_field {
    use crate::field::Field;
    /// The value.
    pub const VALUE: Field = 0..4;
}

view!(
    /// A view of a RETH (RDMA Extended Transport Header, 16 bytes).
    Reth, Layer::Reth, 16
);
view!(
    /// A view of an AETH (ACK Extended Transport Header, 4 bytes).
    Aeth, Layer::Aeth, 4
);
view!(
    /// A view of a DETH (Datagram Extended Transport Header, 8 bytes).
    Deth, Layer::Deth, 8
);
view!(
    /// A view of an RDETH (Reliable Datagram Extended Transport Header, 4 bytes).
    Rdeth, Layer::Rdeth, 4
);
view!(
    /// A view of an XRCETH (XRC Extended Transport Header, 4 bytes).
    XrcEth, Layer::XrcEth, 4
);
view!(
    /// A view of an AtomicETH (Atomic Extended Transport Header, 28 bytes).
    AtomicEth, Layer::AtomicEth, 28
);
view!(
    /// A view of an AtomicAckETH (Atomic ACK Extended Transport Header, 8 bytes).
    AtomicAckEth, Layer::AtomicAckEth, 8
);
view!(
    /// A view of ImmDt (immediate data, 4 bytes, opaque to the transport).
    ImmDt, Layer::ImmDt, 4
);
view!(
    /// A view of an IETH (Invalidate Extended Transport Header: the R_Key to invalidate, 4 bytes).
    Ieth, Layer::Ieth, 4
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Virtual address.
    pub fn va(&self) -> u64 {
        get_u64(self.buffer.as_ref(), reth_field::VA)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), reth_field::RKEY)
    }
    /// DMA length: bytes of the whole RDMA operation, not of this packet.
    pub fn dma_len(&self) -> u32 {
        get_u32(self.buffer.as_ref(), reth_field::DMA_LEN)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), reth_field::VA, v)
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), reth_field::RKEY, v)
    }
    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), reth_field::DMA_LEN, v)
    }
}

impl<T: AsRef<[u8]>> Aeth<T> {
    /// Syndrome: ACK, RNR NAK or NAK, see [`AethKind`].
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[aeth_field::SYNDROME]
    }
    /// Message sequence number.
    pub fn msn(&self) -> u32 {
        get_u24(self.buffer.as_ref(), aeth_field::MSN)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Sets the syndrome.
    pub fn set_syndrome(&mut self, v: u8) {
        self.buffer.as_mut()[aeth_field::SYNDROME] = v;
    }
    /// Sets the MSN; only the low 24 bits are kept.
    pub fn set_msn(&mut self, v: u32) {
        set_u24(self.buffer.as_mut(), aeth_field::MSN, v)
    }
}

impl<T: AsRef<[u8]>> Deth<T> {
    /// Queue key.
    pub fn qkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), deth_field::QKEY)
    }
    /// Source QP.
    pub fn src_qp(&self) -> u32 {
        get_u24(self.buffer.as_ref(), deth_field::SRC_QP)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Sets the queue key.
    pub fn set_qkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), deth_field::QKEY, v)
    }
    /// Sets the source QP (low 24 bits) and zeroes the reserved byte.
    pub fn set_src_qp(&mut self, v: u32) {
        self.buffer.as_mut()[deth_field::RESERVED] = 0;
        set_u24(self.buffer.as_mut(), deth_field::SRC_QP, v)
    }
}

impl<T: AsRef<[u8]>> Rdeth<T> {
    /// End-to-end context.
    pub fn ee_context(&self) -> u32 {
        get_u24(self.buffer.as_ref(), eth24_field::VALUE)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Rdeth<T> {
    /// Sets the EE context (low 24 bits) and zeroes the reserved byte.
    pub fn set_ee_context(&mut self, v: u32) {
        self.buffer.as_mut()[eth24_field::RESERVED] = 0;
        set_u24(self.buffer.as_mut(), eth24_field::VALUE, v)
    }
}

impl<T: AsRef<[u8]>> XrcEth<T> {
    /// XRC shared receive queue number.
    pub fn srq(&self) -> u32 {
        get_u24(self.buffer.as_ref(), eth24_field::VALUE)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> XrcEth<T> {
    /// Sets the XRC SRQ (low 24 bits) and zeroes the reserved byte.
    pub fn set_srq(&mut self, v: u32) {
        self.buffer.as_mut()[eth24_field::RESERVED] = 0;
        set_u24(self.buffer.as_mut(), eth24_field::VALUE, v)
    }
}

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Virtual address.
    pub fn va(&self) -> u64 {
        get_u64(self.buffer.as_ref(), atomic_eth_field::VA)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), atomic_eth_field::RKEY)
    }
    /// Swap or add data.
    pub fn swap_add(&self) -> u64 {
        get_u64(self.buffer.as_ref(), atomic_eth_field::SWAP_ADD)
    }
    /// Compare data.
    pub fn compare(&self) -> u64 {
        get_u64(self.buffer.as_ref(), atomic_eth_field::COMPARE)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), atomic_eth_field::VA, v)
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), atomic_eth_field::RKEY, v)
    }
    /// Sets the swap or add data.
    pub fn set_swap_add(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), atomic_eth_field::SWAP_ADD, v)
    }
    /// Sets the compare data.
    pub fn set_compare(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), atomic_eth_field::COMPARE, v)
    }
}

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// The remote data before the atomic operation.
    pub fn orig(&self) -> u64 {
        get_u64(self.buffer.as_ref(), atomic_ack_eth_field::ORIG)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    /// Sets the original remote data.
    pub fn set_orig(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), atomic_ack_eth_field::ORIG, v)
    }
}

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// The immediate value, as the sender's `imm_data` (big-endian on the wire).
    pub fn imm(&self) -> u32 {
        get_u32(self.buffer.as_ref(), u32_field::VALUE)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    /// Sets the immediate value.
    pub fn set_imm(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), u32_field::VALUE, v)
    }
}

impl<T: AsRef<[u8]>> Ieth<T> {
    /// The R_Key the responder is asked to invalidate.
    pub fn rkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), u32_field::VALUE)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Ieth<T> {
    /// Sets the R_Key to invalidate.
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), u32_field::VALUE, v)
    }
}

fn check_u24(layer: Layer, offset: usize, v: u32, what: &'static str) -> Result<(), Error> {
    if v > U24_MAX {
        Err(Error::malformed(layer, offset, what))
    } else {
        Ok(())
    }
}

/// RETH fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RethRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length of the whole operation.
    pub dma_len: u32,
}

impl RethRepr {
    /// Length of the header.
    pub const LEN: usize = 16;
    /// Reads a RETH at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, Error> {
        let h = Reth::new_checked(bytes)?;
        Ok(RethRepr {
            va: h.va(),
            rkey: h.rkey(),
            dma_len: h.dma_len(),
        })
    }
    /// Writes the header into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        let mut h = Reth::new_checked(buf)?;
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_dma_len(self.dma_len);
        Ok(())
    }
}

/// Why an AETH was sent, decoded from its syndrome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AethKind {
    /// Positive acknowledgement; `credits` is the 5-bit end-to-end credit code (31 = no flow control).
    Ack {
        /// Credit count code.
        credits: u8,
    },
    /// Receiver not ready; `timer` is the 5-bit code of the minimum RNR NAK delay.
    RnrNak {
        /// RNR timer code.
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// A syndrome whose top three bits are neither `000`, `001` nor `011`.
    Reserved(u8),
}

impl AethKind {
    /// The syndrome byte for this kind. A `Reserved` syndrome is returned as is; a code that does not fit in five
    /// bits is cut to five.
    pub const fn syndrome(self) -> u8 {
        match self {
            AethKind::Ack { credits } => credits & 0x1f,
            AethKind::RnrNak { timer } => 0x20 | (timer & 0x1f),
            AethKind::Nak(code) => 0x60 | (code.code() & 0x1f),
            AethKind::Reserved(s) => s,
        }
    }

    /// The name used in the `decode` output: `"ack"`, `"rnr_nak"`, `"nak"` or `"reserved"`.
    pub const fn name(self) -> &'static str {
        match self {
            AethKind::Ack { .. } => "ack",
            AethKind::RnrNak { .. } => "rnr_nak",
            AethKind::Nak(_) => "nak",
            AethKind::Reserved(_) => "reserved",
        }
    }
}

/// The reason in a NAK syndrome (its low five bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: the responder expected another PSN; the requester goes back and resends from there.
    PsnSequenceError,
    /// 1: the request could not be carried out as asked.
    InvalidRequest,
    /// 2: R_Key or access rights were wrong.
    RemoteAccessError,
    /// 3: the responder failed for a reason of its own.
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5–31, not defined.
    Reserved(u8),
}

impl NakCode {
    /// Decodes the low five bits of a NAK syndrome.
    pub const fn from_code(code: u8) -> Self {
        match code & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }
    /// The numeric NAK code.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c,
        }
    }
    /// A short lower-case name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            NakCode::PsnSequenceError => "psn_sequence_error",
            NakCode::InvalidRequest => "invalid_request",
            NakCode::RemoteAccessError => "remote_access_error",
            NakCode::RemoteOperationalError => "remote_operational_error",
            NakCode::InvalidRdRequest => "invalid_rd_request",
            NakCode::Reserved(_) => "reserved",
        }
    }
}

/// AETH fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// Syndrome byte, see [`AethRepr::kind`].
    pub syndrome: u8,
    /// Message sequence number, 24 bits.
    pub msn: u32,
}

impl AethRepr {
    /// Length of the header.
    pub const LEN: usize = 4;
    /// Reads an AETH at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, Error> {
        let h = Aeth::new_checked(bytes)?;
        Ok(AethRepr {
            syndrome: h.syndrome(),
            msn: h.msn(),
        })
    }
    /// Writes the header into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        check_u24(
            Layer::Aeth,
            aeth_field::MSN.start,
            self.msn,
            "MSN wider than 24 bits",
        )?;
        let mut h = Aeth::new_checked(buf)?;
        h.set_syndrome(self.syndrome);
        h.set_msn(self.msn);
        Ok(())
    }
    /// Decodes the syndrome (bits 7–5 select ACK `000`, RNR NAK `001` or NAK `011`).
    pub const fn kind(&self) -> AethKind {
        let low = self.syndrome & 0x1f;
        match self.syndrome >> 5 {
            0b000 => AethKind::Ack { credits: low },
            0b001 => AethKind::RnrNak { timer: low },
            0b011 => AethKind::Nak(NakCode::from_code(low)),
            _ => AethKind::Reserved(self.syndrome),
        }
    }
}

/// DETH fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: u32,
    /// Source QP, 24 bits.
    pub src_qp: u32,
}

impl DethRepr {
    /// Length of the header.
    pub const LEN: usize = 8;
    /// Reads a DETH at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, Error> {
        let h = Deth::new_checked(bytes)?;
        Ok(DethRepr {
            qkey: h.qkey(),
            src_qp: h.src_qp(),
        })
    }
    /// Writes the header into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        check_u24(
            Layer::Deth,
            deth_field::SRC_QP.start,
            self.src_qp,
            "source QP wider than 24 bits",
        )?;
        let mut h = Deth::new_checked(buf)?;
        h.set_qkey(self.qkey);
        h.set_src_qp(self.src_qp);
        Ok(())
    }
}

/// RDETH fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RdethRepr {
    /// End-to-end context, 24 bits.
    pub ee_context: u32,
}

impl RdethRepr {
    /// Length of the header.
    pub const LEN: usize = 4;
    /// Reads an RDETH at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, Error> {
        let h = Rdeth::new_checked(bytes)?;
        Ok(RdethRepr {
            ee_context: h.ee_context(),
        })
    }
    /// Writes the header into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        check_u24(
            Layer::Rdeth,
            eth24_field::VALUE.start,
            self.ee_context,
            "EE context wider than 24 bits",
        )?;
        let mut h = Rdeth::new_checked(buf)?;
        h.set_ee_context(self.ee_context);
        Ok(())
    }
}

/// XRCETH fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct XrcEthRepr {
    /// XRC shared receive queue, 24 bits.
    pub srq: u32,
}

impl XrcEthRepr {
    /// Length of the header.
    pub const LEN: usize = 4;
    /// Reads an XRCETH at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, Error> {
        let h = XrcEth::new_checked(bytes)?;
        Ok(XrcEthRepr { srq: h.srq() })
    }
    /// Writes the header into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        check_u24(
            Layer::XrcEth,
            eth24_field::VALUE.start,
            self.srq,
            "XRC SRQ wider than 24 bits",
        )?;
        let mut h = XrcEth::new_checked(buf)?;
        h.set_srq(self.srq);
        Ok(())
    }
}

/// AtomicETH fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap (compare-swap) or add (fetch-add) data.
    pub swap_add: u64,
    /// Compare data (unused by fetch-add).
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Length of the header.
    pub const LEN: usize = 28;
    /// Reads an AtomicETH at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, Error> {
        let h = AtomicEth::new_checked(bytes)?;
        Ok(AtomicEthRepr {
            va: h.va(),
            rkey: h.rkey(),
            swap_add: h.swap_add(),
            compare: h.compare(),
        })
    }
    /// Writes the header into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        let mut h = AtomicEth::new_checked(buf)?;
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_swap_add(self.swap_add);
        h.set_compare(self.compare);
        Ok(())
    }
}

/// AtomicAckETH fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    /// The remote data before the atomic operation.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    /// Length of the header.
    pub const LEN: usize = 8;
    /// Reads an AtomicAckETH at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, Error> {
        let h = AtomicAckEth::new_checked(bytes)?;
        Ok(AtomicAckEthRepr { orig: h.orig() })
    }
    /// Writes the header into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        let mut h = AtomicAckEth::new_checked(buf)?;
        h.set_orig(self.orig);
        Ok(())
    }
}

/// All extension headers of one packet; a field is `Some` exactly when the opcode's layout has that header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtHeaders {
    /// XRCETH (XRC requests).
    pub xrceth: Option<XrcEthRepr>,
    /// RDETH (every RD packet).
    pub rdeth: Option<RdethRepr>,
    /// DETH (UD, RD requests).
    pub deth: Option<DethRepr>,
    /// RETH (RDMA WRITE FIRST/ONLY, READ REQUEST).
    pub reth: Option<RethRepr>,
    /// AtomicETH (COMPARE SWAP, FETCH ADD).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH (ACKs, read responses except MIDDLE).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH (ATOMIC ACKNOWLEDGE).
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// ImmDt (the WITH IMMEDIATE operations).
    pub imm: Option<u32>,
    /// IETH (the WITH INVALIDATE operations): the R_Key to invalidate.
    pub ieth: Option<u32>,
}

/// What [`ExtHeaders::parse_partial`] could read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialExt {
    /// The headers read before the first one that did not fit.
    pub ext: ExtHeaders,
    /// Bytes consumed by those headers.
    pub len: usize,
    /// The length error of the first header that did not fit, offsets relative to the start of the extension
    /// headers; `None` when all fitted.
    pub stop: Option<Error>,
}

impl ExtHeaders {
    /// The layout these headers form (never a CNP).
    pub const fn layout(&self) -> ExtLayout {
        ExtLayout {
            xrceth: self.xrceth.is_some(),
            rdeth: self.rdeth.is_some(),
            deth: self.deth.is_some(),
            reth: self.reth.is_some(),
            atomic_eth: self.atomic_eth.is_some(),
            aeth: self.aeth.is_some(),
            atomic_ack_eth: self.atomic_ack_eth.is_some(),
            imm: self.imm.is_some(),
            ieth: self.ieth.is_some(),
            cnp: false,
        }
    }

    /// Bytes these headers take on the wire.
    pub const fn len(&self) -> usize {
        self.layout().len()
    }

    /// True when there is no extension header.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when these headers are exactly the ones `layout` calls for (the `cnp` flag is ignored).
    pub const fn matches(&self, layout: &ExtLayout) -> bool {
        let mine = self.layout();
        let theirs = ExtLayout {
            cnp: false,
            ..*layout
        };
        mine.xrceth == theirs.xrceth
            && mine.rdeth == theirs.rdeth
            && mine.deth == theirs.deth
            && mine.reth == theirs.reth
            && mine.atomic_eth == theirs.atomic_eth
            && mine.aeth == theirs.aeth
            && mine.atomic_ack_eth == theirs.atomic_ack_eth
            && mine.imm == theirs.imm
            && mine.ieth == theirs.ieth
    }

    /// Reads the headers `layout` calls for from the start of `bytes` (the byte after the BTH). Returns them and
    /// the number of bytes they took. Offsets in errors are relative to the start of `bytes`.
    pub fn parse(layout: &ExtLayout, bytes: &[u8]) -> Result<(Self, usize), Error> {
        let p = Self::parse_partial(layout, bytes);
        match p.stop {
            Some(e) => Err(e),
            None => Ok((p.ext, p.len)),
        }
    }

    /// Like [`ExtHeaders::parse`], but keeps the headers that fit when a later one does not.
    pub fn parse_partial(layout: &ExtLayout, bytes: &[u8]) -> PartialExt {
        let mut ext = ExtHeaders::default();
        let (len, stop) = ext.read_partial(layout, bytes);
        PartialExt { ext, len, stop }
    }

    /// [`ExtHeaders::parse_partial`] into `self`, which must hold no headers: returns the bytes consumed and
    /// the error of the first header that did not fit. Lets a caller fill headers where it keeps them.
    #[inline]
    pub fn read_partial(&mut self, layout: &ExtLayout, bytes: &[u8]) -> (usize, Option<Error>) {
        // Most packets of a bulk transfer (the MIDDLE opcodes) carry no extension header: one test instead of
        // nine.
        if !layout.has_headers() {
            return (0, None);
        }
        let mut len = 0;
        macro_rules! step {
            ($flag:ident, $repr:ty, $conv:expr) => {
                if layout.$flag {
                    let rest = bytes.get(len..).unwrap_or(&[]);
                    match <$repr>::parse(rest) {
                        Ok(r) => {
                            self.$flag = Some($conv(r));
                            len += <$repr>::LEN;
                        }
                        Err(e) => return (len, Some(e.shifted(len))),
                    }
                }
            };
        }
        step!(xrceth, XrcEthRepr, core::convert::identity);
        step!(rdeth, RdethRepr, core::convert::identity);
        step!(deth, DethRepr, core::convert::identity);
        step!(reth, RethRepr, core::convert::identity);
        step!(atomic_eth, AtomicEthRepr, core::convert::identity);
        step!(aeth, AethRepr, core::convert::identity);
        step!(atomic_ack_eth, AtomicAckEthRepr, core::convert::identity);
        step!(imm, ImmDtRepr, |r: ImmDtRepr| r.0);
        step!(ieth, IethRepr, |r: IethRepr| r.0);
        (len, None)
    }

    /// Writes the headers present into the start of `buf`, in wire order, and returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let need = self.len();
        if buf.len() < need {
            // Report the first header that does not fit, so the error names a real layer.
            let p = Self::parse_partial(&self.layout(), buf);
            return Err(p.stop.unwrap_or(Error::len(Layer::Bth, need, buf.len())));
        }
        let mut off = 0;
        macro_rules! put {
            ($flag:ident, $repr:ty, $conv:expr) => {
                if let Some(v) = self.$flag {
                    let r: $repr = $conv(v);
                    r.emit(&mut buf[off..]).map_err(|e| e.shifted(off))?;
                    off += <$repr>::LEN;
                }
            };
        }
        put!(xrceth, XrcEthRepr, core::convert::identity);
        put!(rdeth, RdethRepr, core::convert::identity);
        put!(deth, DethRepr, core::convert::identity);
        put!(reth, RethRepr, core::convert::identity);
        put!(atomic_eth, AtomicEthRepr, core::convert::identity);
        put!(aeth, AethRepr, core::convert::identity);
        put!(atomic_ack_eth, AtomicAckEthRepr, core::convert::identity);
        put!(imm, ImmDtRepr, ImmDtRepr);
        put!(ieth, IethRepr, IethRepr);
        Ok(off)
    }
}

/// ImmDt as a repr, so that it can be handled like the other headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ImmDtRepr(pub u32);

impl ImmDtRepr {
    /// Length of the header.
    pub const LEN: usize = 4;
    /// Reads ImmDt at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, Error> {
        Ok(ImmDtRepr(ImmDt::new_checked(bytes)?.imm()))
    }
    /// Writes ImmDt into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        ImmDt::new_checked(buf)?.set_imm(self.0);
        Ok(())
    }
}

/// IETH as a repr: the R_Key to invalidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IethRepr(pub u32);

impl IethRepr {
    /// Length of the header.
    pub const LEN: usize = 4;
    /// Reads an IETH at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, Error> {
        Ok(IethRepr(Ieth::new_checked(bytes)?.rkey()))
    }
    /// Writes an IETH into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        Ieth::new_checked(buf)?.set_rkey(self.0);
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::Opcode;

    // RETH of the RDMA READ REQUEST in pcpp_pr1603_InfiniBandPacket.pcap.
    static RETH: [u8; 16] = [
        0x00, 0x00, 0x7f, 0xee, 0x26, 0x0f, 0xb0, 0x00, 0x00, 0x00, 0x02, 0xb8, 0x00, 0x01, 0x00,
        0x00,
    ];

    #[test]
    fn reth_deconstruct_construct() {
        let r = RethRepr::parse(&RETH).unwrap();
        assert_eq!(
            r,
            RethRepr {
                va: 0x7fee_260f_b000,
                rkey: 0x2b8,
                dma_len: 65536
            }
        );
        let mut buf = [0xffu8; 16];
        r.emit(&mut buf).unwrap();
        assert_eq!(buf, RETH);
        assert_eq!(
            RethRepr::parse(&RETH[..15]),
            Err(Error::len(Layer::Reth, 16, 15))
        );
    }

    #[test]
    fn aeth_kinds() {
        let ack = AethRepr::parse(&[0x1f, 0x00, 0x01, 0x02]).unwrap();
        assert_eq!(ack.msn, 0x102);
        assert_eq!(ack.kind(), AethKind::Ack { credits: 31 });
        let rnr = AethRepr::parse(&[0x2e, 0, 0, 0]).unwrap();
        assert_eq!(rnr.kind(), AethKind::RnrNak { timer: 14 });
        let expect = [
            (0x60, NakCode::PsnSequenceError),
            (0x61, NakCode::InvalidRequest),
            (0x62, NakCode::RemoteAccessError),
            (0x63, NakCode::RemoteOperationalError),
            (0x64, NakCode::InvalidRdRequest),
            (0x65, NakCode::Reserved(5)),
            (0x7f, NakCode::Reserved(31)),
        ];
        for (syn, code) in expect {
            let a = AethRepr::parse(&[syn, 0xab, 0xcd, 0xef]).unwrap();
            assert_eq!(a.kind(), AethKind::Nak(code));
            assert_eq!(a.kind().syndrome(), syn);
            assert_eq!(code.code(), syn & 0x1f);
            assert_eq!(a.msn, 0xabcdef);
        }
        for syn in [0x40u8, 0x5f, 0x80, 0xff] {
            assert_eq!(
                AethRepr {
                    syndrome: syn,
                    msn: 0
                }
                .kind(),
                AethKind::Reserved(syn)
            );
        }
        let mut buf = [0u8; 4];
        AethRepr {
            syndrome: AethKind::Nak(NakCode::RemoteAccessError).syndrome(),
            msn: 7,
        }
        .emit(&mut buf)
        .unwrap();
        assert_eq!(buf, [0x62, 0, 0, 7]);
    }

    #[test]
    fn deth_rdeth_xrceth() {
        // DETH of a CM MAD in test.pcap: Q_Key 0x80010000, source QP 1.
        let deth = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01];
        let d = DethRepr::parse(&deth).unwrap();
        assert_eq!(
            d,
            DethRepr {
                qkey: 0x8001_0000,
                src_qp: 1
            }
        );
        let mut buf = [0xffu8; 8];
        d.emit(&mut buf).unwrap();
        assert_eq!(buf, deth);

        let mut buf = [0xffu8; 4];
        RdethRepr {
            ee_context: 0x123456,
        }
        .emit(&mut buf)
        .unwrap();
        assert_eq!(buf, [0, 0x12, 0x34, 0x56]);
        assert_eq!(RdethRepr::parse(&buf).unwrap().ee_context, 0x123456);
        XrcEthRepr { srq: 0xabcdef }.emit(&mut buf).unwrap();
        assert_eq!(buf, [0, 0xab, 0xcd, 0xef]);
        assert_eq!(XrcEthRepr::parse(&buf).unwrap().srq, 0xabcdef);
        assert!(matches!(
            XrcEthRepr { srq: 1 << 24 }.emit(&mut buf),
            Err(Error::Malformed {
                layer: Layer::XrcEth,
                offset: 1,
                ..
            })
        ));
    }

    #[test]
    fn atomic_headers() {
        let mut bytes = [0u8; 28];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        let a = AtomicEthRepr::parse(&bytes).unwrap();
        assert_eq!(a.va, 0x0102_0304_0506_0708);
        assert_eq!(a.rkey, 0x090a_0b0c);
        assert_eq!(a.swap_add, 0x0d0e_0f10_1112_1314);
        assert_eq!(a.compare, 0x1516_1718_191a_1b1c);
        let mut buf = [0u8; 28];
        a.emit(&mut buf).unwrap();
        assert_eq!(buf, bytes);
        let ack = AtomicAckEthRepr::parse(&bytes[..8]).unwrap();
        assert_eq!(ack.orig, 0x0102_0304_0506_0708);
        assert_eq!(
            AtomicEthRepr::parse(&bytes[..27]),
            Err(Error::len(Layer::AtomicEth, 28, 27))
        );
    }

    #[test]
    fn imm_and_ieth() {
        let b = [0xde, 0xad, 0xbe, 0xef];
        assert_eq!(ImmDt::new_checked(&b[..]).unwrap().imm(), 0xdead_beef);
        assert_eq!(Ieth::new_checked(&b[..]).unwrap().rkey(), 0xdead_beef);
        assert_eq!(
            Ieth::new_checked(&b[..3]).unwrap_err(),
            Error::len(Layer::Ieth, 4, 3)
        );
    }

    #[test]
    fn ext_headers_in_wire_order() {
        // RDMA WRITE ONLY WITH IMMEDIATE: RETH then ImmDt.
        let layout = Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.layout().unwrap();
        let mut bytes = [0u8; 20];
        bytes[..16].copy_from_slice(&RETH);
        bytes[16..].copy_from_slice(&[0, 0, 0, 9]);
        let (ext, n) = ExtHeaders::parse(&layout, &bytes).unwrap();
        assert_eq!(n, 20);
        assert_eq!(ext.imm, Some(9));
        assert_eq!(ext.reth.unwrap().dma_len, 65536);
        assert!(ext.matches(&layout));
        let mut out = [0u8; 20];
        assert_eq!(ext.emit(&mut out), Ok(20));
        assert_eq!(out, bytes);
        // Cut inside ImmDt: the RETH is kept, the error points at byte 16.
        let p = ExtHeaders::parse_partial(&layout, &bytes[..18]);
        assert!(p.ext.reth.is_some() && p.ext.imm.is_none());
        assert_eq!(
            p.stop,
            Some(Error::Len(crate::LenError {
                required_len: 4,
                len: 2,
                layer: Layer::ImmDt,
                layer_start_offset: 16
            }))
        );
        let mut small = [0u8; 17];
        assert_eq!(
            ext.emit(&mut small),
            Err(Error::Len(crate::LenError {
                required_len: 4,
                len: 1,
                layer: Layer::ImmDt,
                layer_start_offset: 16
            }))
        );
    }
}
