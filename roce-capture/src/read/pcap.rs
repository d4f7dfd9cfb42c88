//! Classic libpcap files: a 24-byte file header, then records with a 16-byte header each (24 in the old
//! "modified" format). One link type and one implicit interface per file.

use pcap_parser::parse_pcap_header;

use super::error::SourceErrorKind;
use super::{CaptureReader, Format, Found, IfStats, Interface, check_caplen, truncated, u32_at};
use super::{Clock, Scale, SourceError};
use crate::LinkType;

#[derive(Debug, Clone, Copy)]
pub(super) struct PcapLayout {
    pub(super) header_len: usize,
    pub(super) big_endian: bool,
    /// Nanoseconds per unit of the fractional timestamp field.
    pub(super) frac_ns: u64,
    /// The file header's snap length and link type, kept here for the per-record path.
    pub(super) snaplen: u32,
    pub(super) link: LinkType,
}

impl CaptureReader {
    pub(super) fn start_pcap(&mut self) -> Result<(), SourceError> {
        let Ok((_, header)) = parse_pcap_header(self.buf.data()) else {
            return Err(SourceError {
                path: self.label.clone(),
                offset: 0,
                kind: SourceErrorKind::Malformed {
                    what: "pcap file header",
                },
            });
        };
        let nanosecond = header.is_nanosecond_precision();
        let big_endian = header.is_bigendian();
        self.format = Format::Pcap {
            nanosecond,
            big_endian,
        };
        // The upper bits of the link-type field carry FCS information, not the link type.
        let link = LinkType((header.network.0 & 0xffff) as u16);
        self.pcap = PcapLayout {
            header_len: if header.is_modified_format() { 24 } else { 16 },
            big_endian,
            frac_ns: if nanosecond { 1 } else { 1000 },
            snaplen: header.snaplen,
            link,
        };
        self.interfaces.push(Interface {
            link,
            snaplen: header.snaplen,
            name: None,
            ts_resol_desc: if nanosecond { "ns" } else { "µs" }.to_owned(),
            speed_bps: None,
        });
        self.stats.push(IfStats::default());
        self.clocks.push(Clock {
            scale: Scale::Mul(self.pcap.frac_ns),
            offset_s: 0,
        });
        self.buf.consume(header.size());
        self.pos = header.size() as u64;
        Ok(())
    }

    /// The pcap record at `pos` on the slow path: refills as needed, and names what is wrong with a record
    /// that cannot be read.
    pub(super) fn step_pcap(&mut self) -> Result<Option<Found>, (u64, SourceErrorKind)> {
        let PcapLayout {
            header_len,
            big_endian,
            snaplen,
            ..
        } = self.pcap;
        loop {
            let data = self.buf.data();
            let avail = data.len();
            if avail < header_len {
                if self.buf.exhausted() {
                    if avail == 0 {
                        return Ok(None);
                    }
                    let kind = truncated("packet record header", header_len, avail);
                    return Err((self.pos, kind));
                }
                self.refill(header_len)?;
                continue;
            }
            let caplen = u32_at(data, 8, big_endian);
            let len = u32_at(data, 12, big_endian);
            check_caplen(caplen, len, snaplen).map_err(|k| (self.pos, k))?;
            let total = header_len + caplen as usize;
            if avail < total {
                if self.buf.exhausted() {
                    return Err((self.pos, truncated("packet record", total, avail)));
                }
                self.refill(total)?;
                continue;
            }
            // Every check above passed, so this finds the record; were it ever not to, saying so beats
            // ending the file there in silence.
            let malformed = SourceErrorKind::Malformed {
                what: "packet record",
            };
            return buffered_pcap_record(&self.pcap, data)
                .map(Some)
                .ok_or((self.pos, malformed));
        }
    }
}

/// The pcap record at the start of `data` when it is there whole and passes every check; `None` sends the
/// caller to [`CaptureReader::step_pcap`], which refills or reports what is wrong. Both paths read the record
/// here, so a record means the same whichever path found it.
#[inline]
pub(super) fn buffered_pcap_record(layout: &PcapLayout, data: &[u8]) -> Option<Found> {
    let PcapLayout {
        header_len,
        big_endian,
        frac_ns,
        snaplen,
        link,
    } = *layout;
    let header = data.get(..header_len)?;
    let caplen = u32_at(header, 8, big_endian);
    let len = u32_at(header, 12, big_endian);
    check_caplen(caplen, len, snaplen).ok()?;
    let total = header_len + caplen as usize;
    if data.len() < total {
        return None;
    }
    let ts_sec = u32_at(header, 0, big_endian);
    let ts_frac = u32_at(header, 4, big_endian);
    Some(Found {
        iface: 0,
        link,
        speed_bps: None,
        ts_ns: u64::from(ts_sec) * 1_000_000_000 + u64::from(ts_frac) * frac_ns,
        caplen,
        len,
        data_start: header_len,
        total,
        block: None,
    })
}
