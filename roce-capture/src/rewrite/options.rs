//! pcapng options carried from a block read into the block written.
//!
//! The output is one little-endian section. An option of a little-endian section is copied as its bytes;
//! one of a big-endian section has its numbers turned around, which needs to know which of its bytes are
//! numbers: the table below says it for every option the pcapng specification defines on the blocks we
//! copy. An option it does not know (a private code, a newer one) cannot be turned around and is dropped,
//! and counted: copying its bytes could give a reader a wrong number.

use std::io;

use crate::write::{OPT_END, put_option};

/// Which block an option list belongs to: each block type numbers its options on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    Section,
    Interface,
    Packet,
    Statistics,
}

/// What an option's value is made of, for turning its numbers around.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Text, addresses, hashes, single bytes: no byte order.
    Bytes,
    /// One 32-bit number.
    U32,
    /// One 64-bit number.
    U64,
    /// A timestamp: two 32-bit numbers, the high one first.
    Timestamp,
    /// A custom option: a Private Enterprise Number, then data of its owner's making.
    Custom,
    /// `epb_verdict`: a type byte, then the hardware's bytes (type 0) or a 64-bit number (types 1 and 2).
    Verdict,
}

fn shape(owner: Owner, code: u16) -> Option<Shape> {
    use Owner::*;
    use Shape::*;
    Some(match (owner, code) {
        (_, 1) => Bytes,
        (_, 2988 | 2989 | 19372 | 19373) => Custom,
        (Section, 2..=4) => Bytes,
        (Interface, 2..=7 | 9 | 11..=13 | 15 | 18) => Bytes,
        (Interface, 8 | 14 | 16 | 17) => U64,
        (Interface, 10) => U32,
        (Packet, 2 | 6) => U32,
        (Packet, 3) => Bytes,
        (Packet, 4 | 5) => U64,
        (Packet, 7) => Verdict,
        (Statistics, 2 | 3) => Timestamp,
        (Statistics, 4..=8) => U64,
        _ => return None,
    })
}

/// Turns the numbers of one option's value into little-endian, or says it cannot.
fn to_little_endian(shape: Shape, value: &[u8]) -> Option<Vec<u8>> {
    let mut v = value.to_vec();
    match shape {
        Shape::Bytes => {}
        Shape::U32 if v.len() == 4 => v.reverse(),
        Shape::U64 if v.len() == 8 => v.reverse(),
        Shape::Timestamp if v.len() == 8 => {
            v.get_mut(..4)?.reverse();
            v.get_mut(4..)?.reverse();
        }
        Shape::Custom if v.len() >= 4 => v.get_mut(..4)?.reverse(),
        Shape::Verdict => match v.first() {
            Some(0) => {}
            Some(1 | 2) if v.len() == 9 => v.get_mut(1..)?.reverse(),
            _ => return None,
        },
        _ => return None,
    }
    Some(v)
}

/// What became of an option list.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Carried {
    /// Options written.
    pub(crate) kept: u32,
    /// Options of a big-endian section whose numbers could not be turned around, and options after a
    /// malformed one (a length running past the block): left out.
    pub(crate) dropped: u32,
}

/// Appends the options of `raw` (stored in the byte order `big_endian` says) to `out`, little-endian, without
/// their end-of-options marker: the caller adds its own options after them, and then the marker.
pub(crate) fn carry(
    out: &mut Vec<u8>,
    raw: &[u8],
    big_endian: bool,
    owner: Owner,
) -> io::Result<Carried> {
    let mut carried = Carried::default();
    let mut rest = raw;
    while rest.len() >= 4 {
        let field = |i: usize| {
            let b = [rest[i], rest[i + 1]];
            if big_endian {
                u16::from_be_bytes(b)
            } else {
                u16::from_le_bytes(b)
            }
        };
        let (code, len) = (field(0), usize::from(field(2)));
        if code == OPT_END {
            return Ok(carried);
        }
        let Some(value) = rest.get(4..4 + len) else {
            // The option runs past its block: what follows cannot be told apart from it.
            carried.dropped += 1;
            return Ok(carried);
        };
        let value = if big_endian {
            shape(owner, code).and_then(|s| to_little_endian(s, value))
        } else {
            Some(value.to_vec())
        };
        match value {
            Some(v) => {
                put_option(out, code, &v)?;
                carried.kept += 1;
            }
            None => carried.dropped += 1,
        }
        rest = rest
            .get((4 + len).next_multiple_of(4)..)
            .unwrap_or_default();
    }
    Ok(carried)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn option(big_endian: bool, code: u16, value: &[u8]) -> Vec<u8> {
        let mut o = Vec::new();
        let word = |v: u16| {
            if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        o.extend_from_slice(&word(code));
        o.extend_from_slice(&word(value.len() as u16));
        o.extend_from_slice(value);
        o.resize(o.len().next_multiple_of(4), 0);
        o
    }

    #[test]
    fn little_endian_options_are_copied_as_stored_without_their_end() {
        let mut raw = option(false, 2, b"eth0");
        raw.extend(option(false, 8, &25_000_000_000u64.to_le_bytes()));
        raw.extend(option(false, 0x7fff, &[1, 2, 3]));
        raw.extend(option(false, OPT_END, &[]));
        let mut out = Vec::new();
        let c = carry(&mut out, &raw, false, Owner::Interface).unwrap();
        assert_eq!(
            c,
            Carried {
                kept: 3,
                dropped: 0
            }
        );
        assert_eq!(out, raw[..raw.len() - 4]);
    }

    #[test]
    fn big_endian_numbers_are_turned_around_and_unknown_options_dropped() {
        let mut raw = option(true, 8, &25_000_000_000u64.to_be_bytes());
        raw.extend(option(true, 2, b"eth0"));
        raw.extend(option(true, 0x7fff, &[1, 2, 3]));
        raw.extend(option(true, 10, &7u32.to_be_bytes()));
        let mut out = Vec::new();
        let c = carry(&mut out, &raw, true, Owner::Interface).unwrap();
        assert_eq!(
            c,
            Carried {
                kept: 3,
                dropped: 1
            }
        );
        let mut want = option(false, 8, &25_000_000_000u64.to_le_bytes());
        want.extend(option(false, 2, b"eth0"));
        want.extend(option(false, 10, &7u32.to_le_bytes()));
        assert_eq!(out, want);
    }

    #[test]
    fn statistics_timestamps_keep_their_high_word_first() {
        let raw = option(true, 2, &[0, 0, 0, 1, 0, 0, 0, 2]);
        let mut out = Vec::new();
        carry(&mut out, &raw, true, Owner::Statistics).unwrap();
        assert_eq!(out, option(false, 2, &[1, 0, 0, 0, 2, 0, 0, 0]));
    }

    #[test]
    fn an_option_running_past_its_block_ends_the_list() {
        let mut raw = option(false, 1, b"ok");
        raw.extend_from_slice(&[1, 0, 200, 0, b'x']);
        let mut out = Vec::new();
        let c = carry(&mut out, &raw, false, Owner::Packet).unwrap();
        assert_eq!(
            c,
            Carried {
                kept: 1,
                dropped: 1
            }
        );
        assert_eq!(out, option(false, 1, b"ok"));
    }

    #[test]
    fn a_wrongly_sized_number_of_a_big_endian_section_is_dropped() {
        let raw = option(true, 4, &[0, 1]);
        let mut out = Vec::new();
        let c = carry(&mut out, &raw, true, Owner::Packet).unwrap();
        assert_eq!(
            c,
            Carried {
                kept: 0,
                dropped: 1
            }
        );
        assert!(out.is_empty());
    }
}
