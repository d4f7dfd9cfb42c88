//! MAC Control frames (ethertype 0x8808): 802.3x PAUSE and 802.1Qbb priority flow control.
//!
//! These are what a lossless RoCE fabric uses to stop a sender instead of dropping, so a pause that lasts too long
//! is often the first sign of congestion spreading. The parser reads the MAC Control payload, i.e. the bytes after
//! the ethertype.

use crate::error::{Error, Layer, check_len};
use crate::field::{get_u16, set_u16};

/// Ethertype of MAC Control frames.
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
/// MAC Control opcode of 802.3x PAUSE.
pub const OPCODE_PAUSE: u16 = 0x0001;
/// MAC Control opcode of 802.1Qbb PFC (class-based flow control).
pub const OPCODE_PFC: u16 = 0x0101;
/// The reserved multicast address PAUSE and PFC frames are sent to; bridges do not forward it.
pub const PAUSE_DST_MAC: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x01];
/// Bit times in one pause quantum.
pub const BITS_PER_QUANTUM: u64 = 512;

/// Byte ranges of a MAC Control payload.
pub mod field {
    use crate::field::Field;
    /// MAC Control opcode.
    pub const OPCODE: Field = 0..2;
    /// PAUSE: pause time in quanta.
    pub const PAUSE_TIME: Field = 2..4;
    /// PFC: class-enable vector (low byte: bit n = priority n; high byte reserved).
    pub const PFC_ENABLE: Field = 2..4;
    /// PFC: pause time of priority `n`, `n` in 0..8 (larger `n` are clamped to 7).
    pub const fn pfc_time(n: usize) -> Field {
        let n = if n > 7 { 7 } else { n };
        4 + 2 * n..6 + 2 * n
    }
    /// End of a PAUSE body.
    pub const PAUSE_END: usize = 4;
    /// End of a PFC body.
    pub const PFC_END: usize = 20;
}

view!(
    /// A view of a MAC Control payload, starting at the opcode. `new_checked` only guarantees the opcode, because
    /// the body's length depends on it; the body accessors return `None` when their bytes are missing.
    MacControl, Layer::MacControl, 2
);

impl<T: AsRef<[u8]>> MacControl<T> {
    /// MAC Control opcode.
    pub fn opcode(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::OPCODE)
    }
    /// PAUSE time, when the buffer holds it.
    pub fn pause_time(&self) -> Option<u16> {
        let b = self.buffer.as_ref();
        (b.len() >= field::PAUSE_END).then(|| get_u16(b, field::PAUSE_TIME))
    }
    /// PFC class-enable vector, when the buffer holds it.
    pub fn pfc_enable(&self) -> Option<u16> {
        let b = self.buffer.as_ref();
        (b.len() >= field::PAUSE_END).then(|| get_u16(b, field::PFC_ENABLE))
    }
    /// PFC pause time of priority `prio` (0–7), when the buffer holds it.
    pub fn pfc_time(&self, prio: usize) -> Option<u16> {
        if prio > 7 {
            return None;
        }
        let b = self.buffer.as_ref();
        let f = field::pfc_time(prio);
        (b.len() >= f.end).then(|| get_u16(b, f))
    }
}

/// The body of a PFC frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfcRepr {
    /// The class-enable vector as on the wire (bit n of the low byte = priority n; the high byte is reserved).
    pub enable: u16,
    /// Pause time per priority in quanta, priority 0 first. A time only counts for an enabled priority.
    pub quanta: [u16; 8],
}

impl PfcRepr {
    /// Whether the frame carries a pause time for `prio` (0–7). Priorities above 7 are never enabled.
    pub fn enabled(&self, prio: u8) -> bool {
        prio < 8 && self.enable & (1 << prio) != 0
    }
}

/// A MAC Control payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MacControlRepr {
    /// 802.3x PAUSE: the whole link stops for `quanta` × 512 bit times (0 resumes at once).
    Pause {
        /// Pause time in quanta.
        quanta: u16,
    },
    /// 802.1Qbb priority flow control.
    Pfc(PfcRepr),
    /// Another MAC Control opcode (e.g. MPCP or EPON GATE); only the opcode is kept.
    Other {
        /// The opcode.
        opcode: u16,
    },
}

impl MacControlRepr {
    /// Reads a MAC Control payload (the bytes after ethertype 0x8808). Errors for a short PAUSE or PFC body name
    /// the `Pause` or `Pfc` layer starting at byte 2.
    pub fn parse(bytes: &[u8]) -> Result<Self, Error> {
        let v = MacControl::new_checked(bytes)?;
        let body = bytes.get(2..).unwrap_or(&[]);
        match v.opcode() {
            OPCODE_PAUSE => {
                check_len(Layer::Pause, body, field::PAUSE_END - 2).map_err(|e| e.shifted(2))?;
                Ok(MacControlRepr::Pause {
                    quanta: get_u16(bytes, field::PAUSE_TIME),
                })
            }
            OPCODE_PFC => {
                check_len(Layer::Pfc, body, field::PFC_END - 2).map_err(|e| e.shifted(2))?;
                let mut quanta = [0u16; 8];
                for (n, q) in quanta.iter_mut().enumerate() {
                    *q = get_u16(bytes, field::pfc_time(n));
                }
                Ok(MacControlRepr::Pfc(PfcRepr {
                    enable: get_u16(bytes, field::PFC_ENABLE),
                    quanta,
                }))
            }
            opcode => Ok(MacControlRepr::Other { opcode }),
        }
    }

    /// Bytes [`MacControlRepr::emit`] writes: 4 for PAUSE, 20 for PFC, 2 for another opcode.
    pub const fn len(&self) -> usize {
        match self {
            MacControlRepr::Pause { .. } => field::PAUSE_END,
            MacControlRepr::Pfc(_) => field::PFC_END,
            MacControlRepr::Other { .. } => 2,
        }
    }

    /// Never empty; here for symmetry with `len`.
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// The opcode this payload starts with.
    pub const fn opcode(&self) -> u16 {
        match self {
            MacControlRepr::Pause { .. } => OPCODE_PAUSE,
            MacControlRepr::Pfc(_) => OPCODE_PFC,
            MacControlRepr::Other { opcode } => *opcode,
        }
    }

    /// Writes the payload into the start of `buf` (no padding: see [`crate::build::emit_mac_control`]) and returns
    /// the bytes written. `Other` writes its opcode only. Fails for `Other` with the PAUSE or PFC opcode, which
    /// would not parse back as written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        if let MacControlRepr::Other {
            opcode: OPCODE_PAUSE | OPCODE_PFC,
        } = self
        {
            return Err(Error::malformed(
                Layer::MacControl,
                0,
                "PAUSE and PFC opcodes need their bodies",
            ));
        }
        let n = self.len();
        let layer = match self {
            MacControlRepr::Pause { .. } => Layer::Pause,
            MacControlRepr::Pfc(_) => Layer::Pfc,
            MacControlRepr::Other { .. } => Layer::MacControl,
        };
        check_len(Layer::MacControl, buf, 2)?;
        check_len(layer, buf.get(2..).unwrap_or(&[]), n - 2).map_err(|e| e.shifted(2))?;
        set_u16(buf, field::OPCODE, self.opcode());
        match self {
            MacControlRepr::Pause { quanta } => set_u16(buf, field::PAUSE_TIME, *quanta),
            MacControlRepr::Pfc(p) => {
                set_u16(buf, field::PFC_ENABLE, p.enable);
                for (i, q) in p.quanta.iter().enumerate() {
                    set_u16(buf, field::pfc_time(i), *q);
                }
            }
            MacControlRepr::Other { .. } => {}
        }
        Ok(n)
    }
}

/// How long `quanta` pause quanta last on a link of `link_bps` bit/s, in picoseconds: quanta × 512 × 10¹² /
/// link_bps, computed exactly in 128-bit integers and rounded down (exact for every standard Ethernet speed:
/// 5 120 ps per quantum at 100 Gb/s, 20 480 ps at 25 Gb/s). A zero link speed gives 0, since no duration can be
/// meant; a result beyond `u64::MAX` (only below 2 bit/s) saturates.
pub fn quanta_to_ps(quanta: u16, link_bps: u64) -> u64 {
    if link_bps == 0 {
        return 0;
    }
    let ps = u128::from(quanta) * u128::from(BITS_PER_QUANTUM) * 1_000_000_000_000
        / u128::from(link_bps);
    u64::try_from(ps).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod test {
    use super::*;

    // The second frame of Ethernet_Pause_Frame.pcap, after the ethertype: PAUSE, time 65535, then padding.
    static PAUSE: [u8; 6] = [0x00, 0x01, 0xff, 0xff, 0x00, 0x00];

    #[test]
    fn pause_deconstruct_construct() {
        assert_eq!(
            MacControlRepr::parse(&PAUSE),
            Ok(MacControlRepr::Pause { quanta: 0xffff })
        );
        let v = MacControl::new_checked(&PAUSE[..]).unwrap();
        assert_eq!(v.opcode(), OPCODE_PAUSE);
        assert_eq!(v.pause_time(), Some(0xffff));
        let mut buf = [0xaau8; 6];
        assert_eq!(
            MacControlRepr::Pause { quanta: 0xffff }.emit(&mut buf),
            Ok(4)
        );
        assert_eq!(&buf[..4], &PAUSE[..4]);
        assert_eq!(
            MacControlRepr::parse(&PAUSE[..3]),
            Err(Error::len(Layer::Pause, 2, 1).shifted(2))
        );
    }

    // PFC pausing priority 3 for 0xffff quanta and releasing priority 6 (XON).
    static PFC: [u8; 20] = [
        0x01, 0x01, 0x00, 0x48, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn pfc_deconstruct_construct() {
        let r = MacControlRepr::parse(&PFC).unwrap();
        let MacControlRepr::Pfc(p) = r else {
            panic!("not PFC: {r:?}")
        };
        assert_eq!(p.enable, 0x48);
        assert!(p.enabled(3) && p.enabled(6));
        assert!(!p.enabled(0) && !p.enabled(8) && !p.enabled(255));
        assert_eq!(p.quanta, [0, 0, 0, 0xffff, 0, 0, 0, 0]);
        let v = MacControl::new_checked(&PFC[..]).unwrap();
        assert_eq!(v.pfc_time(3), Some(0xffff));
        assert_eq!(v.pfc_time(8), None);
        let mut buf = [0xaau8; 20];
        assert_eq!(r.emit(&mut buf), Ok(20));
        assert_eq!(buf, PFC);
        assert_eq!(
            MacControlRepr::parse(&PFC[..19]),
            Err(Error::len(Layer::Pfc, 18, 17).shifted(2))
        );
        assert_eq!(
            r.emit(&mut buf[..10]),
            Err(Error::len(Layer::Pfc, 18, 8).shifted(2))
        );
    }

    #[test]
    fn other_opcodes() {
        assert_eq!(
            MacControlRepr::parse(&[0x00, 0x02]),
            Ok(MacControlRepr::Other { opcode: 2 })
        );
        assert_eq!(
            MacControlRepr::parse(&[0x01]),
            Err(Error::len(Layer::MacControl, 2, 1))
        );
        let mut buf = [0u8; 4];
        assert!(
            MacControlRepr::Other { opcode: OPCODE_PFC }
                .emit(&mut buf)
                .is_err()
        );
    }

    #[test]
    fn quanta_durations() {
        assert_eq!(quanta_to_ps(1, 100_000_000_000), 5_120);
        assert_eq!(quanta_to_ps(1, 25_000_000_000), 20_480);
        assert_eq!(quanta_to_ps(0xffff, 100_000_000_000), 0xffff * 5_120);
        assert_eq!(quanta_to_ps(3, 400_000_000_000), 3_840);
        // 512 bits at 3 bit/s = 170.666… s, rounded down.
        assert_eq!(quanta_to_ps(1, 3), 170_666_666_666_666);
        assert_eq!(quanta_to_ps(0xffff, 1), u64::MAX);
        assert_eq!(quanta_to_ps(7, 0), 0);
    }
}
