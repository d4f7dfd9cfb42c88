//! IB Communication Manager MADs: the connection handshake that tells which QP talks to which.
//!
//! RDMA CM sets up an RC connection by exchanging CM MADs in UD SEND ONLY packets to QP1 (after the DETH). REQ
//! and REP carry each side's QP number and starting PSN, which is the most reliable way to pair a data flow with
//! the CNPs and ACKs that come back for it. Offsets below are those of IBTA vol. 1, chapter 12.6; they are counted
//! from the start of the MAD (the 24-byte common header comes first, the CM message at byte 24).

use crate::error::{Error, Layer, check_len};
use crate::field::{get_u16, get_u24, get_u32, get_u64, set_u16, set_u24, set_u32, set_u64};

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

    /// Writes the header into the first 24 bytes of `buf`. The class-specific word and the reserved bytes
    /// before the attribute modifier are not kept by the repr, so they are written as 0.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        check_len(Layer::Mad, buf, Self::LEN)?;
        buf[field::BASE_VERSION] = self.base_version;
        buf[field::MGMT_CLASS] = self.mgmt_class;
        buf[field::CLASS_VERSION] = self.class_version;
        buf[field::METHOD] = self.method;
        set_u16(buf, field::STATUS, self.status);
        set_u16(buf, field::CLASS_SPECIFIC, 0);
        set_u64(buf, field::TRANSACTION_ID, self.transaction_id);
        set_u16(buf, field::ATTR_ID, self.attr_id);
        set_u16(buf, field::ATTR_ID.end..field::ATTR_MODIFIER.start, 0);
        set_u32(buf, field::ATTR_MODIFIER, self.attr_modifier);
        Ok(())
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

impl CmMessage {
    /// The attribute ID this message travels under, which is how a receiver tells the messages apart.
    pub const fn attr_id(&self) -> u16 {
        match self {
            CmMessage::Req { .. } => attr::REQ,
            CmMessage::Rep { .. } => attr::REP,
            CmMessage::Rtu { .. } => attr::RTU,
            CmMessage::Dreq { .. } => attr::DREQ,
            CmMessage::Drep { .. } => attr::DREP,
            CmMessage::Other { attr_id } => *attr_id,
        }
    }
}

/// A whole CM MAD: the common header and the message fields [`parse_cm`] reads.
///
/// Everything else in the 256 bytes (service ID, GUIDs, Q_Key, path records, private data ...) is written as 0:
/// the repr exists so that tests and the simulator can produce handshakes that pair QPs, not to replay a real
/// connection manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CmMadRepr {
    /// The common header. Its class must be [`MGMT_CLASS_CM`] and its attribute ID that of `message`.
    pub header: MadHeaderRepr,
    /// The CM message.
    pub message: CmMessage,
}

impl CmMadRepr {
    /// Length of what [`CmMadRepr::emit`] writes and [`CmMadRepr::parse`] requires: MADs on QP1 are never
    /// shorter.
    pub const LEN: usize = MAD_LEN;

    /// A CM MAD as RDMA CM sends it: base version 1, class version 2, method Send (0x03), status and attribute
    /// modifier 0. Keeping these in one place spares every test from repeating IBTA's constants.
    pub const fn new(transaction_id: u64, message: CmMessage) -> Self {
        CmMadRepr {
            header: MadHeaderRepr {
                base_version: 1,
                mgmt_class: MGMT_CLASS_CM,
                class_version: 2,
                method: 0x03,
                status: 0,
                transaction_id,
                attr_id: message.attr_id(),
                attr_modifier: 0,
            },
            message,
        }
    }

    /// Strict counterpart of [`parse_cm`]: the whole 256-byte MAD must be there, so a MAD cut by a snap length
    /// is reported rather than half read. `Ok(None)` when the MAD is not of the CM class.
    pub fn parse(mad: &[u8]) -> Result<Option<Self>, Error> {
        check_len(Layer::Mad, mad, Self::LEN)?;
        let header = MadHeaderRepr::parse(mad)?;
        Ok(parse_cm(mad)?.map(|message| CmMadRepr { header, message }))
    }

    /// Writes the whole MAD into the first 256 bytes of `buf`. Fails rather than write something that would
    /// parse back differently: another class, an attribute ID that disagrees with the message, an `Other`
    /// carrying the ID of a message that has fields, or a QPN or PSN wider than 24 bits.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        self.validate()?;
        check_len(Layer::Mad, buf, Self::LEN)?;
        let mad = &mut buf[..Self::LEN];
        mad.fill(0);
        self.header.emit(mad)?;
        match self.message {
            CmMessage::Req {
                local_comm_id,
                local_qpn,
                starting_psn,
            } => {
                set_u32(mad, field::LOCAL_COMM_ID, local_comm_id);
                set_u24(mad, field::REQ_LOCAL_QPN, local_qpn);
                set_u24(mad, field::REQ_STARTING_PSN, starting_psn);
            }
            CmMessage::Rep {
                local_comm_id,
                remote_comm_id,
                local_qpn,
                starting_psn,
            } => {
                set_u32(mad, field::LOCAL_COMM_ID, local_comm_id);
                set_u32(mad, field::REMOTE_COMM_ID, remote_comm_id);
                set_u24(mad, field::REP_LOCAL_QPN, local_qpn);
                set_u24(mad, field::REP_STARTING_PSN, starting_psn);
            }
            CmMessage::Dreq {
                local_comm_id,
                remote_comm_id,
                remote_qpn,
            } => {
                set_u32(mad, field::LOCAL_COMM_ID, local_comm_id);
                set_u32(mad, field::REMOTE_COMM_ID, remote_comm_id);
                set_u24(mad, field::DREQ_REMOTE_QPN, remote_qpn);
            }
            CmMessage::Rtu {
                local_comm_id,
                remote_comm_id,
            }
            | CmMessage::Drep {
                local_comm_id,
                remote_comm_id,
            } => {
                set_u32(mad, field::LOCAL_COMM_ID, local_comm_id);
                set_u32(mad, field::REMOTE_COMM_ID, remote_comm_id);
            }
            CmMessage::Other { .. } => {}
        }
        Ok(())
    }

    /// Checks that the MAD would parse back as this repr.
    pub fn validate(&self) -> Result<(), Error> {
        if self.header.mgmt_class != MGMT_CLASS_CM {
            return Err(Error::malformed(
                Layer::Mad,
                field::MGMT_CLASS,
                "management class is not CM",
            ));
        }
        if self.header.attr_id != self.message.attr_id() {
            return Err(Error::malformed(
                Layer::Mad,
                field::ATTR_ID.start,
                "attribute ID does not match the CM message",
            ));
        }
        let wide = |v: u32, f: crate::field::Field, what| {
            if v > 0x00ff_ffff {
                Err(Error::malformed(Layer::Mad, f.start, what))
            } else {
                Ok(())
            }
        };
        match self.message {
            CmMessage::Req {
                local_qpn,
                starting_psn,
                ..
            } => {
                wide(
                    local_qpn,
                    field::REQ_LOCAL_QPN,
                    "local QPN wider than 24 bits",
                )?;
                wide(
                    starting_psn,
                    field::REQ_STARTING_PSN,
                    "starting PSN wider than 24 bits",
                )
            }
            CmMessage::Rep {
                local_qpn,
                starting_psn,
                ..
            } => {
                wide(
                    local_qpn,
                    field::REP_LOCAL_QPN,
                    "local QPN wider than 24 bits",
                )?;
                wide(
                    starting_psn,
                    field::REP_STARTING_PSN,
                    "starting PSN wider than 24 bits",
                )
            }
            CmMessage::Dreq { remote_qpn, .. } => wide(
                remote_qpn,
                field::DREQ_REMOTE_QPN,
                "remote QPN wider than 24 bits",
            ),
            CmMessage::Other {
                attr_id: attr::REQ | attr::REP | attr::RTU | attr::DREQ | attr::DREP,
            } => Err(Error::malformed(
                Layer::Mad,
                field::ATTR_ID.start,
                "REQ, REP, RTU, DREQ and DREP need their fields",
            )),
            _ => Ok(()),
        }
    }
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

    // The transaction ID of the handshake in test.pcap.
    const TID: u64 = 0x2_b908_66ac;
    // What `CmMadRepr::new(TID, ..).emit` must write in the first 72 bytes (the rest is zero), one 8-byte row per
    // line. Header: base version 1, class CM, class version 2, method Send.
    const EMIT_REQ: &str = concat!(
        "0107020300000000",
        "00000002b90866ac",
        "0010000000000000", // attr REQ
        "ac6608b900000000", // local comm ID
        "0000000000000000",
        "0000000000000000",
        "0000000000000000",
        "0000170000000000", // local QPN 0x17 at 56
        "0000000089bb0e00", // starting PSN 0x89bb0e at 68
    );
    const EMIT_REP: &str = concat!(
        "0107020300000000",
        "00000002b90866ac",
        "0013000000000000", // attr REP
        "c8577fdbac6608b9", // local, remote comm ID
        "0000000000001100", // local QPN 0x11 at 36
        "00000000c2329800", // starting PSN 0xc23298 at 44
        "0000000000000000",
        "0000000000000000",
        "0000000000000000",
    );

    fn emitted(repr: CmMadRepr) -> [u8; MAD_LEN] {
        let mut buf = [0xa5u8; MAD_LEN];
        repr.emit(&mut buf).unwrap();
        buf
    }

    fn assert_emits(repr: CmMadRepr, first_72: &str) {
        let buf = emitted(repr);
        assert_eq!(buf[..72], hex(first_72), "{repr:?}");
        assert!(buf[72..].iter().all(|&b| b == 0), "{repr:?}");
        assert_eq!(CmMadRepr::parse(&buf), Ok(Some(repr)));
    }

    #[test]
    fn emit_req_literal() {
        let req = CmMessage::Req {
            local_comm_id: 0xac66_08b9,
            local_qpn: 0x17,
            starting_psn: 0x89bb0e,
        };
        assert_emits(CmMadRepr::new(TID, req), EMIT_REQ);
    }

    #[test]
    fn emit_rep_literal() {
        let rep = CmMessage::Rep {
            local_comm_id: 0xc857_7fdb,
            remote_comm_id: 0xac66_08b9,
            local_qpn: 0x11,
            starting_psn: 0xc23298,
        };
        assert_emits(CmMadRepr::new(TID, rep), EMIT_REP);
    }

    // RDMA CM leaves everything after the fields we keep at zero in RTU, DREQ and DREP (for DREQ, the byte after
    // the remote QPN is reserved), so the captured bytes are exactly what emit must write.
    #[test]
    fn emit_rtu_literal() {
        let rtu = CmMessage::Rtu {
            local_comm_id: 0xac66_08b9,
            remote_comm_id: 0xc857_7fdb,
        };
        assert_emits(CmMadRepr::new(TID, rtu), RTU);
    }

    #[test]
    fn emit_dreq_literal() {
        let dreq = CmMessage::Dreq {
            local_comm_id: 0xac66_08b9,
            remote_comm_id: 0xc857_7fdb,
            remote_qpn: 0x11,
        };
        assert_emits(CmMadRepr::new(TID, dreq), DREQ);
    }

    #[test]
    fn emit_drep_literal() {
        let drep = CmMessage::Drep {
            local_comm_id: 0xc857_7fdb,
            remote_comm_id: 0xac66_08b9,
        };
        assert_emits(CmMadRepr::new(TID, drep), DREP);
    }

    #[test]
    fn header_emit_matches_the_capture() {
        let req = hex(REQ);
        let h = MadHeaderRepr::parse(&req).unwrap();
        let mut buf = [0xffu8; 24];
        h.emit(&mut buf).unwrap();
        assert_eq!(buf, req[..24]);
        assert_eq!(h.emit(&mut buf[..23]), Err(Error::len(Layer::Mad, 24, 23)));
    }

    #[test]
    fn emit_refuses_what_would_not_parse_back() {
        let rtu = CmMessage::Rtu {
            local_comm_id: 1,
            remote_comm_id: 2,
        };
        let mut buf = [0u8; MAD_LEN];
        assert_eq!(
            CmMadRepr::new(TID, rtu).emit(&mut buf[..255]),
            Err(Error::len(Layer::Mad, 256, 255))
        );
        assert_eq!(
            CmMadRepr::parse(&emitted(CmMadRepr::new(TID, rtu))[..255]),
            Err(Error::len(Layer::Mad, 256, 255))
        );
        let offset = |r: CmMadRepr| match r.emit(&mut [0u8; MAD_LEN]) {
            Err(Error::Malformed {
                layer: Layer::Mad,
                offset,
                ..
            }) => offset,
            other => panic!("{r:?} gave {other:?}"),
        };
        let mut r = CmMadRepr::new(TID, rtu);
        r.header.mgmt_class = 0x03;
        assert_eq!(offset(r), 1);
        r = CmMadRepr::new(TID, rtu);
        r.header.attr_id = attr::DREP;
        assert_eq!(offset(r), 16);
        let other = |attr_id| CmMadRepr::new(TID, CmMessage::Other { attr_id });
        assert_eq!(offset(other(attr::REQ)), 16);
        assert_eq!(
            CmMadRepr::parse(&emitted(other(attr::REJ))),
            Ok(Some(other(attr::REJ)))
        );
        let req = |local_qpn, starting_psn| CmMessage::Req {
            local_comm_id: 0,
            local_qpn,
            starting_psn,
        };
        assert_eq!(offset(CmMadRepr::new(TID, req(1 << 24, 0))), 56);
        assert_eq!(offset(CmMadRepr::new(TID, req(0, 1 << 24))), 68);
        let rep = |local_qpn, starting_psn| CmMessage::Rep {
            local_comm_id: 0,
            remote_comm_id: 0,
            local_qpn,
            starting_psn,
        };
        assert_eq!(offset(CmMadRepr::new(TID, rep(1 << 24, 0))), 36);
        assert_eq!(offset(CmMadRepr::new(TID, rep(0, 1 << 24))), 44);
        let dreq = CmMessage::Dreq {
            local_comm_id: 0,
            remote_comm_id: 0,
            remote_qpn: 1 << 24,
        };
        assert_eq!(offset(CmMadRepr::new(TID, dreq)), 32);
        let mut sa = emitted(CmMadRepr::new(TID, rtu));
        sa[1] = 0x03;
        assert_eq!(CmMadRepr::parse(&sa), Ok(None));
    }
}
