//! Byte-range helpers shared by the views.
//!
//! Every view checks its length once in `new_checked`; these helpers then index within that length, which is why
//! they may index directly.

/// A byte range inside a header.
pub type Field = core::ops::Range<usize>;

pub(crate) fn get_u16(buf: &[u8], f: Field) -> u16 {
    u16::from_be_bytes([buf[f.start], buf[f.start + 1]])
}

pub(crate) fn get_u24(buf: &[u8], f: Field) -> u32 {
    u32::from_be_bytes([0, buf[f.start], buf[f.start + 1], buf[f.start + 2]])
}

pub(crate) fn get_u32(buf: &[u8], f: Field) -> u32 {
    u32::from_be_bytes([
        buf[f.start],
        buf[f.start + 1],
        buf[f.start + 2],
        buf[f.start + 3],
    ])
}

pub(crate) fn get_u64(buf: &[u8], f: Field) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[f.start..f.start + 8]);
    u64::from_be_bytes(b)
}

pub(crate) fn set_u16(buf: &mut [u8], f: Field, v: u16) {
    buf[f.start..f.start + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes the low 24 bits of `v`.
pub(crate) fn set_u24(buf: &mut [u8], f: Field, v: u32) {
    buf[f.start..f.start + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

pub(crate) fn set_u32(buf: &mut [u8], f: Field, v: u32) {
    buf[f.start..f.start + 4].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn set_u64(buf: &mut [u8], f: Field, v: u64) {
    buf[f.start..f.start + 8].copy_from_slice(&v.to_be_bytes());
}
