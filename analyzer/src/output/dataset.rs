//! `decode --parquet`: every frame as one row of a columnar dataset, for engines that read many collectors'
//! captures at once (Spark, see docs/spark.md), where no single machine could merge them.
//!
//! The writer streams in bounded memory and splits the work over two threads. The decoding thread fills
//! plain column buffers for a page's worth of rows ([`PAGE_ROWS`]) and hands them over; the encoding thread
//! turns each column of them into one Parquet data page while the next page is being decoded. Pages gather
//! in memory, encoded and compressed (a few bytes a row), until the row group reaches
//! [`DEFAULT_GROUP_BYTES`] before compression, the size Spark's readers and planners expect; then the group
//! is written out and its pages dropped. So memory
//! holds one encoded row group plus a few pages of buffers, whatever the capture's length.
//!
//! The pages are written through the Parquet layer under polars with an encoding chosen per column rather
//! than tried: integers DELTA_BINARY_PACKED (counters and times cost a few bits a row, fields that rarely
//! change almost nothing), text as a dictionary built while the rows arrive (addresses, taps and kinds repeat
//! a handful of values, so a row costs a hash lookup and a few bits, and no string is made twice), booleans
//! PLAIN (one bit each). Pages are then compressed with Snappy, Spark's default codec, which still finds
//! a fivefold saving in what the encodings leave (per-flow patterns in PSNs, ports and times) for little
//! time. Readers see the same columns and types as ever: encodings are not part of the schema.
//!
//! A file holds a few row groups and is then closed under its final name, so a reader listing the directory
//! meanwhile sees only whole files (Spark and Hive pass over names that start with a dot).
//!
//! Columns are signed integers, booleans and strings only: Spark reads Parquet's unsigned 32-bit integers as
//! 64-bit ones and its unsigned 64-bit integers as decimals, so signed types one size up keep every engine's
//! types plain. The one exception is the RETH virtual address, a full 64-bit value.
//!
//! Schema changes bump [`SCHEMA_VERSION`], kept both in a column (Spark reads columns, not file metadata) and
//! in the file's key-value metadata (`rocetrace.schema_version`), and docs/spark.md lists every column.

use std::collections::hash_map::Entry;
use std::fs::File;
use std::hash::Hash;
use std::io::BufWriter;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use polars::prelude::PlSmallStr;
use polars_parquet::parquet::CowBuffer;
use polars_parquet::parquet::compression::{Compression, CompressionOptions, compress};
use polars_parquet::parquet::encoding::{bitpacked, hybrid_rle};
use polars_parquet::parquet::error::ParquetError;
use polars_parquet::parquet::metadata::{Descriptor, KeyValue, SchemaDescriptor};
use polars_parquet::parquet::page::{
    CompressedDataPage, CompressedDictPage, CompressedPage, DataPageHeader, DataPageHeaderV1,
    FormatEncoding,
};
use polars_parquet::parquet::schema::Repetition;
use polars_parquet::parquet::schema::types::{
    IntegerType, ParquetType, PhysicalType, PrimitiveConvertedType, PrimitiveLogicalType,
};
use polars_parquet::parquet::write::{
    DynIter, DynStreamingIterator, FileWriter, Version, WriteOptions,
};
use polars_parquet::write::fallible_streaming_iterator;
use roce_capture::Capture;
use roce_core::decode::{Frame, IpInfo, Kind, mac_to_string};
use roce_wire::bth::BthRepr;
use roce_wire::ext::{AethRepr, RethRepr};
use roce_wire::pfc::MacControlRepr;
use rustc_hash::FxHashMap;
use thiserror::Error;

use super::tables::{self, TableError};

/// The dataset's schema version: bumped whenever a column is added, removed, renamed or changes meaning.
pub const SCHEMA_VERSION: i32 = 1;
/// The file metadata key that holds [`SCHEMA_VERSION`].
pub const SCHEMA_VERSION_KEY: &str = "rocetrace.schema_version";
/// Encoded bytes (before compression) at which a row group is closed: 128 MiB, Spark's (and parquet-mr's)
/// block size, so that a group is a task's worth of input. At about 20 bytes a row that is several million
/// frames.
pub const DEFAULT_GROUP_BYTES: usize = 128 << 20;
/// Row groups per file before the next `part-NNNNN.parquet` starts: files of about half a gigabyte, which
/// object stores and Spark's split planning handle well.
pub const DEFAULT_GROUPS_PER_FILE: usize = 4;
/// Rows per data page, which is also the batch the decoding thread hands over: large enough that a page's
/// header and the hand-over cost nothing per row, small enough that the buffers in flight stay near 10 MB.
pub const PAGE_ROWS: usize = 1 << 16;
/// Distinct values a text column's dictionary may reach before its row group is closed early: a scan of
/// many hosts still keeps the dictionaries (and readers' memory for them) small.
const DICT_MAX: usize = 1 << 16;

/// Why a dataset could not be written.
#[derive(Debug, Error)]
pub enum DatasetError {
    /// Writing a file failed (the same errors as the tables').
    #[error(transparent)]
    Write(#[from] TableError),
    /// The Parquet layer refused a page or the footer.
    #[error("writing {path}")]
    Parquet {
        /// The file being written.
        path: PathBuf,
        /// What the Parquet writer said.
        source: ParquetError,
    },
    /// The directory already holds part files: adding to them would count their frames twice.
    #[error(
        "{path} already holds part files of a dataset; remove them or write elsewhere (another --collector \
         name, say): adding to them would count their frames twice"
    )]
    NotEmpty {
        /// The directory, so the user knows what to clear.
        path: PathBuf,
    },
    /// The encoding thread stopped without saying why (it panicked).
    #[error("the dataset writer's encoding thread stopped unexpectedly while writing {path}")]
    Encoder {
        /// The dataset's directory.
        path: PathBuf,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> DatasetError + '_ {
    move |source| {
        DatasetError::Write(TableError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

fn parquet_error(path: &Path) -> impl FnOnce(ParquetError) -> DatasetError + '_ {
    move |source| DatasetError::Parquet {
        path: path.to_path_buf(),
        source,
    }
}

/// Declares the column buffers once: the struct, and [`Rows::each_buffer`] over every field of it, so that
/// clearing and reserving cannot forget a column.
macro_rules! rows {
    ($($name:ident: $ty:ty,)*) => {
        /// The column buffers of one page's rows: raw values, looked up in the dictionaries (addresses, tap
        /// names) only on the encoding thread, so a row costs the decoding thread a handful of stores.
        #[derive(Debug, Default)]
        struct Rows {
            $($name: $ty,)*
        }

        impl Rows {
            fn each_buffer(&mut self, each: &mut dyn FnMut(&mut dyn Buffer)) {
                $(each(&mut self.$name);)*
            }
        }
    };
}

rows! {
    frame: Vec<i64>,
    time_ns: Vec<i64>,
    iface: Vec<u32>,
    kind: Vec<Kind>,
    len: Vec<u32>,
    caplen: Vec<u32>,
    vlan: Vec<Option<u16>>,
    pcp: Vec<Option<u8>>,
    inner_vlan: Vec<Option<u16>>,
    src_mac: Vec<Option<[u8; 6]>>,
    dst_mac: Vec<Option<[u8; 6]>>,
    ip: Vec<Option<IpInfo>>,
    roce_version: Vec<Option<u8>>,
    sport: Vec<Option<u16>>,
    bth: Vec<Option<BthRepr>>,
    payload_len: Vec<Option<i32>>,
    icrc_ok: Vec<Option<bool>>,
    aeth: Sparse<AethRepr>,
    reth: Sparse<RethRepr>,
    deth_src_qp: Sparse<u32>,
    mac_control: Sparse<MacControlRepr>,
}

/// A header that few frames carry (AETH on acknowledgements, RETH on a message's first packet, DETH,
/// PFC and PAUSE): its values with their rows, so that the other rows cost neither a store nor room in
/// the batch (as `Option`s these four took a third of a row's bytes).
#[derive(Debug)]
struct Sparse<T> {
    rows: Vec<u32>,
    values: Vec<T>,
}

impl<T> Default for Sparse<T> {
    fn default() -> Self {
        Sparse {
            rows: Vec::new(),
            values: Vec::new(),
        }
    }
}

impl<T> Sparse<T> {
    #[inline]
    fn push(&mut self, row: usize, value: Option<T>) {
        if let Some(v) = value {
            self.rows.push(row as u32);
            self.values.push(v);
        }
    }
}

impl<T> Buffer for Sparse<T> {
    fn clear_keep(&mut self) {
        self.rows.clear();
        self.values.clear();
    }
    fn reserve_rows(&mut self, _: usize) {}
}

impl Rows {
    fn with_capacity(n: usize) -> Self {
        let mut r = Rows::default();
        r.reserve(n);
        r
    }

    /// Appends one frame; the fields a frame lacks are null, as `decode --json` leaves them out. Headers
    /// are copied whole (a BTH, the IP facts, a PFC frame's content) and split into columns on the encoding
    /// thread: fewer stores here, on the thread that also reads and decodes.
    fn push(&mut self, f: &Frame<'_>) {
        let row = self.frame.len();
        self.frame.push(f.number as i64);
        self.time_ns.push(f.ts_ns as i64);
        self.iface.push(f.iface);
        self.kind.push(f.kind);
        self.len.push(f.len);
        self.caplen.push(f.caplen);
        self.vlan.push(f.vlan);
        self.pcp.push(f.pcp);
        self.inner_vlan.push(f.inner_vlan);
        self.src_mac.push(f.src_mac);
        self.dst_mac.push(f.dst_mac);
        self.ip.push(f.ip);
        let roce = f.roce.as_ref();
        self.roce_version.push(roce.map(|r| r.version));
        self.sport.push(roce.and_then(|r| r.sport));
        self.bth.push(roce.and_then(|r| r.packet.bth));
        self.payload_len.push(
            roce.and_then(|r| r.packet.payload_len)
                .map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
        );
        self.icrc_ok.push(roce.and_then(|r| r.icrc.as_option()));
        if let Some(e) = roce.map(|r| &r.packet.ext) {
            self.aeth.push(row, e.aeth);
            self.reth.push(row, e.reth);
            self.deth_src_qp.push(row, e.deth.map(|d| d.src_qp));
        }
        self.mac_control.push(row, f.mac_control);
    }

    fn len(&self) -> usize {
        self.frame.len()
    }

    fn clear(&mut self) {
        self.each_buffer(&mut |b| b.clear_keep());
    }

    fn reserve(&mut self, n: usize) {
        self.each_buffer(&mut |b| b.reserve_rows(n));
    }
}

/// What [`Rows::each_buffer`] needs of a column buffer, whatever its element type.
trait Buffer {
    fn clear_keep(&mut self);
    fn reserve_rows(&mut self, n: usize);
}

impl<T> Buffer for Vec<T> {
    fn clear_keep(&mut self) {
        self.clear();
    }
    fn reserve_rows(&mut self, n: usize) {
        self.reserve(n.saturating_sub(self.len()));
    }
}

/// A column's Parquet type, declared as polars' own writer declared it, so that readers see the same schema
/// whichever rocetrace version wrote a dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Int32,
    Int64,
    UInt64,
    Bool,
    Text,
}

/// Every column, in the documented order (docs/spark.md). [`Encoder::encode`] fills them in this order.
const COLUMNS: &[(&str, Type)] = &[
    ("schema_version", Type::Int32),
    ("frame", Type::Int64),
    ("time_ns", Type::Int64),
    ("tap", Type::Text),
    ("kind", Type::Text),
    ("len", Type::Int64),
    ("caplen", Type::Int64),
    ("src_mac", Type::Text),
    ("dst_mac", Type::Text),
    ("vlan", Type::Int32),
    ("pcp", Type::Int32),
    ("inner_vlan", Type::Int32),
    ("src", Type::Text),
    ("dst", Type::Text),
    ("dscp", Type::Int32),
    ("ecn", Type::Int32),
    ("ip_len", Type::Int32),
    ("roce_version", Type::Int32),
    ("sport", Type::Int32),
    ("opcode", Type::Int32),
    ("dest_qp", Type::Int32),
    ("psn", Type::Int32),
    ("se", Type::Bool),
    ("migreq", Type::Bool),
    ("pad", Type::Int32),
    ("tver", Type::Int32),
    ("pkey", Type::Int32),
    ("fecn", Type::Bool),
    ("becn", Type::Bool),
    ("ack_req", Type::Bool),
    ("payload_len", Type::Int32),
    ("icrc_ok", Type::Bool),
    ("aeth_syndrome", Type::Int32),
    ("aeth_msn", Type::Int32),
    ("reth_va", Type::UInt64),
    ("reth_rkey", Type::Int64),
    ("reth_len", Type::Int64),
    ("deth_src_qp", Type::Int32),
    ("pfc_enable", Type::Int32),
    ("pfc_quanta_0", Type::Int32),
    ("pfc_quanta_1", Type::Int32),
    ("pfc_quanta_2", Type::Int32),
    ("pfc_quanta_3", Type::Int32),
    ("pfc_quanta_4", Type::Int32),
    ("pfc_quanta_5", Type::Int32),
    ("pfc_quanta_6", Type::Int32),
    ("pfc_quanta_7", Type::Int32),
    ("pause_quanta", Type::Int32),
];

fn schema() -> Result<SchemaDescriptor, ParquetError> {
    let fields = COLUMNS
        .iter()
        .map(|&(name, t)| {
            let (physical, converted, logical) = match t {
                Type::Int32 => (PhysicalType::Int32, None, None),
                Type::Int64 => (PhysicalType::Int64, None, None),
                Type::UInt64 => (
                    PhysicalType::Int64,
                    Some(PrimitiveConvertedType::Uint64),
                    Some(PrimitiveLogicalType::Integer(IntegerType::UInt64)),
                ),
                Type::Bool => (PhysicalType::Boolean, None, None),
                Type::Text => (
                    PhysicalType::ByteArray,
                    Some(PrimitiveConvertedType::Utf8),
                    Some(PrimitiveLogicalType::String),
                ),
            };
            ParquetType::try_from_primitive(
                PlSmallStr::from_static(name),
                physical,
                Repetition::Optional,
                converted,
                logical,
                None,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SchemaDescriptor::new(
        PlSmallStr::from_static("root"),
        fields,
    ))
}

fn uleb128(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Appends `n` definition levels (1 = present) from a validity bitmap (LSB first), as Parquet's RLE/bit-packed
/// hybrid behind the 4-byte length a v1 data page puts before it. Whole bitmap bytes that are all present or
/// all absent become runs; mixed bytes are copied as they are, since at one bit a value a bitmap byte is
/// exactly a bit-packed group of eight. The cost is per byte, not per row, which matters with 48 columns
/// most of which are all present or all absent page after page.
fn def_levels(out: &mut Vec<u8>, valid: &[u8], n: usize) {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    let whole = n / 8;
    let rest = n % 8;
    let mut literal_from: Option<usize> = None;
    let mut tail_in_run = false;
    let mut i = 0;
    while i < whole {
        let b = valid[i];
        if b == 0 || b == 0xff {
            let mut j = i + 1;
            while j < whole && valid[j] == b {
                j += 1;
            }
            // A run of at least 16 rows is shorter as a run than as two literal bytes.
            if j - i >= 2 {
                if let Some(from) = literal_from.take() {
                    packed(out, &valid[from..i]);
                }
                let mut count = (j - i) * 8;
                if j == whole && rest > 0 {
                    let mask = (1u8 << rest) - 1;
                    if valid[whole] & mask == b & mask {
                        count += rest;
                        tail_in_run = true;
                    }
                }
                uleb128(out, (count as u64) << 1);
                out.push(b & 1);
                i = j;
                continue;
            }
        }
        literal_from.get_or_insert(i);
        i += 1;
    }
    // The last partial byte, unless a run took it, closes the last group: values past `n` are padding that
    // readers ignore (they know the page's value count), which the format allows in the final group only.
    let end = if rest > 0 && !tail_in_run {
        literal_from.get_or_insert(whole);
        whole + 1
    } else {
        whole
    };
    if let Some(from) = literal_from {
        packed(out, &valid[from..end]);
    }
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// Values of a DELTA_BINARY_PACKED block, and of each of its miniblocks (the layout parquet-mr writes).
const DELTA_BLOCK: usize = 128;
const DELTA_MINIBLOCKS: usize = 4;
const DELTA_PER_MINIBLOCK: usize = DELTA_BLOCK / DELTA_MINIBLOCKS;

fn zigzag(out: &mut Vec<u8>, v: i64) {
    uleb128(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// Appends `values` as Parquet's DELTA_BINARY_PACKED: the first value, then per block of 128 the least
/// delta and each miniblock's deltas above it at the bits the largest needs. A column of an INT32 type is
/// differenced in 32-bit arithmetic, as the format defines it for that type (so no width exceeds 32).
fn delta_binary_packed(out: &mut Vec<u8>, values: &[i64], int32: bool) {
    if int32 {
        delta_blocks::<true>(out, values);
    } else {
        delta_blocks::<false>(out, values);
    }
}

/// [`delta_binary_packed`] for one integer width, so that the loops carry no test of it: this is the
/// encoding thread's largest single cost, a few operations per value of every integer column.
fn delta_blocks<const INT32: bool>(out: &mut Vec<u8>, values: &[i64]) {
    uleb128(out, DELTA_BLOCK as u64);
    uleb128(out, DELTA_MINIBLOCKS as u64);
    uleb128(out, values.len() as u64);
    let Some((&first, rest)) = values.split_first() else {
        zigzag(out, 0);
        return;
    };
    zigzag(out, first);
    let diff = |a: i64, b: i64| {
        if INT32 {
            i64::from((a as i32).wrapping_sub(b as i32))
        } else {
            a.wrapping_sub(b)
        }
    };
    let mut prev = first;
    let mut deltas = [0i64; DELTA_BLOCK];
    let mut above = [0u64; DELTA_BLOCK];
    for block in rest.chunks(DELTA_BLOCK) {
        let n = block.len();
        let deltas = &mut deltas[..n];
        // Differences, least and greatest in one pass: the machine baseline has no vector compare of
        // 64-bit integers, so separate min and max passes cost as much again.
        let mut min = i64::MAX;
        let mut max = i64::MIN;
        for (d, &v) in deltas.iter_mut().zip(block) {
            *d = diff(v, prev);
            min = min.min(*d);
            max = max.max(*d);
            prev = v;
        }
        zigzag(out, min);
        // One delta throughout (a constant, a counter): every miniblock is zero bits wide, and empty.
        if min == max {
            out.extend_from_slice(&[0; DELTA_MINIBLOCKS]);
            continue;
        }
        for (a, &d) in above.iter_mut().zip(deltas.iter()) {
            *a = if INT32 {
                u64::from((d as i32).wrapping_sub(min as i32) as u32)
            } else {
                d.wrapping_sub(min) as u64
            };
        }
        // Padding past the last value is packed as zeros.
        above[n..].fill(0);
        let mut widths = [0u8; DELTA_MINIBLOCKS];
        for (width, mini) in widths
            .iter_mut()
            .zip(above.chunks_exact(DELTA_PER_MINIBLOCK))
        {
            let any = mini.iter().fold(0, |any, &a| any | a);
            *width = (u64::BITS - any.leading_zeros()) as u8;
        }
        out.extend_from_slice(&widths);
        let used = n.div_ceil(DELTA_PER_MINIBLOCK);
        for (&width, mini) in widths
            .iter()
            .zip(above.chunks_exact(DELTA_PER_MINIBLOCK))
            .take(used)
        {
            bit_pack(out, mini, u32::from(width));
        }
    }
}

/// Packs a miniblock of 32 values LSB first at `width` bits each (32 values fill whole bytes at any width),
/// through the Parquet layer's unrolled packer when the width fits 32 bits, as all but the rarest do.
fn bit_pack(out: &mut Vec<u8>, values: &[u64], width: u32) {
    if width == 0 {
        return;
    }
    if width <= 32 && values.len() == 32 {
        let mut narrow = [0u32; 32];
        for (n, &v) in narrow.iter_mut().zip(values) {
            *n = v as u32;
        }
        let at = out.len();
        out.resize(at + 4 * width as usize, 0);
        bitpacked::encode_pack::<u32>(&narrow, width as usize, &mut out[at..]);
        return;
    }
    bit_pack_wide(out, values, width);
}

/// Packs values LSB first at `width` bits each, any width up to 64.
fn bit_pack_wide(out: &mut Vec<u8>, values: &[u64], width: u32) {
    let mut acc: u128 = 0;
    let mut bits = 0u32;
    for &v in values {
        acc |= u128::from(v) << bits;
        bits += width;
        if bits >= 64 {
            out.extend_from_slice(&(acc as u64).to_le_bytes());
            acc >>= 64;
            bits -= 64;
        }
    }
    out.extend_from_slice(&(acc as u64).to_le_bytes()[..(bits / 8) as usize]);
}

/// A bit-packed group run of one-bit values: a header, then the bytes as they are.
fn packed(out: &mut Vec<u8>, bytes: &[u8]) {
    uleb128(out, ((bytes.len() as u64) << 1) | 1);
    out.extend_from_slice(bytes);
}

/// One column chunk of the row group being gathered: its pages, already encoded, and for a text column the
/// dictionary its pages index into (PLAIN byte arrays: a 4-byte length, then the UTF-8 bytes).
#[derive(Debug)]
struct Chunk {
    descriptor: Descriptor,
    text: bool,
    pages: Vec<CompressedPage>,
    dictionary: Vec<u8>,
    entries: usize,
}

/// A text column's dictionary index over one row group: each distinct value is formatted once, and a row
/// costs one hash lookup (none when it repeats the previous row's value, as taps and kinds mostly do).
#[derive(Debug)]
struct Dict<K> {
    index: FxHashMap<K, u32>,
    last: Option<(K, u32)>,
}

impl<K> Default for Dict<K> {
    fn default() -> Self {
        Dict {
            index: FxHashMap::default(),
            last: None,
        }
    }
}

impl<K: Hash + Eq + Copy> Dict<K> {
    fn key(&mut self, k: K, text: &impl Fn(&K) -> String, chunk: &mut Chunk) -> u32 {
        if let Some((last, i)) = self.last
            && last == k
        {
            return i;
        }
        let i = match self.index.entry(k) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(e) => {
                let s = text(&k);
                chunk
                    .dictionary
                    .extend_from_slice(&(s.len() as u32).to_le_bytes());
                chunk.dictionary.extend_from_slice(s.as_bytes());
                let i = chunk.entries as u32;
                chunk.entries += 1;
                *e.insert(i)
            }
        };
        self.last = Some((k, i));
        i
    }

    fn clear(&mut self) {
        self.index.clear();
        self.last = None;
    }
}

/// Buffers reused from page to page.
#[derive(Debug, Default)]
struct Scratch {
    valid: Vec<u8>,
    ints: Vec<i64>,
    keys: Vec<u32>,
    bits: Vec<u8>,
    sparse: Vec<i64>,
    packed: Vec<u8>,
}

/// Encodes one page of each column in turn, in [`COLUMNS`] order.
struct Pager<'a> {
    chunks: &'a mut [Chunk],
    scratch: &'a mut Scratch,
    at: usize,
    n: usize,
    /// Encoded bytes before compression, which size the row group.
    bytes: usize,
    /// The first page that could not be compressed: reported once the page's columns are done.
    failed: Option<ParquetError>,
}

/// A page compressed with Snappy, Spark's default codec: the encodings leave runs and repeats (per-flow
/// patterns in PSNs, ports and times) that it shrinks about fivefold for a tenth of the writer's CPU time.
/// `work` is reused from page to page: the compressor zero-fills room for the worst case before it
/// writes, and the page keeps only a copy of what it wrote, so the held row group is its compressed size.
fn snappy(page: &[u8], work: &mut Vec<u8>) -> Result<Vec<u8>, ParquetError> {
    work.clear();
    compress(CompressionOptions::Snappy, page, work)?;
    Ok(work.clone())
}

impl Pager<'_> {
    fn next_chunk(&mut self, want: &[Type]) -> usize {
        let at = self.at;
        debug_assert!(
            want.contains(&COLUMNS[at].1),
            "column {} encoded as {want:?}",
            COLUMNS[at].0
        );
        self.at += 1;
        at
    }

    fn page(&mut self, at: usize, buf: Vec<u8>, encoding: FormatEncoding) {
        let header = DataPageHeader::V1(DataPageHeaderV1 {
            num_values: self.n as i32,
            encoding,
            definition_level_encoding: FormatEncoding::RLE,
            repetition_level_encoding: FormatEncoding::RLE,
            statistics: None,
        });
        let len = buf.len();
        self.bytes += len;
        let packed = match snappy(&buf, &mut self.scratch.packed) {
            Ok(packed) => packed,
            Err(e) => {
                self.failed.get_or_insert(e);
                return;
            }
        };
        let chunk = &mut self.chunks[at];
        chunk
            .pages
            .push(CompressedPage::Data(CompressedDataPage::new(
                header,
                CowBuffer::Owned(packed),
                Compression::Snappy,
                len,
                chunk.descriptor.clone(),
                self.n,
            )));
    }

    /// An integer column, DELTA_BINARY_PACKED: a monotonic counter or a field that rarely changes costs
    /// next to nothing, a random one (a PSN across interleaved flows) its width in bits. `get` picks the
    /// column's value out of a row's buffer entry.
    fn int<T>(&mut self, v: &[T], get: impl Fn(&T) -> Option<i64>) {
        let at = self.next_chunk(&[Type::Int32, Type::Int64, Type::UInt64]);
        let s = &mut *self.scratch;
        let present = gather(&mut s.valid, &mut s.ints, v, get);
        let values = &s.ints[..present];
        let mut buf = Vec::with_capacity(64 + present * 2);
        def_levels(&mut buf, &s.valid, self.n);
        delta_binary_packed(&mut buf, values, COLUMNS[at].1 == Type::Int32);
        self.page(at, buf, FormatEncoding::DELTA_BINARY_PACKED);
    }

    /// An integer column of a sparse header that not all of its rows fill (a PFC field on a PAUSE
    /// frame's row is null): only the rows that hold the header are looked at.
    fn sparse_int<T>(&mut self, v: &Sparse<T>, get: impl Fn(&T) -> Option<i64>) {
        let at = self.next_chunk(&[Type::Int32, Type::Int64, Type::UInt64]);
        let s = &mut *self.scratch;
        s.valid.clear();
        s.valid.resize(self.n.div_ceil(8), 0);
        s.sparse.clear();
        for (&i, x) in v.rows.iter().zip(&v.values) {
            if let Some(v) = get(x) {
                s.valid[i as usize >> 3] |= 1 << (i & 7);
                s.sparse.push(v);
            }
        }
        let mut buf = Vec::with_capacity(64 + s.sparse.len() * 2);
        def_levels(&mut buf, &s.valid, self.n);
        delta_binary_packed(&mut buf, &s.sparse, COLUMNS[at].1 == Type::Int32);
        self.page(at, buf, FormatEncoding::DELTA_BINARY_PACKED);
    }

    /// A boolean column, PLAIN: the present values one bit each.
    fn boolean<T>(&mut self, v: &[T], get: impl Fn(&T) -> Option<bool>) {
        let at = self.next_chunk(&[Type::Bool]);
        let s = &mut *self.scratch;
        let present = gather(&mut s.valid, &mut s.bits, v, |x| get(x).map(u8::from));
        let mut buf = Vec::with_capacity(16 + s.valid.len() + present / 8);
        def_levels(&mut buf, &s.valid, self.n);
        buf.extend(s.bits[..present].chunks(8).map(|bits| {
            bits.iter()
                .enumerate()
                .fold(0u8, |byte, (j, &b)| byte | (b << j))
        }));
        self.page(at, buf, FormatEncoding::PLAIN);
    }

    /// A text column, RLE_DICTIONARY: each row's index into the chunk's dictionary, at the fewest bits the
    /// dictionary so far needs, runs of one value as runs. `get` picks the value's key (an address, a tap
    /// index), `text` spells a key the first time the row group meets it.
    fn text<T, K: Hash + Eq + Copy>(
        &mut self,
        dict: &mut Dict<K>,
        v: &[T],
        get: impl Fn(&T) -> Option<K>,
        text: impl Fn(&K) -> String,
    ) -> std::io::Result<()> {
        let at = self.next_chunk(&[Type::Text]);
        let s = &mut *self.scratch;
        let chunk = &mut self.chunks[at];
        let present = gather(&mut s.valid, &mut s.keys, v, |x| {
            get(x).map(|k| dict.key(k, &text, chunk))
        });
        let mut buf = Vec::with_capacity(64 + present / 2);
        def_levels(&mut buf, &s.valid, self.n);
        self.dict_page(at, buf, present)
    }

    /// A text column of a gathered header, as [`Pager::text`] makes one.
    fn text_of<T, K: Hash + Eq + Copy>(
        &mut self,
        dict: &mut Dict<K>,
        g: &Gathered<T>,
        get: impl Fn(&T) -> K,
        text: impl Fn(&K) -> String,
    ) -> std::io::Result<()> {
        let at = self.next_chunk(&[Type::Text]);
        let s = &mut *self.scratch;
        let chunk = &mut self.chunks[at];
        s.keys.clear();
        s.keys
            .extend(g.values.iter().map(|x| dict.key(get(x), &text, chunk)));
        let mut buf = Vec::with_capacity(64 + g.levels.len() + g.values.len() / 2);
        buf.extend_from_slice(&g.levels);
        self.dict_page(at, buf, g.values.len())
    }

    /// Ends a dictionary column's page (`buf` holds its definition levels) with the first `present` keys
    /// of the scratch.
    fn dict_page(&mut self, at: usize, mut buf: Vec<u8>, present: usize) -> std::io::Result<()> {
        let entries = self.chunks[at].entries;
        let width = (usize::BITS - entries.saturating_sub(1).leading_zeros()).max(1);
        buf.push(width as u8);
        hybrid_rle::encode::<u32, _, _>(
            &mut buf,
            self.scratch.keys[..present].iter().copied(),
            width,
        )?;
        self.page(at, buf, FormatEncoding::RLE_DICTIONARY);
        Ok(())
    }

    /// An integer column of a gathered header, as [`Pager::int`] makes one.
    fn int_of<T>(&mut self, g: &Gathered<T>, get: impl Fn(&T) -> i64) {
        let at = self.next_chunk(&[Type::Int32, Type::Int64, Type::UInt64]);
        let s = &mut *self.scratch;
        s.ints.clear();
        s.ints.extend(g.values.iter().map(get));
        let mut buf = Vec::with_capacity(64 + g.levels.len() + g.values.len() * 2);
        buf.extend_from_slice(&g.levels);
        delta_binary_packed(&mut buf, &s.ints, COLUMNS[at].1 == Type::Int32);
        self.page(at, buf, FormatEncoding::DELTA_BINARY_PACKED);
    }

    /// A boolean column of a gathered header, as [`Pager::boolean`] makes one.
    fn boolean_of<T>(&mut self, g: &Gathered<T>, get: impl Fn(&T) -> bool) {
        let at = self.next_chunk(&[Type::Bool]);
        let mut buf = Vec::with_capacity(16 + g.levels.len() + g.values.len() / 8);
        buf.extend_from_slice(&g.levels);
        buf.extend(g.values.chunks(8).map(|values| {
            values
                .iter()
                .enumerate()
                .fold(0u8, |byte, (j, x)| byte | u8::from(get(x)) << j)
        }));
        self.page(at, buf, FormatEncoding::PLAIN);
    }
}

/// Splits a page's rows into the validity bitmap (`valid`, LSB first) and the present values (the first
/// of `out`, whose count it returns), as Parquet stores an optional column. Branch-free: every value is
/// stored and the write position moves on only past present ones, so a column that mixes present and
/// absent rows costs no mispredictions. Both buffers are overwritten, never cleared first.
fn gather<T, U: Copy + Default>(
    valid: &mut Vec<u8>,
    out: &mut Vec<U>,
    v: &[T],
    mut get: impl FnMut(&T) -> Option<U>,
) -> usize {
    valid.resize(v.len().div_ceil(8), 0);
    if out.len() < v.len() {
        out.resize(v.len(), U::default());
    }
    let mut present = 0;
    for (byte, rows) in valid.iter_mut().zip(v.chunks(8)) {
        let mut bits = 0u8;
        for (j, x) in rows.iter().enumerate() {
            let g = get(x);
            out[present] = g.unwrap_or_default();
            present += usize::from(g.is_some());
            bits |= u8::from(g.is_some()) << j;
        }
        *byte = bits;
    }
    present
}

/// The present values of a header that several columns come from (the BTH's eleven, the IP layer's
/// five), split out once with their definition levels: each column is then a plain map over the values,
/// and the levels are copied rather than worked out again per column.
#[derive(Debug)]
struct Gathered<T> {
    levels: Vec<u8>,
    values: Vec<T>,
}

impl<T> Default for Gathered<T> {
    fn default() -> Self {
        Gathered {
            levels: Vec::new(),
            values: Vec::new(),
        }
    }
}

impl<T: Copy> Gathered<T> {
    /// Takes the values of a sparse header over a page of `n` rows; `valid` is scratch for the bitmap.
    fn of_sparse(&mut self, v: &Sparse<T>, n: usize, valid: &mut Vec<u8>) {
        valid.clear();
        valid.resize(n.div_ceil(8), 0);
        for &i in &v.rows {
            valid[i as usize >> 3] |= 1 << (i & 7);
        }
        self.values.clear();
        self.values.extend_from_slice(&v.values);
        self.levels.clear();
        def_levels(&mut self.levels, valid, n);
    }

    /// Takes the present entries of `v`; `valid` is scratch for the bitmap.
    fn of(&mut self, v: &[Option<T>], valid: &mut Vec<u8>) {
        valid.clear();
        valid.extend(v.chunks(8).map(|rows| {
            rows.iter()
                .enumerate()
                .fold(0u8, |bits, (j, x)| bits | u8::from(x.is_some()) << j)
        }));
        self.values.clear();
        self.values.extend(v.iter().flatten().copied());
        self.levels.clear();
        def_levels(&mut self.levels, valid, v.len());
    }
}

/// The file being filled, under its temporary name until it is closed.
struct Part {
    writer: FileWriter<BufWriter<File>>,
    temp: PathBuf,
    path: PathBuf,
    groups: usize,
}

impl std::fmt::Debug for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Part")
            .field("path", &self.path)
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

/// Sizes of the dataset's row groups and files.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Rows at most per row group, when a reader wants smaller groups than the byte size gives (tests, or
    /// a collector short of memory: the encoded group is held until it is written).
    pub group_rows: Option<usize>,
    /// Encoded bytes (before compression) at which a row group is closed.
    pub group_bytes: usize,
    /// Row groups per part file, which sizes the files for object stores and Spark.
    pub groups_per_file: usize,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            group_rows: None,
            group_bytes: DEFAULT_GROUP_BYTES,
            groups_per_file: DEFAULT_GROUPS_PER_FILE,
        }
    }
}

/// What the decoding thread hands the encoding thread.
enum Message {
    /// A page's worth of rows; the names of taps that appeared since the last batch; whether the row
    /// group ends with these rows (its row limit reached).
    Rows {
        rows: Box<Rows>,
        new_taps: Vec<String>,
        end_group: bool,
    },
    /// The capture is over: write what is left and close the last file.
    Finish,
}

/// The headers gathered once per page for the columns that share them.
#[derive(Debug, Default)]
struct Sources {
    ip: Gathered<IpInfo>,
    bth: Gathered<BthRepr>,
    aeth: Gathered<AethRepr>,
    reth: Gathered<RethRepr>,
}

/// The encoding thread's state: the row group being gathered and the file it goes to.
#[derive(Debug)]
struct Encoder {
    dir: PathBuf,
    layout: Layout,
    schema: SchemaDescriptor,
    chunks: Vec<Chunk>,
    scratch: Scratch,
    taps: Vec<String>,
    tap: Dict<u32>,
    kind: Dict<Kind>,
    src_mac: Dict<[u8; 6]>,
    dst_mac: Dict<[u8; 6]>,
    src: Dict<IpAddr>,
    dst: Dict<IpAddr>,
    gathered: Sources,
    rows: usize,
    bytes: usize,
    part: Option<Part>,
    parts: usize,
    frames: u64,
}

impl Encoder {
    fn new(dir: PathBuf, layout: Layout) -> Result<Self, DatasetError> {
        let schema = schema().map_err(parquet_error(&dir))?;
        let chunks = schema
            .columns()
            .iter()
            .zip(COLUMNS)
            .map(|(c, (_, t))| Chunk {
                descriptor: c.descriptor.clone(),
                text: *t == Type::Text,
                pages: Vec::new(),
                dictionary: Vec::new(),
                entries: 0,
            })
            .collect();
        Ok(Encoder {
            dir,
            layout,
            schema,
            chunks,
            scratch: Scratch::default(),
            taps: Vec::new(),
            tap: Dict::default(),
            kind: Dict::default(),
            src_mac: Dict::default(),
            dst_mac: Dict::default(),
            src: Dict::default(),
            dst: Dict::default(),
            gathered: Sources::default(),
            rows: 0,
            bytes: 0,
            part: None,
            parts: 0,
            frames: 0,
        })
    }

    fn run(
        mut self,
        from: Receiver<Message>,
        back: std::sync::mpsc::Sender<Box<Rows>>,
    ) -> Result<u64, DatasetError> {
        while let Ok(message) = from.recv() {
            match message {
                Message::Rows {
                    mut rows,
                    new_taps,
                    end_group,
                } => {
                    self.taps.extend(new_taps);
                    self.encode(&rows).map_err(parquet_error(&self.dir))?;
                    if end_group || self.group_full() {
                        self.close_group()?;
                    }
                    rows.clear();
                    // The decoding side reuses the buffers; gone, it no longer needs them.
                    let _ = back.send(rows);
                }
                Message::Finish => return self.finish(),
            }
        }
        // The decoding side stopped without finishing (its input failed): the file in progress keeps its
        // temporary name, so no reader takes it for a whole one.
        Ok(self.frames)
    }

    fn group_full(&self) -> bool {
        self.bytes >= self.layout.group_bytes
            || self.layout.group_rows.is_some_and(|n| self.rows >= n)
            || self.chunks.iter().any(|c| c.entries >= DICT_MAX)
    }

    /// One page of every column from `r`.
    fn encode(&mut self, r: &Rows) -> Result<(), ParquetError> {
        let n = r.len();
        let mut p = Pager {
            chunks: &mut self.chunks,
            scratch: &mut self.scratch,
            at: 0,
            n,
            bytes: 0,
            failed: None,
        };
        p.int(&r.frame, |_| Some(SCHEMA_VERSION.into()));
        p.int(&r.frame, |&v| Some(v));
        p.int(&r.time_ns, |&v| Some(v));
        let taps = &self.taps;
        p.text(
            &mut self.tap,
            &r.iface,
            |&i| ((i as usize) < taps.len()).then_some(i),
            |&i| taps[i as usize].clone(),
        )?;
        p.text(
            &mut self.kind,
            &r.kind,
            |&k| Some(k),
            |k| k.as_str().to_string(),
        )?;
        p.int(&r.len, |&v| Some(v.into()));
        p.int(&r.caplen, |&v| Some(v.into()));
        p.text(&mut self.src_mac, &r.src_mac, |&m| m, mac_to_string)?;
        p.text(&mut self.dst_mac, &r.dst_mac, |&m| m, mac_to_string)?;
        p.int(&r.vlan, |v| v.map(i64::from));
        p.int(&r.pcp, |v| v.map(i64::from));
        p.int(&r.inner_vlan, |v| v.map(i64::from));
        let g = &mut self.gathered;
        g.ip.of(&r.ip, &mut p.scratch.valid);
        g.bth.of(&r.bth, &mut p.scratch.valid);
        g.aeth.of_sparse(&r.aeth, n, &mut p.scratch.valid);
        g.reth.of_sparse(&r.reth, n, &mut p.scratch.valid);
        p.text_of(&mut self.src, &g.ip, |i| i.src, IpAddr::to_string)?;
        p.text_of(&mut self.dst, &g.ip, |i| i.dst, IpAddr::to_string)?;
        p.int_of(&g.ip, |i| i.dscp.into());
        p.int_of(&g.ip, |i| i.ecn.into());
        p.int_of(&g.ip, |i| (i.len as i32).into());
        p.int(&r.roce_version, |v| v.map(i64::from));
        p.int(&r.sport, |v| v.map(i64::from));
        p.int_of(&g.bth, |b| b.opcode.0.into());
        p.int_of(&g.bth, |b| (b.dest_qp as i32).into());
        p.int_of(&g.bth, |b| (b.psn as i32).into());
        p.boolean_of(&g.bth, |b| b.se);
        p.boolean_of(&g.bth, |b| b.migreq);
        p.int_of(&g.bth, |b| b.pad_count.into());
        p.int_of(&g.bth, |b| b.tver.into());
        p.int_of(&g.bth, |b| b.pkey.into());
        p.boolean_of(&g.bth, |b| b.fecn);
        p.boolean_of(&g.bth, |b| b.becn);
        p.boolean_of(&g.bth, |b| b.ack_req);
        p.int(&r.payload_len, |v| v.map(i64::from));
        p.boolean(&r.icrc_ok, |&v| v);
        p.int_of(&g.aeth, |a| a.syndrome.into());
        p.int_of(&g.aeth, |a| (a.msn as i32).into());
        // The full 64 bits, as Parquet stores an unsigned 64-bit integer.
        p.int_of(&g.reth, |x| x.va as i64);
        p.int_of(&g.reth, |x| x.rkey.into());
        p.int_of(&g.reth, |x| x.dma_len.into());
        p.sparse_int(&r.deth_src_qp, |&q| Some((q as i32).into()));
        let pfc = |m: &MacControlRepr| match *m {
            MacControlRepr::Pfc(p) => Some(p),
            _ => None,
        };
        p.sparse_int(&r.mac_control, |m| pfc(m).map(|p| p.enable.into()));
        for prio in 0..8 {
            p.sparse_int(&r.mac_control, |m| pfc(m).map(|p| p.quanta[prio].into()));
        }
        p.sparse_int(&r.mac_control, |m| match *m {
            MacControlRepr::Pause { quanta } => Some(quanta.into()),
            _ => None,
        });
        debug_assert_eq!(p.at, COLUMNS.len());
        if let Some(e) = p.failed.take() {
            return Err(e);
        }
        self.bytes += p.bytes;
        self.rows += n;
        Ok(())
    }

    /// Writes the gathered pages as one row group: each text column's dictionary page first, as the format
    /// wants it, then the data pages in order.
    fn close_group(&mut self) -> Result<(), DatasetError> {
        if self.rows == 0 {
            return Ok(());
        }
        let columns: Vec<Vec<CompressedPage>> = self
            .chunks
            .iter_mut()
            .map(|c| {
                let mut pages = Vec::with_capacity(c.pages.len() + 1);
                if c.text {
                    let dictionary = std::mem::take(&mut c.dictionary);
                    pages.push(snappy(&dictionary, &mut self.scratch.packed).map(|packed| {
                        CompressedPage::Dict(CompressedDictPage::new(
                            CowBuffer::Owned(packed),
                            Compression::Snappy,
                            dictionary.len(),
                            c.entries,
                            false,
                        ))
                    }));
                    c.entries = 0;
                }
                pages.extend(c.pages.drain(..).map(Ok));
                pages.into_iter().collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<_, _>>()
            .map_err(parquet_error(&self.dir))?;
        for d in [&mut self.src_mac, &mut self.dst_mac] {
            d.clear();
        }
        for d in [&mut self.src, &mut self.dst] {
            d.clear();
        }
        self.tap.clear();
        self.kind.clear();
        let rows = std::mem::take(&mut self.rows);
        self.bytes = 0;
        self.frames += rows as u64;
        let part = self.part()?;
        let group = DynIter::new(columns.iter().map(|pages| {
            Ok(DynStreamingIterator::new(
                fallible_streaming_iterator::convert(pages.iter().map(Ok::<_, ParquetError>)),
            ))
        }));
        part.writer
            .write(rows as u64, group)
            .map_err(parquet_error(&part.temp))?;
        part.groups += 1;
        if part.groups >= self.layout.groups_per_file {
            self.close_part()?;
        }
        Ok(())
    }

    /// The file being filled, opened when the first group of it is written.
    fn part(&mut self) -> Result<&mut Part, DatasetError> {
        // Taken and put back: returning a borrow of the open part from inside `if let` would keep
        // `self.part` borrowed on the path that opens a new one.
        if let Some(part) = self.part.take() {
            return Ok(self.part.insert(part));
        }
        let name = format!("part-{:05}.parquet", self.parts);
        self.parts += 1;
        let path = self.dir.join(&name);
        let temp = self.dir.join(format!(".{name}.inprogress"));
        let file = File::create(&temp).map_err(io_error(&temp))?;
        let writer = FileWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            self.schema.clone(),
            WriteOptions {
                write_statistics: false,
                version: Version::V1,
            },
            Some(format!("rocetrace {}", env!("CARGO_PKG_VERSION"))),
        );
        Ok(self.part.insert(Part {
            writer,
            temp,
            path,
            groups: 0,
        }))
    }

    fn close_part(&mut self) -> Result<(), DatasetError> {
        let Some(mut part) = self.part.take() else {
            return Ok(());
        };
        part.writer
            .end(Some(vec![KeyValue {
                key: SCHEMA_VERSION_KEY.to_string(),
                value: Some(SCHEMA_VERSION.to_string()),
            }]))
            .map_err(parquet_error(&part.temp))?;
        let mut file = part.writer.into_inner();
        std::io::Write::flush(&mut file).map_err(io_error(&part.temp))?;
        drop(file);
        std::fs::rename(&part.temp, &part.path).map_err(io_error(&part.path))
    }

    /// Writes what is left and closes the last file. An empty capture still leaves one file, with the
    /// schema and no rows, so a reader of the directory finds the columns.
    fn finish(mut self) -> Result<u64, DatasetError> {
        self.close_group()?;
        if self.parts == 0 {
            self.part()?;
        }
        self.close_part()?;
        Ok(self.frames)
    }
}

/// Writes the frames of one capture as `part-NNNNN.parquet` files into a directory, encoding on a second
/// thread.
#[derive(Debug)]
pub struct DatasetWriter {
    dir: PathBuf,
    rows: Box<Rows>,
    batch: usize,
    group_rows: usize,
    in_group: usize,
    taps_sent: usize,
    to_encoder: Option<SyncSender<Message>>,
    recycled: Receiver<Box<Rows>>,
    encoder: Option<JoinHandle<Result<u64, DatasetError>>>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Message::Rows { rows, .. } => write!(f, "Rows({})", rows.len()),
            Message::Finish => write!(f, "Finish"),
        }
    }
}

impl DatasetWriter {
    /// Creates `dir` (and its parents); refuses a directory that already holds part files.
    pub fn create(dir: &Path, layout: Layout) -> Result<Self, DatasetError> {
        tables::create_dir(dir)?;
        for entry in std::fs::read_dir(dir).map_err(io_error(dir))? {
            let name = entry.map_err(io_error(dir))?.file_name();
            if name.to_string_lossy().starts_with("part-") {
                return Err(DatasetError::NotEmpty {
                    path: dir.to_path_buf(),
                });
            }
        }
        let layout = Layout {
            group_rows: layout.group_rows.map(|n| n.max(1)),
            group_bytes: layout.group_bytes.max(1),
            groups_per_file: layout.groups_per_file.max(1),
        };
        let group_rows = layout.group_rows.unwrap_or(usize::MAX);
        let batch = PAGE_ROWS.min(group_rows);
        let encoder = Encoder::new(dir.to_path_buf(), layout)?;
        // One batch queued while one is encoded and one filled: the decoding thread waits rather than
        // letting buffers pile up when encoding is the slower side.
        let (to_encoder, from_decoder) = sync_channel(1);
        let (back, recycled) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("parquet-encoder".into())
            .spawn(move || encoder.run(from_decoder, back))
            .map_err(io_error(dir))?;
        Ok(DatasetWriter {
            dir: dir.to_path_buf(),
            rows: Box::new(Rows::with_capacity(batch)),
            batch,
            group_rows,
            in_group: 0,
            taps_sent: 0,
            to_encoder: Some(to_encoder),
            recycled,
            encoder: Some(handle),
        })
    }

    /// Adds a frame; returns true when a batch is full and [`DatasetWriter::flush`] is due (the frame
    /// borrows the capture that `flush` reads tap names from, so the caller calls it once the frame is gone).
    #[inline]
    pub fn push(&mut self, f: &Frame<'_>) -> bool {
        self.rows.push(f);
        let n = self.rows.len();
        n >= self.batch || self.in_group + n >= self.group_rows
    }

    /// Hands the buffered rows to the encoding thread, naming taps as `capture` does.
    pub fn flush(&mut self, capture: &Capture) -> Result<(), DatasetError> {
        if self.rows.len() == 0 {
            return Ok(());
        }
        self.in_group += self.rows.len();
        let end_group = self.in_group >= self.group_rows;
        if end_group {
            self.in_group = 0;
        }
        let taps = capture.taps();
        let new_taps = taps
            .get(self.taps_sent..)
            .unwrap_or_default()
            .iter()
            .map(|t| t.name.clone())
            .collect();
        self.taps_sent = self.taps_sent.max(taps.len());
        let fresh = self
            .recycled
            .try_recv()
            .unwrap_or_else(|_| Box::new(Rows::with_capacity(self.batch)));
        let rows = std::mem::replace(&mut self.rows, fresh);
        self.send(Message::Rows {
            rows,
            new_taps,
            end_group,
        })
    }

    fn send(&mut self, message: Message) -> Result<(), DatasetError> {
        let sent = self
            .to_encoder
            .as_ref()
            .is_some_and(|tx| tx.send(message).is_ok());
        if sent {
            return Ok(());
        }
        // The encoding thread stopped: its error says why.
        match self.join() {
            Err(e) => Err(e),
            Ok(_) => Err(DatasetError::Encoder {
                path: self.dir.clone(),
            }),
        }
    }

    fn join(&mut self) -> Result<u64, DatasetError> {
        self.to_encoder = None;
        match self.encoder.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            _ => Err(DatasetError::Encoder {
                path: self.dir.clone(),
            }),
        }
    }

    /// Writes what is left, closes the last file and returns the frames written.
    pub fn finish(mut self, capture: &Capture) -> Result<u64, DatasetError> {
        self.flush(capture)?;
        self.send(Message::Finish)?;
        self.join()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes a hybrid run sequence of one-bit values back into bools, as a reader would.
    fn read_levels(bytes: &[u8], n: usize) -> Vec<bool> {
        let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        assert_eq!(len, bytes.len() - 4, "length prefix");
        let mut data = &bytes[4..];
        let mut out = Vec::new();
        while out.len() < n {
            let (mut header, mut shift) = (0u64, 0);
            loop {
                let b = data[0];
                data = &data[1..];
                header |= u64::from(b & 0x7f) << shift;
                shift += 7;
                if b & 0x80 == 0 {
                    break;
                }
            }
            if header & 1 == 1 {
                let groups = (header >> 1) as usize;
                for byte in &data[..groups] {
                    out.extend((0..8).map(|i| byte >> i & 1 == 1));
                }
                data = &data[groups..];
            } else {
                let count = (header >> 1) as usize;
                out.extend(std::iter::repeat_n(data[0] == 1, count));
                data = &data[1..];
            }
        }
        assert!(data.is_empty(), "trailing bytes");
        out.truncate(n);
        out
    }

    fn uleb(b: &mut &[u8]) -> u64 {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let byte = b[0];
            *b = &b[1..];
            v |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                return v;
            }
        }
    }

    fn unzigzag(v: u64) -> i64 {
        (v >> 1) as i64 ^ -((v & 1) as i64)
    }

    /// Decodes DELTA_BINARY_PACKED as the format describes it (a reader's view, written apart from the
    /// encoder), in 32-bit arithmetic for an INT32 column.
    fn read_delta(mut b: &[u8], int32: bool) -> Vec<i64> {
        let block = uleb(&mut b) as usize;
        let minis = uleb(&mut b) as usize;
        let total = uleb(&mut b) as usize;
        let mut value = unzigzag(uleb(&mut b));
        let mut out = Vec::new();
        if total == 0 {
            assert!(b.is_empty());
            return out;
        }
        out.push(value);
        let per_mini = block / minis;
        while out.len() < total {
            let min = unzigzag(uleb(&mut b));
            let widths = b[..minis].to_vec();
            b = &b[minis..];
            for &w in &widths {
                if out.len() == total {
                    break;
                }
                let w = usize::from(w);
                let body = &b[..per_mini * w / 8];
                b = &b[per_mini * w / 8..];
                for i in 0..per_mini {
                    let mut v = 0u64;
                    for bit in 0..w {
                        let at = i * w + bit;
                        v |= u64::from(body[at / 8] >> (at % 8) & 1) << bit;
                    }
                    if out.len() < total {
                        value = if int32 {
                            i64::from(
                                (value as i32)
                                    .wrapping_add(min as i32)
                                    .wrapping_add(v as i32),
                            )
                        } else {
                            value.wrapping_add(min).wrapping_add(v as i64)
                        };
                        out.push(value);
                    }
                }
            }
        }
        assert!(b.is_empty(), "trailing bytes");
        out
    }

    #[test]
    fn delta_binary_packed_round_trip() {
        let mut cases: Vec<(Vec<i64>, bool)> = vec![
            (vec![], false),
            (vec![7], true),
            ((0..1000).collect(), false),
            (vec![5; 300], true),
            (
                (0..129)
                    .map(|i| if i % 2 == 0 { 64 } else { 1082 })
                    .collect(),
                true,
            ),
            (
                vec![i64::MIN, i64::MAX, 0, -1, u64::MAX as i64, 1 << 63],
                false,
            ),
            (
                vec![
                    i64::from(i32::MIN),
                    i64::from(i32::MAX),
                    0,
                    -5,
                    i64::from(i32::MIN),
                ],
                true,
            ),
        ];
        // A PSN-like sequence across interleaved flows: large jumps both ways.
        let mut x = 12345u64;
        let noisy: Vec<i64> = (0..777)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 40) as i64
            })
            .collect();
        cases.push((noisy.iter().map(|v| v & 0xff_ffff).collect(), true));
        cases.push((noisy, false));
        for (values, int32) in cases {
            let mut out = Vec::new();
            delta_binary_packed(&mut out, &values, int32);
            assert_eq!(read_delta(&out, int32), values, "int32 {int32}");
        }
    }

    #[test]
    fn definition_levels_round_trip() {
        let patterns: Vec<Vec<bool>> = vec![
            vec![],
            vec![true; 5],
            vec![false; 70],
            (0..70).map(|i| i != 33).collect(),
            (0..200).map(|i| i % 3 == 0).collect(),
            (0..131).map(|i| !(40..100).contains(&i)).collect(),
            (0..1000).map(|i| i < 500 || i % 7 == 0).collect(),
            (0..23).map(|i| i >= 16).collect(),
        ];
        for want in patterns {
            let n = want.len();
            let mut valid = vec![0u8; n.div_ceil(8)];
            for (i, &v) in want.iter().enumerate() {
                if v {
                    valid[i >> 3] |= 1 << (i & 7);
                }
            }
            let mut out = Vec::new();
            def_levels(&mut out, &valid, n);
            assert_eq!(read_levels(&out, n), want, "{n} values");
        }
    }
}
