//! The Parquet encodings the pages are written in, by hand rather than through polars' arrays: definition
//! levels as the RLE/bit-packed hybrid straight from a validity bitmap, integers as DELTA_BINARY_PACKED.
//! Each is the format's, byte for byte; the tests read them back as a reader would, from code written
//! apart from the encoder.

use polars_parquet::parquet::encoding::bitpacked;

pub(super) fn uleb128(out: &mut Vec<u8>, mut v: u64) {
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
pub(super) fn def_levels(out: &mut Vec<u8>, valid: &[u8], n: usize) {
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
pub(super) fn delta_binary_packed(out: &mut Vec<u8>, values: &[i64], int32: bool) {
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
