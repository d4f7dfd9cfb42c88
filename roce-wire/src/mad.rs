//! IB Communication Manager MADs: the connection handshake that tells which QP talks to which.
//!
//! RDMA CM sets up an RC connection by exchanging CM MADs in UD SEND ONLY packets to QP1 (after the DETH). REQ
//! and REP carry each side's QP number and starting PSN, which is the most reliable way to pair a data flow with
//! the CNPs and ACKs that come back for it. Offsets below are those of IBTA vol. 1, chapter 12.6; they are counted
//! from the start of the MAD (the 24-byte common header comes first, the CM message at byte 24).

use crate::error::{Error, Layer, check_len};
use crate::field::{get_u16, get_u24, get_u32, get_u64};

/// Management class of the Communication Manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The general services QP that CM MADs are sent to.
pub const QP1: u32 = 1;
/// Length of the MAD common header.
pub const MAD_HEADER_LEN: usize = 24;
/// Length of a whole MAD.
pub const MAD_LEN: usize = 256;

/// CM attribute IDs.
pub mod attr {
    /// ConnectRequest.
    pub const REQ: u16 = 0x0010;
    /// MsgRcptAck.
    pub const MRA: u16 = 0x0011;
    /// ConnectReject.
    pub const REJ: u16 = 0x0012;
    /// ConnectReply.
    pub const REP: u16 = 0x0013;
    /// ReadyToUse.
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest.
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply.
    pub const DREP: u16 = 0x0016;
}

/// Byte ranges of the MAD common header and of the CM messages (from the start of the MAD).
pub mod field {
    use crate::field::Field;
    /// Base version (1).
    pub const BASE_VERSION: usize = 0;
    /// Management class.
    pub const MGMT_CLASS: usize = 1;
    /// Class version.
    pub const CLASS_VERSION: usize = 2;
    /// R bit and method.
    pub const METHOD: usize = 3;
    /// Status.
    pub const STATUS: Field = 4..6;
    /// Class specific.
    pub const CLASS_SPECIFIC: Field = 6..8;
    /// Transaction ID.
    pub const TRANSACTION_ID: Field = 8..16;
    /// Attribute ID.
    pub const ATTR_ID: Field = 16..18;
    /// Attribute modifier.
    pub const ATTR_MODIFIER: Field = 20..24;

    /// Every CM message but REQ starts with the sender's communication ID ...
    pub const LOCAL_COMM_ID: Field = 24..28;
    /// ... followed (REP, RTU, DREQ, DREP) by the peer's.
    pub const REMOTE_COMM_ID: Field = 28..32;

    /// REQ: local QPN, 24 bits.
    pub const REQ_LOCAL_QPN: Field = 56..59;
    /// REQ: starting PSN, 24 bits.
    pub const REQ_STARTING_PSN: Field = 68..71;
    /// REP: local QPN, 24 bits.
    pub const REP_LOCAL_QPN: Field = 36..39;
    /// REP: starting PSN, 24 bits.
    pub const REP_STARTING_PSN: Field = 44..47;
    /// DREQ: remote QPN/EECN, 24 bits.
    pub const DREQ_REMOTE_QPN: Field = 32..35;
}

view!(
    /// A view of a MAD, checked for its 24-byte common header.
    Mad, Layer::Mad, 24
);

impl<T: AsRef<[u8]>> Mad<T> {
    /// Base version.
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[field::BASE_VERSION]
    }
    /// Management class.
    pub fn mgmt_class(&self) -> u8 {
        self.buffer.as_ref()[field::MGMT_CLASS]
    }
    /// Class version.
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS_VERSION]
    }
    /// Method, with the response bit (0x80).
    pub fn method(&self) -> u8 {
        self.buffer.as_ref()[field::METHOD]
    }
    /// Status.
    pub fn status(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::STATUS)
    }
    /// Transaction ID.
    pub fn transaction_id(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::TRANSACTION_ID)
    }
    /// Attribute ID.
    pub fn attr_id(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::ATTR_ID)
    }
    /// Attribute modifier.
    pub fn attr_modifier(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::ATTR_MODIFIER)
    }
}

/// The common MAD header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MadHeaderRepr {
    /// Base version.
    pub base_version: u8,
    /// Management class.
    pub mgmt_class: u8,
    /// Class version.
    pub class_version: u8,
    /// Method, with the response bit.
    pub method: u8,
    /// Status.
    pub status: u16,
    /// Transaction ID.
    pub transaction_id: u64,
    /// Attribute ID.
    pub attr_id: u16,
    /// Attribute modifier.
    pub attr_modifier: u32,
}

impl MadHeaderRepr {
    /// Length of the header.
    pub const LEN: usize = MAD_HEADER_LEN;
    /// Reads the common header at the start of `mad`.
    pub fn parse(mad: &[u8]) -> Result<Self, Error> {
        let m = Mad::new_checked(mad)?;
        Ok(MadHeaderRepr {
            base_version: m.base_version(),
            mgmt_class: m.mgmt_class(),
            class_version: m.class_version(),
            method: m.method(),
            status: m.status(),
            transaction_id: m.transaction_id(),
            attr_id: m.attr_id(),
            attr_modifier: m.attr_modifier(),
        })
    }
}

/// The fields of a CM message that matter for pairing QPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmMessage {
    /// ConnectRequest: the active side's QP and first PSN.
    Req {
        /// Sender's communication ID.
        local_comm_id: u32,
        /// Sender's QP.
        local_qpn: u32,
        /// First PSN the sender will use.
        starting_psn: u32,
    },
    /// ConnectReply: the passive side's QP and first PSN.
    Rep {
        /// Sender's communication ID.
        local_comm_id: u32,
        /// The REQ sender's communication ID.
        remote_comm_id: u32,
        /// Sender's QP.
        local_qpn: u32,
        /// First PSN the sender will use.
        starting_psn: u32,
    },
    /// ReadyToUse: the connection is up.
    Rtu {
        /// Sender's communication ID.
        local_comm_id: u32,
        /// Peer's communication ID.
        remote_comm_id: u32,
    },
    /// DisconnectRequest.
    Dreq {
        /// Sender's communication ID.
        local_comm_id: u32,
        /// Peer's communication ID.
        remote_comm_id: u32,
        /// The peer's QP (or EE context).
        remote_qpn: u32,
    },
    /// DisconnectReply.
    Drep {
        /// Sender's communication ID.
        local_comm_id: u32,
        /// Peer's communication ID.
        remote_comm_id: u32,
    },
    /// Another CM attribute (MRA, REJ, LAP, APR, SIDR ...).
    Other {
        /// Its attribute ID.
        attr_id: u16,
    },
}

/// Reads a CM message from a MAD (the bytes after the DETH of a UD SEND ONLY to QP1). `Ok(None)` when the MAD is
/// not of the CM class. Only the bytes up to the last field read are required, so a MAD cut by a snap length
/// still yields its QP numbers when they were captured.
pub fn parse_cm(mad: &[u8]) -> Result<Option<CmMessage>, Error> {
    let m = Mad::new_checked(mad)?;
    if m.mgmt_class() != MGMT_CLASS_CM {
        return Ok(None);
    }
    let attr_id = m.attr_id();
    let need = match attr_id {
        attr::REQ => field::REQ_STARTING_PSN.end,
        attr::REP => field::REP_STARTING_PSN.end,
        attr::DREQ => field::DREQ_REMOTE_QPN.end,
        attr::RTU | attr::DREP => field::REMOTE_COMM_ID.end,
        _ => return Ok(Some(CmMessage::Other { attr_id })),
    };
    check_len(Layer::Mad, mad, need)?;
    let local_comm_id = get_u32(mad, field::LOCAL_COMM_ID);
    let remote_comm_id = get_u32(mad, field::REMOTE_COMM_ID);
    Ok(Some(match attr_id {
        attr::REQ => CmMessage::Req {
            local_comm_id,
            local_qpn: get_u24(mad, field::REQ_LOCAL_QPN),
            starting_psn: get_u24(mad, field::REQ_STARTING_PSN),
        },
        attr::REP => CmMessage::Rep {
            local_comm_id,
            remote_comm_id,
            local_qpn: get_u24(mad, field::REP_LOCAL_QPN),
            starting_psn: get_u24(mad, field::REP_STARTING_PSN),
        },
        attr::RTU => CmMessage::Rtu {
            local_comm_id,
            remote_comm_id,
        },
        attr::DREQ => CmMessage::Dreq {
            local_comm_id,
            remote_comm_id,
            remote_qpn: get_u24(mad, field::DREQ_REMOTE_QPN),
        },
        _ => CmMessage::Drep {
            local_comm_id,
            remote_comm_id,
        },
    }))
}

#[cfg(test)]
mod test {
    use super::*;

    fn hex(s: &str) -> [u8; 72] {
        let mut out = [0u8; 72];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }

    // The first 72 bytes of the MADs of test.pcap, frames 1, 2, 3, 11 and 16 (after the DETH).
    const REQ: &str = "010702030000000000000002b90866ac0010000000000000ac6608b9000000000000000001061d2f505400fffedaf92d00000000000000000000170100000001000000a089bb0ea7";
    const REP: &str = "010702030000000000000002b90866ac0013000000000000c8577fdbac6608b9000000000000110000000000c2329800010178e0505400fffe8b2d120000aaab26b5800000000220";
    const RTU: &str = "010702030000000000000002b90866ac0014000000000000ac6608b9c8577fdb00000000000000000000000000000000000000000000000000000000000000000000000000000000";
    const DREQ: &str = "010702030000000000000002b90866ac0015000000000000ac6608b9c8577fdb00001100000000000000000000000000000000000000000000000000000000000000000000000000";
    const DREP: &str = "010702030000000000000002b90866ac0016000000000000c8577fdbac6608b900000000000000000000000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn handshake_from_test_pcap() {
        let req = hex(REQ);
        let h = MadHeaderRepr::parse(&req).unwrap();
        assert_eq!(
            (h.base_version, h.mgmt_class, h.class_version, h.method),
            (1, 7, 2, 3)
        );
        assert_eq!(h.transaction_id, 0x2_b908_66ac);
        assert_eq!(
            parse_cm(&req),
            Ok(Some(CmMessage::Req {
                local_comm_id: 0xac66_08b9,
                local_qpn: 0x17,
                starting_psn: 0x89bb0e
            }))
        );
        assert_eq!(
            parse_cm(&hex(REP)),
            Ok(Some(CmMessage::Rep {
                local_comm_id: 0xc857_7fdb,
                remote_comm_id: 0xac66_08b9,
                local_qpn: 0x11,
                starting_psn: 0xc23298
            }))
        );
        assert_eq!(
            parse_cm(&hex(RTU)),
            Ok(Some(CmMessage::Rtu {
                local_comm_id: 0xac66_08b9,
                remote_comm_id: 0xc857_7fdb
            }))
        );
        assert_eq!(
            parse_cm(&hex(DREQ)),
            Ok(Some(CmMessage::Dreq {
                local_comm_id: 0xac66_08b9,
                remote_comm_id: 0xc857_7fdb,
                remote_qpn: 0x11
            }))
        );
        assert_eq!(
            parse_cm(&hex(DREP)),
            Ok(Some(CmMessage::Drep {
                local_comm_id: 0xc857_7fdb,
                remote_comm_id: 0xac66_08b9
            }))
        );
    }

    #[test]
    fn other_classes_and_short_mads() {
        let mut m = hex(REQ);
        m[1] = 0x03; // subnet administration
        assert_eq!(parse_cm(&m), Ok(None));
        let m = hex(REQ);
        assert_eq!(parse_cm(&m[..70]), Err(Error::len(Layer::Mad, 71, 70)));
        assert_eq!(parse_cm(&m[..23]), Err(Error::len(Layer::Mad, 24, 23)));
        let mut m = hex(RTU);
        m[17] = 0x12; // REJ
        assert_eq!(
            parse_cm(&m[..24]),
            Ok(Some(CmMessage::Other { attr_id: attr::REJ }))
        );
    }
}
