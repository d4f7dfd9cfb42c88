//! A capture written back as one pcapng file, block for block, with comments added to its packets
//! (`roce-analyzer annotate`).
//!
//! The capture is read a second time ([`Capture::reopen_to_copy`]), and each record is written where the
//! merge puts it, after the blocks its file holds before it. What is kept, and how:
//!
//! - **Interfaces**: every tap becomes the output's interface of the same index, described by the block its
//!   file stored (options and all, `if_speed` and `if_tsresol` among them), so that a reader of the output
//!   numbers its taps as the analysis did. A rotated set's later files continue their first file's taps,
//!   as the merge reads them, so their interfaces are not repeated. A classic pcap's single interface is
//!   described anew: its link type and snapshot length, nanosecond timestamps.
//! - **Packets**: each as an Enhanced Packet Block with its bytes, lengths and timestamp as stored (a
//!   Simple Packet Block, which has none, gets the time the reader gives it, 0), its own options, then the
//!   comments.
//! - **Other blocks** (statistics, custom, name resolution, decryption secrets, any other type) are copied
//!   where they were among their file's packets; a statistics block names its interface by the output's
//!   numbering.
//! - **Sections**: the output is one section. With one input file, its first section's options are kept;
//!   beyond that, a section's options have nowhere to go and are dropped, and counted.
//!
//! What cannot be kept is counted by reason in [`CopySummary::not_kept`], never silently lost: a custom
//! block whose owner marked it not to be copied (unless it is rocetrace's own), an obsolete Packet Block
//! (whose interface numbering the output cannot keep), a block of a big-endian section of a type this
//! module cannot turn around, an option of a big-endian section it does not know.

mod options;

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::merge::{Capture, KeptBlock};
use crate::read::{PacketBlock, RawBlock, Record};
use crate::write::{
    CB_COPY_TYPE, CB_NOCOPY_TYPE, EPB_TYPE, IDB_TYPE, ISB_TYPE, OPT_COMMENT, OPT_END, SHB_TYPE,
    begin_block, end_block, invalid, pad4, put_option, put_ts, put_u16, put_u32,
};
use options::{Carried, Owner, carry};

/// The obsolete Packet Block, which names its interface in 16 bits of its own.
const OLD_PACKET_TYPE: u32 = 0x0000_0002;

/// What a copy wrote, and what it could not keep and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopySummary {
    /// Packets written.
    pub packets: u64,
    /// Comments added to them.
    pub comments: u64,
    /// Interfaces described.
    pub interfaces: u32,
    /// Blocks other than packets and interfaces copied.
    pub blocks: u64,
    /// Blocks and options left out, by reason (the reason's words are for people).
    pub not_kept: BTreeMap<&'static str, u64>,
    /// Packets whose timestamp the interface they were written under cannot hold exactly (a file of a
    /// rotated set with a finer resolution than the set's first): written at the nearest earlier tick.
    pub rounded_timestamps: u64,
}

/// How one output interface counts time, from its description block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Units {
    tsresol: u8,
    offset_s: i64,
    /// The file and the file's interface that described it: their packets' stored ticks are in these units.
    from: Option<(usize, u32)>,
}

/// Writes one pcapng section: a capture's blocks as they come, packets with comments. See the module.
#[derive(Debug)]
pub struct Rewriter<W: Write> {
    out: W,
    /// The comment the section header gets: who added the packets' comments.
    note: String,
    started: bool,
    /// Each written interface's time units, by output interface (= tap) index.
    units: Vec<Units>,
    /// Statistics blocks whose interface has no tap yet (declared, not yet seen by the merge).
    waiting: Vec<KeptBlock>,
    /// The one section header whose options the output keeps, once written.
    used_section: bool,
    scratch: Vec<u8>,
    summary: CopySummary,
}

impl<W: Write> Rewriter<W> {
    /// A copy into `out`; `note` is written as a comment of the output's section (who annotated it, with
    /// what).
    pub fn new(out: W, note: &str) -> Self {
        Rewriter {
            out,
            note: note.to_owned(),
            started: false,
            units: Vec::new(),
            waiting: Vec::new(),
            used_section: false,
            scratch: Vec::with_capacity(4096),
            summary: CopySummary::default(),
        }
    }

    /// Writes the blocks that belong before the record `capture.next_record()` returned last, then that
    /// record, with `comments` added to its options.
    pub fn write_current(&mut self, capture: &mut Capture, comments: &[String]) -> io::Result<()> {
        let blocks = capture.take_blocks();
        self.blocks(capture, blocks)?;
        let Some(current) = capture.current() else {
            return Ok(());
        };
        let (file, interface, rec, block) = current;
        self.interfaces_up_to(capture, rec.iface)?;
        self.packet(file, interface, &rec, block, comments)
    }

    /// Writes what is left once the capture has ended (the blocks after the files' last packets, the
    /// interfaces no packet used) and hands back the output and what was written.
    pub fn finish(mut self, capture: &mut Capture) -> io::Result<(W, CopySummary)> {
        let blocks = capture.take_blocks();
        self.blocks(capture, blocks)?;
        let taps = u32::try_from(capture.taps().len()).map_err(|_| invalid("too many taps"))?;
        if let Some(last) = taps.checked_sub(1) {
            self.interfaces_up_to(capture, last)?;
        }
        for b in std::mem::take(&mut self.waiting) {
            self.statistics(capture, b, true)?;
        }
        let gone = capture.blocks_too_large();
        if gone > 0 {
            *self
                .summary
                .not_kept
                .entry("block longer than 64 MiB")
                .or_default() += gone;
        }
        self.start(capture, None)?;
        self.out.flush()?;
        Ok((self.out, self.summary))
    }

    fn not_kept(&mut self, why: &'static str, n: u64) {
        if n > 0 {
            *self.summary.not_kept.entry(why).or_default() += n;
        }
    }

    fn carried(&mut self, c: Carried) {
        self.not_kept(
            "option of a big-endian section this copy cannot turn around, or malformed",
            u64::from(c.dropped),
        );
    }

    /// Writes the section header, once: with one input file, its first section's options and the note;
    /// otherwise the note alone. `first` is the block the copy starts with, if any.
    fn start(&mut self, capture: &Capture, first: Option<&KeptBlock>) -> io::Result<()> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let b = &mut self.scratch;
        begin_block(b, SHB_TYPE);
        put_u32(b, 0x1A2B_3C4D);
        put_u16(b, 1);
        put_u16(b, 0);
        // Section length unknown: the copy streams.
        b.extend_from_slice(&(-1i64).to_le_bytes());
        let mut carried = Carried::default();
        if let Some(k) = first.filter(|k| k.block.block_type == SHB_TYPE)
            && capture.files().count() == 1
        {
            let raw = &k.block;
            carried = carry(
                b,
                raw.bytes
                    .get(24..raw.bytes.len().saturating_sub(4))
                    .unwrap_or_default(),
                raw.big_endian,
                Owner::Section,
            )?;
            self.used_section = true;
        }
        put_option(b, OPT_COMMENT, self.note.as_bytes())?;
        put_option(b, OPT_END, &[])?;
        end_block(b)?;
        self.out.write_all(b)?;
        self.carried(carried);
        Ok(())
    }

    fn blocks(&mut self, capture: &Capture, blocks: Vec<KeptBlock>) -> io::Result<()> {
        self.start(capture, blocks.first())?;
        let mut section_kept = self.used_section;
        for k in blocks {
            match k.block.block_type {
                SHB_TYPE if section_kept => section_kept = false,
                // A section header without options loses nothing.
                SHB_TYPE if k.block.bytes.len() > 28 => {
                    self.not_kept("section header's options (the output is one section)", 1)
                }
                SHB_TYPE => {}
                ISB_TYPE => self.statistics(capture, k, false)?,
                OLD_PACKET_TYPE => self.not_kept("obsolete Packet Block", 1),
                CB_NOCOPY_TYPE if !is_ours(&k.block) => {
                    self.not_kept("custom block its owner marked not to be copied", 1)
                }
                CB_COPY_TYPE | CB_NOCOPY_TYPE => self.custom(&k.block)?,
                _ if k.block.big_endian => self.not_kept(
                    "block of a big-endian section of a type this copy cannot turn around",
                    1,
                ),
                _ => {
                    self.out.write_all(&k.block.bytes)?;
                    self.summary.blocks += 1;
                }
            }
        }
        // Only the first section header of the only file was the output's; any later one was counted.
        self.used_section = false;
        Ok(())
    }

    /// A custom block: the same bytes, with its header and PEN in little-endian. Its data is its owner's
    /// format, whatever the section's byte order (rocetrace's is JSON text).
    fn custom(&mut self, raw: &RawBlock) -> io::Result<()> {
        if raw.big_endian {
            let body = raw
                .bytes
                .get(12..raw.bytes.len().saturating_sub(4))
                .unwrap_or_default();
            let pen = u32_of(&raw.bytes, 8, true);
            let b = &mut self.scratch;
            begin_block(b, raw.block_type);
            put_u32(b, pen);
            b.extend_from_slice(body);
            end_block(b)?;
            self.out.write_all(b)?;
        } else {
            self.out.write_all(&raw.bytes)?;
        }
        self.summary.blocks += 1;
        Ok(())
    }

    /// A statistics block, its interface named by the output's numbering; one whose interface has no tap
    /// yet waits, and at the end (`last`) one that still has none is counted as not kept.
    fn statistics(&mut self, capture: &Capture, k: KeptBlock, last: bool) -> io::Result<()> {
        let tap = k.block.iface.and_then(|i| capture.tap_of(k.file, i));
        let Some(tap) = tap else {
            if last {
                self.not_kept("statistics of an interface the file never described", 1);
            } else {
                self.waiting.push(k);
            }
            return Ok(());
        };
        self.interfaces_up_to(capture, tap)?;
        let raw = &k.block;
        let be = raw.big_endian;
        let b = &mut self.scratch;
        begin_block(b, ISB_TYPE);
        put_u32(b, tap);
        put_u32(b, u32_of(&raw.bytes, 12, be));
        put_u32(b, u32_of(&raw.bytes, 16, be));
        let options = raw
            .bytes
            .get(20..raw.bytes.len().saturating_sub(4))
            .unwrap_or_default();
        let carried = carry(b, options, be, Owner::Statistics)?;
        if carried.kept > 0 {
            put_option(b, OPT_END, &[])?;
        }
        end_block(b)?;
        self.out.write_all(b)?;
        self.carried(carried);
        self.summary.blocks += 1;
        Ok(())
    }

    /// Describes every tap up to `tap`, in order: the output numbers its interfaces as the capture numbers
    /// its taps.
    fn interfaces_up_to(&mut self, capture: &Capture, tap: u32) -> io::Result<()> {
        while self.units.len() <= tap as usize {
            let Some(t) = capture.taps().get(self.units.len()) else {
                return Err(invalid("a record names a tap the capture does not have"));
            };
            let b = &mut self.scratch;
            begin_block(b, IDB_TYPE);
            let (units, carried) = match &t.block {
                Some(raw) => {
                    let be = raw.big_endian;
                    put_u16(b, u16_of(&raw.bytes, 8, be));
                    put_u16(b, 0);
                    put_u32(b, u32_of(&raw.bytes, 12, be));
                    let options = raw
                        .bytes
                        .get(16..raw.bytes.len().saturating_sub(4))
                        .unwrap_or_default();
                    let start = b.len();
                    let carried = carry(b, options, be, Owner::Interface)?;
                    let units = units_of(
                        b.get(start..).unwrap_or_default(),
                        Some((t.file, t.interface)),
                    );
                    (units, carried)
                }
                None => {
                    // A classic pcap (or a description the reader did not keep): described anew, in
                    // nanoseconds, which hold any timestamp the reader gives exactly.
                    put_u16(b, t.description.link.0);
                    put_u16(b, 0);
                    put_u32(b, t.description.snaplen);
                    if let Some(name) = &t.description.name {
                        put_option(b, 2, name.as_bytes())?;
                    }
                    if let Some(bps) = t.description.speed_bps {
                        put_option(b, 8, &bps.to_le_bytes())?;
                    }
                    put_option(b, 9, &[9])?;
                    let units = Units {
                        tsresol: 9,
                        offset_s: 0,
                        from: None,
                    };
                    (
                        units,
                        Carried {
                            kept: 1,
                            dropped: 0,
                        },
                    )
                }
            };
            if carried.kept > 0 {
                put_option(b, OPT_END, &[])?;
            }
            end_block(b)?;
            self.out.write_all(b)?;
            self.carried(carried);
            self.units.push(units);
            self.summary.interfaces += 1;
        }
        Ok(())
    }

    /// One packet as an Enhanced Packet Block on its tap's interface, its own options and the comments.
    fn packet(
        &mut self,
        file: usize,
        interface: u32,
        rec: &Record<'_>,
        block: Option<PacketBlock<'_>>,
        comments: &[String],
    ) -> io::Result<()> {
        let units = self
            .units
            .get(rec.iface as usize)
            .copied()
            .ok_or_else(|| invalid("a record's interface was not described"))?;
        // The ticks as stored, when they count in the units of the interface the packet is written under;
        // else the reader's nanoseconds in those units.
        let ticks = match block.and_then(|b| b.ticks) {
            Some(t) if units.from == Some((file, interface)) => t,
            _ => {
                let (t, exact) = ticks_of(rec.ts_ns, units);
                if !exact {
                    self.summary.rounded_timestamps += 1;
                }
                t
            }
        };
        let b = &mut self.scratch;
        begin_block(b, EPB_TYPE);
        put_u32(b, rec.iface);
        put_ts(b, ticks);
        put_u32(b, rec.caplen);
        put_u32(b, rec.len);
        b.extend_from_slice(rec.data);
        pad4(b);
        let carried = match block {
            Some(pb) => carry(b, pb.options, pb.big_endian, Owner::Packet)?,
            None => Carried::default(),
        };
        for c in comments {
            put_option(b, OPT_COMMENT, c.as_bytes())?;
        }
        if carried.kept > 0 || !comments.is_empty() {
            put_option(b, OPT_END, &[])?;
        }
        end_block(b)?;
        self.out.write_all(b)?;
        self.carried(carried);
        self.summary.packets += 1;
        self.summary.comments += comments.len() as u64;
        Ok(())
    }
}

/// Whether a custom block is rocetrace's own: the project knows its records stand alone, so they are
/// copied even from a block type that asks tools not to copy what they do not understand.
fn is_ours(raw: &RawBlock) -> bool {
    u32_of(&raw.bytes, 8, raw.big_endian) == crate::blocks::PEN
}

/// The time units an interface's (little-endian) options give: `if_tsresol` (default microseconds) and
/// `if_tsoffset`.
fn units_of(options: &[u8], from: Option<(usize, u32)>) -> Units {
    let mut units = Units {
        tsresol: 6,
        offset_s: 0,
        from,
    };
    let mut rest = options;
    while rest.len() >= 4 {
        let (code, len) = (u16_of(rest, 0, false), usize::from(u16_of(rest, 2, false)));
        let value = rest.get(4..4 + len).unwrap_or_default();
        match (code, value) {
            (9, &[r]) => units.tsresol = r,
            (14, &[a, b, c, d, e, f, g, h]) => {
                units.offset_s = i64::from_le_bytes([a, b, c, d, e, f, g, h]);
            }
            _ => {}
        }
        rest = rest
            .get((4 + len).next_multiple_of(4)..)
            .unwrap_or_default();
    }
    units
}

/// `ts_ns` in an interface's units: the ticks the reader turns back into `ts_ns` when there are such, else
/// the nearest below; and whether they were exact.
fn ticks_of(ts_ns: u64, units: Units) -> (u64, bool) {
    let ns = i128::from(ts_ns) - i128::from(units.offset_s) * 1_000_000_000;
    let Ok(ns) = u128::try_from(ns) else {
        return (0, false);
    };
    let n = u32::from(units.tsresol & 0x7f);
    let (ticks, exact) = if units.tsresol & 0x80 != 0 {
        // 2^-n s: the reader floors ticks · 10^9 / 2^n, so take the least ticks that reach ns.
        let t = (ns << n.min(64)).div_ceil(1_000_000_000);
        (t, (t * 1_000_000_000) >> n.min(64) == ns)
    } else if n <= 9 {
        let d = 10u128.pow(9 - n);
        (ns / d, ns % d == 0)
    } else {
        match 10u128.checked_pow(n - 9).and_then(|m| ns.checked_mul(m)) {
            Some(t) => (t, true),
            None => (u128::MAX, false),
        }
    };
    match u64::try_from(ticks) {
        Ok(t) => (t, exact),
        Err(_) => (u64::MAX, false),
    }
}

fn u16_of(b: &[u8], at: usize, big_endian: bool) -> u16 {
    let Some(&[x, y]) = b.get(at..at + 2) else {
        return 0;
    };
    if big_endian {
        u16::from_be_bytes([x, y])
    } else {
        u16::from_le_bytes([x, y])
    }
}

fn u32_of(b: &[u8], at: usize, big_endian: bool) -> u32 {
    let Some(&[w, x, y, z]) = b.get(at..at + 4) else {
        return 0;
    };
    if big_endian {
        u32::from_be_bytes([w, x, y, z])
    } else {
        u32::from_le_bytes([w, x, y, z])
    }
}
