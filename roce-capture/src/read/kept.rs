//! The blocks of a pcapng file as stored, kept for a tool that copies the file rather than analyses it
//! (`roce-analyzer annotate` writes a capture back with comments on its packets).
//!
//! Reading for an analysis drops every block but the packets, the interfaces' descriptions and the custom
//! blocks' data: keeping them all would hold a file's metadata twice for nothing. A copy needs them whole,
//! options and all, and in their place between the packets, so [`CaptureReader::keep_blocks`] turns keeping
//! on for one reader, and the blocks wait in it until the copier takes them.

use super::CaptureReader;

/// The largest block kept whole for a copy. pcapng puts no bound on a block's length; one past this (no
/// writer we know makes one) is counted as not kept rather than buffered.
pub(super) const MAX_KEPT_BLOCK: u64 = 64 << 20;

/// A block of a pcapng file, as the file stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawBlock {
    /// The block type, as its section's byte order reads it.
    pub block_type: u32,
    /// The byte order of the block's section: every field in `bytes` is in it.
    pub big_endian: bool,
    /// The whole block, from its type to its trailing length.
    pub bytes: Vec<u8>,
    /// For an Interface Statistics Block, the interface it counts, as an index into
    /// [`CaptureReader::interfaces`] (the block itself says it relative to its section).
    pub iface: Option<u32>,
}

/// What a packet's block holds besides the [`super::Record`] read from it: what a copy needs to write the
/// packet back unchanged.
#[derive(Debug, Clone, Copy)]
pub struct PacketBlock<'a> {
    /// The timestamp as stored, in its interface's units (`if_tsresol`, before `if_tsoffset`); `None` for a
    /// Simple Packet Block, which has none.
    pub ticks: Option<u64>,
    /// The block's options as stored (the end-of-options marker included, when there is one).
    pub options: &'a [u8],
    /// The byte order of the block's section.
    pub big_endian: bool,
}

/// Where the parts of the current packet's block are in the read buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct BlockPlace {
    pub(super) ticks: Option<u64>,
    /// The options' start and end, as offsets in the buffer.
    pub(super) options: (usize, usize),
    pub(super) big_endian: bool,
}

/// What a reader keeps for a copy, when asked to.
#[derive(Debug, Default)]
pub(super) struct Kept {
    /// Blocks passed since the copier last took them.
    pub(super) blocks: Vec<RawBlock>,
    /// Each interface's description block, by index into the reader's interfaces.
    pub(super) interfaces: Vec<Option<RawBlock>>,
    /// The bytes of a block too large for the read buffer, gathered as it is skipped.
    pub(super) gathering: Option<RawBlock>,
    /// Blocks not kept because they were longer than [`MAX_KEPT_BLOCK`].
    pub(super) too_large: u64,
}

impl CaptureReader {
    /// Keeps every block of the file from now on, for [`CaptureReader::take_blocks`],
    /// [`CaptureReader::interface_block`] and [`CaptureReader::current_block`]. Call it before the first
    /// record is read, or the blocks before it are gone.
    pub fn keep_blocks(&mut self) {
        if self.kept.is_none() {
            self.kept = Some(Box::default());
        }
    }

    /// The blocks other than packets and interface descriptions (section headers, statistics, custom,
    /// name resolution, decryption secrets, any other type) passed since the last call, in file order: with
    /// [`CaptureReader::keep_blocks`] on, those between the previous record and the current one.
    pub fn take_blocks(&mut self) -> Vec<RawBlock> {
        self.kept
            .as_mut()
            .map(|k| std::mem::take(&mut k.blocks))
            .unwrap_or_default()
    }

    /// The description block of interface `i` (an index into [`CaptureReader::interfaces`]) as stored, when
    /// blocks are kept and the file is pcapng.
    pub fn interface_block(&self, i: usize) -> Option<&RawBlock> {
        self.kept.as_ref()?.interfaces.get(i)?.as_ref()
    }

    /// How many blocks were not kept because they were too long to hold (more than 64 MiB).
    pub fn blocks_too_large(&self) -> u64 {
        self.kept.as_ref().map_or(0, |k| k.too_large)
    }

    /// The current record's block (pcapng only), when blocks are kept.
    pub fn current_block(&self) -> Option<PacketBlock<'_>> {
        self.kept.as_ref()?;
        let place = self.current.as_ref()?.block?;
        let (start, end) = place.options;
        Some(PacketBlock {
            ticks: place.ticks,
            options: self.buf.data().get(start..end).unwrap_or_default(),
            big_endian: place.big_endian,
        })
    }

    /// Whether blocks are being kept.
    pub(super) fn keeping(&self) -> bool {
        self.kept.is_some()
    }

    /// Keeps a copy of the block of `len` bytes at the start of the buffer.
    pub(super) fn keep_buffered(
        &mut self,
        block_type: u32,
        big_endian: bool,
        len: usize,
        iface: Option<u32>,
    ) {
        let bytes = self.buf.data().get(..len).unwrap_or_default().to_vec();
        if let Some(k) = self.kept.as_mut() {
            k.blocks.push(RawBlock {
                block_type,
                big_endian,
                bytes,
                iface,
            });
        }
    }

    /// Keeps a copy of the interface description block of `len` bytes at the start of the buffer, for the
    /// interface just added.
    pub(super) fn keep_interface(&mut self, big_endian: bool, len: usize) {
        let bytes = self.buf.data().get(..len).unwrap_or_default().to_vec();
        let index = self.interfaces.len();
        if let Some(k) = self.kept.as_mut() {
            k.interfaces.resize(index.saturating_sub(1), None);
            k.interfaces.push(Some(RawBlock {
                block_type: pcap_parser::IDB_MAGIC,
                big_endian,
                bytes,
                iface: None,
            }));
        }
    }

    /// Starts gathering a block that is skipped piece by piece, when it is not too long to keep.
    pub(super) fn start_gathering(&mut self, block_type: u32, len: u32) {
        let big_endian = self.big_endian;
        let Some(k) = self.kept.as_mut() else { return };
        if u64::from(len) > MAX_KEPT_BLOCK {
            k.too_large += 1;
            return;
        }
        k.gathering = Some(RawBlock {
            block_type,
            big_endian,
            bytes: Vec::with_capacity(len as usize),
            iface: None,
        });
    }

    /// The next `n` bytes of a block being skipped, gathered before they are consumed; `done` when they are
    /// its last.
    pub(super) fn gather(&mut self, n: usize, done: bool) {
        let Some(k) = self.kept.as_mut() else { return };
        if let Some(g) = k.gathering.as_mut() {
            g.bytes
                .extend_from_slice(self.buf.data().get(..n).unwrap_or_default());
        }
        if done && let Some(g) = k.gathering.take() {
            k.blocks.push(g);
        }
    }
}
