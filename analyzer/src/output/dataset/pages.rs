//! Parquet pages: one page per column from each batch of rows, encoded and compressed as it arrives, and
//! held per column chunk (with a text column's dictionary) until the row group is written.

use std::collections::hash_map::Entry;
use std::hash::Hash;

use polars_parquet::parquet::CowBuffer;
use polars_parquet::parquet::compression::{Compression, CompressionOptions, compress};
use polars_parquet::parquet::encoding::hybrid_rle;
use polars_parquet::parquet::error::ParquetError;
use polars_parquet::parquet::metadata::Descriptor;
use polars_parquet::parquet::page::{
    CompressedDataPage, CompressedDictPage, CompressedPage, DataPageHeader, DataPageHeaderV1,
    FormatEncoding,
};
use rustc_hash::FxHashMap;

use super::encoding::{def_levels, delta_binary_packed};
use super::rows::Sparse;
use super::schema::{COLUMNS, Type};

/// One column chunk of the row group being gathered: its pages, already encoded, and for a text column the
/// dictionary its pages index into (PLAIN byte arrays: a 4-byte length, then the UTF-8 bytes).
#[derive(Debug)]
pub(super) struct Chunk {
    descriptor: Descriptor,
    text: bool,
    pages: Vec<CompressedPage>,
    dictionary: Vec<u8>,
    entries: usize,
}

impl Chunk {
    pub(super) fn new(descriptor: Descriptor, text: bool) -> Self {
        Chunk {
            descriptor,
            text,
            pages: Vec::new(),
            dictionary: Vec::new(),
            entries: 0,
        }
    }

    /// Distinct values in a text column's dictionary so far.
    pub(super) fn entries(&self) -> usize {
        self.entries
    }

    /// The chunk's pages for writing out its row group, a text column's dictionary page first, as the format
    /// wants it; the chunk is left empty for the next group.
    pub(super) fn take_pages(
        &mut self,
        scratch: &mut Scratch,
    ) -> Result<Vec<CompressedPage>, ParquetError> {
        let mut pages = Vec::with_capacity(self.pages.len() + 1);
        if self.text {
            let dictionary = std::mem::take(&mut self.dictionary);
            let packed = snappy(&dictionary, &mut scratch.packed)?;
            pages.push(CompressedPage::Dict(CompressedDictPage::new(
                CowBuffer::Owned(packed),
                Compression::Snappy,
                dictionary.len(),
                self.entries,
                false,
            )));
            self.entries = 0;
        }
        pages.append(&mut self.pages);
        Ok(pages)
    }
}

/// A text column's dictionary index over one row group: each distinct value is formatted once, and a row
/// costs one hash lookup (none when it repeats the previous row's value, as taps and kinds mostly do).
#[derive(Debug)]
pub(super) struct Dict<K> {
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

    pub(super) fn clear(&mut self) {
        self.index.clear();
        self.last = None;
    }
}

/// Buffers reused from page to page.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    valid: Vec<u8>,
    ints: Vec<i64>,
    keys: Vec<u32>,
    bits: Vec<u8>,
    sparse: Vec<i64>,
    packed: Vec<u8>,
}

/// Encodes one page of each column in turn, in [`COLUMNS`] order.
pub(super) struct Pager<'a> {
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

impl<'a> Pager<'a> {
    /// A pager over a batch of `n` rows, adding one page to each of `chunks`.
    pub(super) fn new(chunks: &'a mut [Chunk], scratch: &'a mut Scratch, n: usize) -> Self {
        Pager {
            chunks,
            scratch,
            at: 0,
            n,
            bytes: 0,
            failed: None,
        }
    }

    /// The encoded bytes (before compression) of the batch's pages, once every column has had its page, or
    /// the first page that could not be compressed.
    pub(super) fn finish(mut self) -> Result<usize, ParquetError> {
        debug_assert_eq!(self.at, COLUMNS.len());
        match self.failed.take() {
            Some(e) => Err(e),
            None => Ok(self.bytes),
        }
    }

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
    pub(super) fn int<T>(&mut self, v: &[T], get: impl Fn(&T) -> Option<i64>) {
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
    pub(super) fn sparse_int<T>(&mut self, v: &Sparse<T>, get: impl Fn(&T) -> Option<i64>) {
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
    pub(super) fn boolean<T>(&mut self, v: &[T], get: impl Fn(&T) -> Option<bool>) {
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
    pub(super) fn text<T, K: Hash + Eq + Copy>(
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
    pub(super) fn text_of<T, K: Hash + Eq + Copy>(
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
    pub(super) fn int_of<T>(&mut self, g: &Gathered<T>, get: impl Fn(&T) -> i64) {
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
    pub(super) fn boolean_of<T>(&mut self, g: &Gathered<T>, get: impl Fn(&T) -> bool) {
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
pub(super) struct Gathered<T> {
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
    pub(super) fn of_sparse(&mut self, v: &Sparse<T>, n: usize, valid: &mut Vec<u8>) {
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
    pub(super) fn of(&mut self, v: &[Option<T>], valid: &mut Vec<u8>) {
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
