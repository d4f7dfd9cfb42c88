//! pcapng: sections with their own byte order, interfaces with their own link types and timestamp
//! resolutions, packet, statistics and custom blocks. Packet blocks are read here at their fixed offsets;
//! pcap-parser parses every other block we use, after the lengths are checked against what is buffered.

use pcap_parser::pcapng::{parse_block_be, parse_block_le};
use pcap_parser::{Block, EPB_MAGIC, IDB_MAGIC, ISB_MAGIC, PcapNGOption, SHB_MAGIC, SPB_MAGIC};

use super::error::{self, SourceErrorKind};
use super::kept::BlockPlace;
use super::{
    BOM_BE, BOM_LE, CUSTOM_COPY, CUSTOM_NOCOPY, CaptureReader, CustomBlock, Found, IfStats,
    Interface, MAX_CAPLEN, MAX_CUSTOM_BYTES, MAX_PARSED_BLOCK, check_caplen, truncated, u32_at,
};
use crate::LinkType;

/// The fixed fields of an Enhanced Packet Block.
#[derive(Clone, Copy)]
struct Epb {
    if_id: u32,
    ticks: u64,
    caplen: u32,
    len: u32,
}

impl CaptureReader {
    pub(super) fn step_pcapng(&mut self) -> Result<Option<Found>, (u64, SourceErrorKind)> {
        loop {
            if let Some((start, left, block_type)) = self.skip {
                let avail = self.buf.data().len() as u64;
                let n = avail.min(left);
                if self.keeping() {
                    self.gather(n as usize, n == left);
                }
                self.consume(n as usize);
                if n == left {
                    self.skip = None;
                    continue;
                }
                self.skip = Some((start, left - n, block_type));
                if self.buf.exhausted() {
                    let needed = self.pos - start + left - n;
                    let kind = SourceErrorKind::Truncated {
                        what: error::block_name(block_type),
                        needed,
                        have: self.pos - start,
                    };
                    return Err((start, kind));
                }
                self.refill(0)?;
                continue;
            }
            let data = self.buf.data();
            let avail = data.len();
            if avail < 12 {
                if self.buf.exhausted() {
                    if avail == 0 {
                        return Ok(None);
                    }
                    return Err((self.pos, truncated("pcapng block header", 12, avail)));
                }
                self.refill(12)?;
                continue;
            }
            let raw_type = u32_at(data, 0, false);
            let (block_type, big_endian) = if raw_type == SHB_MAGIC {
                match u32_at(data, 8, false) {
                    BOM_LE => (SHB_MAGIC, false),
                    BOM_BE => (SHB_MAGIC, true),
                    _ => {
                        let kind = SourceErrorKind::Malformed {
                            what: "section header byte-order magic",
                        };
                        return Err((self.pos, kind));
                    }
                }
            } else {
                (u32_at(data, 0, self.big_endian), self.big_endian)
            };
            let len = u32_at(data, 4, big_endian);
            let min_len = match block_type {
                SHB_MAGIC => 28,
                IDB_MAGIC => 20,
                SPB_MAGIC => 16,
                ISB_MAGIC => 24,
                EPB_MAGIC => 32,
                _ => 12,
            };
            // Custom blocks up to the parsed size are read whole (the tracer's knobs and counters travel in
            // them); larger ones, and every other block we do not use, are skipped by length.
            let custom = matches!(block_type, CUSTOM_COPY | CUSTOM_NOCOPY)
                && (16..=MAX_PARSED_BLOCK).contains(&len)
                && len.is_multiple_of(4);
            let parsed = min_len > 12 || custom;
            if len < min_len || !len.is_multiple_of(4) || (parsed && len > MAX_PARSED_BLOCK) {
                return Err((
                    self.pos,
                    SourceErrorKind::BadBlockLength { block_type, len },
                ));
            }
            if !parsed {
                // Name resolution, custom, decryption secrets, unknown...: nothing we use, and skipping them by
                // length means a malformed one cannot stop the packets after it.
                if matches!(block_type, CUSTOM_COPY | CUSTOM_NOCOPY) {
                    self.listed += 1;
                }
                self.skip = Some((self.pos, u64::from(len), block_type));
                if self.keeping() {
                    self.start_gathering(block_type, len);
                }
                continue;
            }
            if block_type == EPB_MAGIC && avail >= 28 {
                let caplen = u32_at(data, 20, big_endian);
                if caplen > MAX_CAPLEN {
                    return Err((
                        self.pos,
                        SourceErrorKind::CaplenTooLarge {
                            caplen,
                            limit: MAX_CAPLEN,
                        },
                    ));
                }
                if 32 + u64::from(caplen.next_multiple_of(4)) > u64::from(len) {
                    return Err((
                        self.pos,
                        SourceErrorKind::PacketBeyondBlock {
                            caplen,
                            block_len: len,
                        },
                    ));
                }
            }
            let len_usize = len as usize;
            if avail < len_usize {
                if self.buf.exhausted() {
                    let kind = truncated(error::block_name(block_type), len_usize, avail);
                    return Err((self.pos, kind));
                }
                self.refill(len_usize)?;
                continue;
            }
            let trailing = u32_at(data, len_usize - 4, big_endian);
            if trailing != len {
                let kind = SourceErrorKind::BlockLengthMismatch {
                    block_type,
                    leading: len,
                    trailing,
                };
                return Err((self.pos, kind));
            }
            if block_type == EPB_MAGIC {
                // The hot path: every field sits at a fixed offset and the lengths are checked, so read them
                // here instead of through pcap-parser, whose EPB parser also gathers options into a Vec.
                let field = |at| u32_at(data, at, big_endian);
                let epb = Epb {
                    if_id: field(8),
                    ticks: (u64::from(field(12)) << 32) | u64::from(field(16)),
                    caplen: field(20),
                    len: field(24),
                };
                let mut found = self.enhanced_packet(epb, len)?;
                if self.keeping() {
                    let options = 28 + (epb.caplen as usize).next_multiple_of(4);
                    found.block = Some(BlockPlace {
                        ticks: Some(epb.ticks),
                        options: (options.min(len_usize - 4), len_usize - 4),
                        big_endian,
                    });
                }
                return Ok(Some(found));
            }
            if custom {
                self.listed += 1;
                let pen = u32_at(data, 8, big_endian);
                if let Some(body) = data.get(12..len_usize - 4)
                    && self.custom_bytes + body.len() <= MAX_CUSTOM_BYTES
                {
                    self.custom_bytes += body.len();
                    self.custom.push(CustomBlock {
                        pen,
                        data: body.to_vec(),
                    });
                }
                if self.keeping() {
                    self.keep_buffered(block_type, big_endian, len_usize, None);
                }
                self.consume(len_usize);
                continue;
            }
            let interfaces = self.interfaces.len();
            if let Some(mut found) = self.parse_block(block_type, big_endian, len)? {
                if self.keeping() {
                    // A Simple Packet Block: no timestamp, no options.
                    found.block = Some(BlockPlace {
                        ticks: None,
                        options: (0, 0),
                        big_endian,
                    });
                }
                return Ok(Some(found));
            }
            if self.keeping() {
                self.keep_parsed(block_type, big_endian, len_usize, interfaces);
            }
            self.consume(len_usize);
        }
    }

    /// Keeps the block pcap-parser just parsed (a section header, an interface description, statistics),
    /// for a copy; `interfaces` is how many interfaces there were before it.
    fn keep_parsed(&mut self, block_type: u32, big_endian: bool, len: usize, interfaces: usize) {
        match block_type {
            IDB_MAGIC if self.interfaces.len() > interfaces => self.keep_interface(big_endian, len),
            ISB_MAGIC => {
                let if_id = u32_at(self.buf.data(), 8, big_endian) as usize;
                let iface = u32::try_from(self.section_base.saturating_add(if_id)).ok();
                self.keep_buffered(block_type, big_endian, len, iface);
            }
            _ => self.keep_buffered(block_type, big_endian, len, None),
        }
    }

    /// The Enhanced Packet Block at the start of `data` when it is buffered whole and passes every check
    /// [`CaptureReader::step_pcapng`] makes of one; `None` sends the caller there, to read it or to name
    /// what is wrong.
    #[inline]
    pub(super) fn buffered_epb(&self, data: &[u8]) -> Option<Found> {
        let be = self.big_endian;
        if data.len() < 32 || u32_at(data, 0, be) != EPB_MAGIC {
            return None;
        }
        let len = u32_at(data, 4, be);
        let caplen = u32_at(data, 20, be);
        if len < 32
            || !len.is_multiple_of(4)
            || len > MAX_PARSED_BLOCK
            || caplen > MAX_CAPLEN
            || 32 + u64::from(caplen.next_multiple_of(4)) > u64::from(len)
        {
            return None;
        }
        let len_usize = len as usize;
        if data.len() < len_usize || u32_at(data, len_usize - 4, be) != len {
            return None;
        }
        let epb = Epb {
            if_id: u32_at(data, 8, be),
            ticks: (u64::from(u32_at(data, 12, be)) << 32) | u64::from(u32_at(data, 16, be)),
            caplen,
            len: u32_at(data, 24, be),
        };
        self.enhanced_packet(epb, len).ok()
    }

    fn enhanced_packet(&self, epb: Epb, block_len: u32) -> Result<Found, (u64, SourceErrorKind)> {
        let index = self.section_base.saturating_add(epb.if_id as usize);
        let (Some(iface), Some(clock)) = (self.interfaces.get(index), self.clocks.get(index))
        else {
            return Err((
                self.pos,
                SourceErrorKind::UnknownInterface { id: epb.if_id },
            ));
        };
        check_caplen(epb.caplen, epb.len, iface.snaplen).map_err(|k| (self.pos, k))?;
        Ok(Found {
            iface: index as u32,
            link: iface.link,
            speed_bps: iface.speed_bps,
            ts_ns: clock.to_ns(epb.ticks),
            caplen: epb.caplen,
            len: epb.len,
            data_start: 28,
            total: block_len as usize,
            block: None,
        })
    }

    /// Hands one complete, length-checked block to pcap-parser; a packet comes back as `Found`.
    fn parse_block(
        &mut self,
        block_type: u32,
        big_endian: bool,
        len: u32,
    ) -> Result<Option<Found>, (u64, SourceErrorKind)> {
        let pos = self.pos;
        let malformed = (
            pos,
            SourceErrorKind::Malformed {
                what: error::block_name(block_type),
            },
        );
        // The block is complete and its lengths checked, so any failure here is inside its fields.
        let block = self.buf.data().get(..len as usize).unwrap_or_default();
        let parsed = if big_endian {
            parse_block_be(block)
        } else {
            parse_block_le(block)
        };
        let Ok((_, block)) = parsed else {
            return Err(malformed);
        };
        match block {
            Block::SectionHeader(shb) => {
                if shb.major_version != 1 {
                    let kind = SourceErrorKind::UnsupportedVersion {
                        major: shb.major_version,
                        minor: shb.minor_version,
                    };
                    return Err((pos, kind));
                }
                self.big_endian = big_endian;
                self.section_base = self.interfaces.len();
                Ok(None)
            }
            Block::InterfaceDescription(idb) => {
                let mut name = None;
                let mut offset_s = 0;
                let mut speed_bps = None;
                for opt in &idb.options {
                    match opt.code.0 {
                        2 => {
                            name = Some(
                                String::from_utf8_lossy(opt.value())
                                    .trim_end_matches('\0')
                                    .to_owned(),
                            )
                        }
                        8 => speed_bps = option_u64(opt, big_endian).filter(|&v| v > 0),
                        14 => offset_s = option_u64(opt, big_endian).map_or(0, |v| v as i64),
                        _ => {}
                    }
                }
                let (scale, ts_resol_desc) = Scale::from_tsresol(idb.if_tsresol);
                self.interfaces.push(Interface {
                    link: LinkType((idb.linktype.0 & 0xffff) as u16),
                    snaplen: idb.snaplen,
                    name,
                    ts_resol_desc,
                    speed_bps,
                });
                self.stats.push(IfStats::default());
                self.clocks.push(Clock { scale, offset_s });
                Ok(None)
            }
            Block::InterfaceStatistics(isb) => {
                // Statistics for an interface the section never declared are metadata we cannot place: ignore.
                let index = self.section_base.saturating_add(isb.if_id as usize);
                if let Some(stats) = self.stats.get_mut(index) {
                    for opt in &isb.options {
                        match opt.code.0 {
                            4 => stats.received = option_u64(opt, big_endian),
                            5 => stats.dropped_iface = option_u64(opt, big_endian),
                            7 => stats.dropped_os = option_u64(opt, big_endian),
                            _ => {}
                        }
                    }
                }
                Ok(None)
            }
            Block::SimplePacket(spb) => {
                let index = self.section_base;
                let Some(iface) = self.interfaces.get(index) else {
                    return Err((pos, SourceErrorKind::UnknownInterface { id: 0 }));
                };
                // An SPB stores no captured length: it is the original length cut to the snapshot length.
                let mut caplen = spb.origlen.min(len - 16);
                if iface.snaplen > 0 {
                    caplen = caplen.min(iface.snaplen);
                }
                if caplen > MAX_CAPLEN {
                    return Err((
                        pos,
                        SourceErrorKind::CaplenTooLarge {
                            caplen,
                            limit: MAX_CAPLEN,
                        },
                    ));
                }
                Ok(Some(Found {
                    iface: index as u32,
                    link: iface.link,
                    speed_bps: iface.speed_bps,
                    ts_ns: 0,
                    caplen,
                    len: spb.origlen,
                    data_start: 16,
                    total: len as usize,
                    block: None,
                }))
            }
            _ => Ok(None),
        }
    }
}

/// A 64-bit option value in the section's byte order (pcap-parser's own getters assume little-endian).
fn option_u64(opt: &PcapNGOption<'_>, big_endian: bool) -> Option<u64> {
    let bytes: [u8; 8] = opt.value().get(..8)?.try_into().ok()?;
    Some(if big_endian {
        u64::from_be_bytes(bytes)
    } else {
        u64::from_le_bytes(bytes)
    })
}

/// How one interface's timestamp units become nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scale {
    /// Units coarser than (or equal to) a nanosecond: multiply.
    Mul(u64),
    /// Decimal units finer than a nanosecond: divide.
    Div(u64),
    /// Binary units of 2^-n s.
    Binary(u32),
    /// Units so fine that no 64-bit count reaches a nanosecond.
    Zero,
}

impl Scale {
    /// Decodes `if_tsresol` (high bit set: 2^-n, else 10^-n; absent: 6) into a scale and a label.
    pub(super) fn from_tsresol(tsresol: u8) -> (Scale, String) {
        let n = u32::from(tsresol & 0x7f);
        if tsresol & 0x80 != 0 {
            return (Scale::Binary(n), format!("2^-{n} s"));
        }
        let desc = match n {
            0 => "s".to_owned(),
            3 => "ms".to_owned(),
            6 => "µs".to_owned(),
            9 => "ns".to_owned(),
            12 => "ps".to_owned(),
            _ => format!("10^-{n} s"),
        };
        let scale = if n <= 9 {
            Scale::Mul(10u64.pow(9 - n))
        } else {
            10u64.checked_pow(n - 9).map_or(Scale::Zero, Scale::Div)
        };
        (scale, desc)
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    pub(super) scale: Scale,
    /// `if_tsoffset`: seconds to add to every timestamp.
    pub(super) offset_s: i64,
}

impl Clock {
    pub(super) fn to_ns(self, ticks: u64) -> u64 {
        let ns = match self.scale {
            Scale::Mul(m) => ticks.saturating_mul(m),
            Scale::Div(d) => ticks / d,
            Scale::Binary(n) => {
                let wide = (u128::from(ticks) * 1_000_000_000) >> n.min(127);
                u64::try_from(wide).unwrap_or(u64::MAX)
            }
            Scale::Zero => 0,
        };
        if self.offset_s == 0 {
            return ns;
        }
        let shifted = i128::from(ns) + i128::from(self.offset_s) * 1_000_000_000;
        u64::try_from(shifted.max(0)).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(tsresol: u8, offset_s: i64) -> Clock {
        Clock {
            scale: Scale::from_tsresol(tsresol).0,
            offset_s,
        }
    }

    #[test]
    fn resolutions_convert_to_nanoseconds() {
        assert_eq!(clock(6, 0).to_ns(1_500_000), 1_500_000_000);
        assert_eq!(clock(9, 0).to_ns(123), 123);
        assert_eq!(clock(12, 0).to_ns(123_456), 123);
        assert_eq!(clock(0, 0).to_ns(2), 2_000_000_000);
        // 2^-10 s: 1024 ticks are one second.
        assert_eq!(clock(0x80 | 10, 0).to_ns(1024 * 3), 3_000_000_000);
        assert_eq!(clock(0x80 | 20, 0).to_ns(1 << 19), 500_000_000);
    }

    #[test]
    fn absurd_resolutions_and_offsets_saturate() {
        assert_eq!(clock(0, 0).to_ns(u64::MAX), u64::MAX);
        assert_eq!(clock(127, 0).to_ns(u64::MAX), 0);
        assert_eq!(clock(0xff, 0).to_ns(u64::MAX), 0);
        assert_eq!(clock(0x80, 0).to_ns(u64::MAX), u64::MAX);
        assert_eq!(clock(9, -10).to_ns(5), 0);
        assert_eq!(clock(9, i64::MAX).to_ns(5), u64::MAX);
        assert_eq!(clock(9, 2).to_ns(5), 2_000_000_005);
    }

    #[test]
    fn resolution_labels() {
        assert_eq!(Scale::from_tsresol(6).1, "µs");
        assert_eq!(Scale::from_tsresol(9).1, "ns");
        assert_eq!(Scale::from_tsresol(0x80 | 20).1, "2^-20 s");
        assert_eq!(Scale::from_tsresol(4).1, "10^-4 s");
    }
}
