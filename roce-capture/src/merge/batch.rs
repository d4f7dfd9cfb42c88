//! Records taken out of a [`Capture`] many at a time and copied, so that threads other than the one reading
//! can decode them: the reading thread then does little more per record than find where it ends.

use super::Capture;
use crate::LinkType;
use crate::read::Record;

/// A record's facts and where its bytes sit in the batch.
#[derive(Debug, Clone, Copy)]
struct Meta {
    number: u64,
    ts_ns: u64,
    offset: u64,
    speed_bps: Option<u64>,
    start: usize,
    iface: u32,
    caplen: u32,
    len: u32,
    link: LinkType,
}

/// Consecutive records of a capture, owned: each as [`Capture::next_record`] gave it, with its number.
/// Cleared and filled again, it allocates nothing once it has grown to its size.
#[derive(Debug, Default)]
pub struct RecordBatch {
    data: Vec<u8>,
    meta: Vec<Meta>,
}

impl RecordBatch {
    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// The captured bytes it holds.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// Empties it, keeping its memory.
    pub fn clear(&mut self) {
        self.data.clear();
        self.meta.clear();
    }

    /// Record `i` (in capture order) with its number in the merged stream.
    #[inline]
    pub fn get(&self, i: usize) -> Option<(u64, Record<'_>)> {
        let m = self.meta.get(i)?;
        let data = self.data.get(m.start..m.start + m.caplen as usize)?;
        Some((
            m.number,
            Record {
                iface: m.iface,
                link: m.link,
                speed_bps: m.speed_bps,
                ts_ns: m.ts_ns,
                caplen: m.caplen,
                len: m.len,
                data,
                offset: m.offset,
            },
        ))
    }

    /// Every record in capture order, with its number.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Record<'_>)> {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Appends a copy of `rec`, numbered `number`.
    #[inline]
    pub fn push(&mut self, number: u64, rec: &Record<'_>) {
        self.meta.push(Meta {
            number,
            ts_ns: rec.ts_ns,
            offset: rec.offset,
            speed_bps: rec.speed_bps,
            start: self.data.len(),
            iface: rec.iface,
            caplen: rec.caplen,
            len: rec.len,
            link: rec.link,
        });
        self.data.extend_from_slice(rec.data);
    }
}

impl Capture {
    /// Appends the next records of the capture to `batch`, exactly as [`Capture::next_record`] gives them,
    /// until it holds `max_records` records or `max_bytes` captured bytes, or the capture ends. Returns
    /// whether it appended any: `false` once every file has ended.
    pub fn read_batch(
        &mut self,
        batch: &mut RecordBatch,
        max_records: usize,
        max_bytes: usize,
    ) -> bool {
        let before = batch.len();
        while batch.len() < max_records && batch.bytes() < max_bytes {
            match self.next_record() {
                Some((number, rec)) => batch.push(number, &rec),
                None => break,
            }
        }
        batch.len() > before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::PcapWriter;

    fn capture(records: u32) -> Capture {
        let mut w =
            PcapWriter::new(Vec::new(), crate::LinkType::ETHERNET, 65535).expect("a pcap header");
        for i in 0..records {
            let frame = vec![i as u8; 60 + (i % 7) as usize];
            w.write_packet(
                u64::from(i) * 1000 + 1_000_000_000,
                &frame,
                frame.len() as u32,
            )
            .expect("a record");
        }
        let bytes = w.into_inner().expect("the pcap bytes");
        Capture::from_reader("t.pcap", Box::new(std::io::Cursor::new(bytes))).expect("a capture")
    }

    #[test]
    fn batches_hold_what_next_record_gives() {
        let mut one = capture(5000);
        let mut expected = Vec::new();
        while let Some((n, r)) = one.next_record() {
            expected.push((n, r.ts_ns, r.offset, r.data.to_vec()));
        }
        let mut many = capture(5000);
        let mut got = Vec::new();
        let mut batch = RecordBatch::default();
        while many.read_batch(&mut batch, 333, 1 << 20) {
            assert!(batch.len() <= 333);
            got.extend(
                batch
                    .iter()
                    .map(|(n, r)| (n, r.ts_ns, r.offset, r.data.to_vec())),
            );
            batch.clear();
        }
        assert_eq!(got, expected);
    }
}
