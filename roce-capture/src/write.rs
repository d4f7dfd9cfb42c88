//! Capture files out: small pcapng and pcap writers for the test-corpus generator, the simulator and the tracer.
//!
//! Hand-written rather than pcap-parser's serializer because the writers need exactly the blocks Wireshark reads
//! without complaint (nanosecond interfaces, statistics, custom blocks) and nothing else, and a wrong argument must
//! come back as an `io::Error` instead of a file that fails later in someone else's tool.
//!
//! Everything is written little-endian. Each block is assembled in a reused scratch buffer and written with one
//! `write_all`, so wrap files in a `BufWriter` and the cost per packet is a copy.

use std::io::{self, Write};

use crate::read::LinkType;

pub(crate) const SHB_TYPE: u32 = 0x0A0D_0D0A;
pub(crate) const IDB_TYPE: u32 = 0x0000_0001;
pub(crate) const ISB_TYPE: u32 = 0x0000_0005;
pub(crate) const EPB_TYPE: u32 = 0x0000_0006;
/// Custom block that a rewriting tool may copy into its output.
pub(crate) const CB_COPY_TYPE: u32 = 0x0000_0BAD;
/// Custom block that a rewriting tool must drop (its meaning may depend on blocks that did not survive).
pub(crate) const CB_NOCOPY_TYPE: u32 = 0x4000_0BAD;

pub(crate) const OPT_END: u16 = 0;
pub(crate) const OPT_COMMENT: u16 = 1;

/// The Section Header Block options: who wrote the capture, shown by `capinfos` and Wireshark.
#[derive(Debug, Clone, Default)]
pub struct SectionInfo {
    /// `shb_hardware`: the capturing machine's hardware.
    pub hardware: Option<String>,
    /// `shb_os`: the capturing machine's operating system.
    pub os: Option<String>,
    /// `shb_userappl`: the program that wrote the file.
    pub user_application: Option<String>,
    /// `opt_comment`: free text (a scenario name, a command line).
    pub comment: Option<String>,
}

impl SectionInfo {
    /// Only `shb_userappl` set, the usual case for our own tools.
    pub fn application(name: &str) -> Self {
        SectionInfo {
            user_application: Some(name.to_owned()),
            ..SectionInfo::default()
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct WrittenInterface {
    snaplen: u32,
}

/// Writes one pcapng section: interfaces (nanosecond resolution), packets, statistics and custom blocks.
#[derive(Debug)]
pub struct PcapngWriter<W: Write> {
    out: W,
    interfaces: Vec<WrittenInterface>,
    scratch: Vec<u8>,
}

impl<W: Write> PcapngWriter<W> {
    /// Writes the Section Header Block.
    pub fn new(out: W, shb_options: &SectionInfo) -> io::Result<Self> {
        let mut writer = PcapngWriter {
            out,
            interfaces: Vec::new(),
            scratch: Vec::with_capacity(2048),
        };
        let b = &mut writer.scratch;
        begin_block(b, SHB_TYPE);
        put_u32(b, 0x1A2B_3C4D);
        put_u16(b, 1);
        put_u16(b, 0);
        // Section length unknown: we stream, and readers must not rely on it.
        b.extend_from_slice(&(-1i64).to_le_bytes());
        let texts = [
            (2, &shb_options.hardware),
            (3, &shb_options.os),
            (4, &shb_options.user_application),
            (OPT_COMMENT, &shb_options.comment),
        ];
        let mut any = false;
        for (code, text) in texts {
            if let Some(text) = text {
                put_option(b, code, text.as_bytes())?;
                any = true;
            }
        }
        if any {
            put_option(b, OPT_END, &[])?;
        }
        writer.finish_block()?;
        Ok(writer)
    }

    /// Writes an Interface Description Block with nanosecond timestamps and returns its interface id.
    pub fn add_interface(
        &mut self,
        link: LinkType,
        snaplen: u32,
        name: Option<&str>,
        description: Option<&str>,
    ) -> io::Result<u32> {
        self.add_interface_with_speed(link, snaplen, name, description, None)
    }

    /// [`PcapngWriter::add_interface`] with the interface's line rate in bit/s as its `if_speed`, which the
    /// analyzer converts pause quanta and serialization times with, and Wireshark shows. `None` or 0 writes
    /// none: a speed nobody measured must not be made up.
    pub fn add_interface_with_speed(
        &mut self,
        link: LinkType,
        snaplen: u32,
        name: Option<&str>,
        description: Option<&str>,
        speed_bps: Option<u64>,
    ) -> io::Result<u32> {
        let id =
            u32::try_from(self.interfaces.len()).map_err(|_| invalid("too many interfaces"))?;
        let b = &mut self.scratch;
        begin_block(b, IDB_TYPE);
        put_u16(b, link.0);
        put_u16(b, 0);
        put_u32(b, snaplen);
        if let Some(name) = name {
            put_option(b, 2, name.as_bytes())?;
        }
        if let Some(description) = description {
            put_option(b, 3, description.as_bytes())?;
        }
        if let Some(bps) = speed_bps.filter(|&v| v > 0) {
            put_option(b, 8, &bps.to_le_bytes())?;
        }
        // if_tsresol = 9: DCQCN timing needs nanoseconds, and the default is microseconds.
        put_option(b, 9, &[9])?;
        put_option(b, OPT_END, &[])?;
        self.finish_block()?;
        self.interfaces.push(WrittenInterface { snaplen });
        Ok(id)
    }

    /// Writes an Enhanced Packet Block; `data` is what was captured, `orig_len` the length on the wire.
    pub fn write_packet(
        &mut self,
        iface: u32,
        ts_ns: u64,
        data: &[u8],
        orig_len: u32,
    ) -> io::Result<()> {
        self.write_epb(iface, ts_ns, data, orig_len, None)
    }

    /// Like [`PcapngWriter::write_packet`], with an `opt_comment` that Wireshark shows on the frame (the simulator
    /// labels the packets its scenario is about).
    pub fn write_packet_with_comment(
        &mut self,
        iface: u32,
        ts_ns: u64,
        data: &[u8],
        orig_len: u32,
        comment: &str,
    ) -> io::Result<()> {
        self.write_epb(iface, ts_ns, data, orig_len, Some(comment))
    }

    fn write_epb(
        &mut self,
        iface: u32,
        ts_ns: u64,
        data: &[u8],
        orig_len: u32,
        comment: Option<&str>,
    ) -> io::Result<()> {
        let snaplen = self.interface(iface)?.snaplen;
        let caplen = u32::try_from(data.len()).map_err(|_| invalid("packet longer than 4 GiB"))?;
        if caplen > orig_len {
            return Err(invalid("captured length above the original length"));
        }
        if snaplen > 0 && caplen > snaplen {
            return Err(invalid(
                "captured length above the interface's snapshot length",
            ));
        }
        let b = &mut self.scratch;
        begin_block(b, EPB_TYPE);
        put_u32(b, iface);
        put_ts(b, ts_ns);
        put_u32(b, caplen);
        put_u32(b, orig_len);
        b.extend_from_slice(data);
        pad4(b);
        if let Some(comment) = comment {
            put_option(b, OPT_COMMENT, comment.as_bytes())?;
            put_option(b, OPT_END, &[])?;
        }
        self.finish_block()
    }

    /// Writes an Interface Statistics Block (`isb_ifrecv`, `isb_ifdrop`): the counters the reader reports as
    /// [`crate::read::IfStats`].
    pub fn write_stats(
        &mut self,
        iface: u32,
        ts_ns: u64,
        received: Option<u64>,
        dropped: Option<u64>,
    ) -> io::Result<()> {
        self.interface(iface)?;
        let b = &mut self.scratch;
        begin_block(b, ISB_TYPE);
        put_u32(b, iface);
        put_ts(b, ts_ns);
        let mut any = false;
        for (code, value) in [(4, received), (5, dropped)] {
            if let Some(value) = value {
                put_option(b, code, &value.to_le_bytes())?;
                any = true;
            }
        }
        if any {
            put_option(b, OPT_END, &[])?;
        }
        self.finish_block()
    }

    /// Writes a Custom Block under a Private Enterprise Number; `copyable` says whether editing tools may keep it.
    ///
    /// The tracer stores counter samples and kernel events this way so they travel inside the capture.
    pub fn write_custom(&mut self, pen: u32, data: &[u8], copyable: bool) -> io::Result<()> {
        let b = &mut self.scratch;
        begin_block(
            b,
            if copyable {
                CB_COPY_TYPE
            } else {
                CB_NOCOPY_TYPE
            },
        );
        put_u32(b, pen);
        b.extend_from_slice(data);
        pad4(b);
        self.finish_block()
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }

    fn interface(&self, iface: u32) -> io::Result<WrittenInterface> {
        self.interfaces
            .get(iface as usize)
            .copied()
            .ok_or_else(|| invalid("no such interface: call add_interface first"))
    }

    /// Fills in both length fields of the block in `scratch` and writes it.
    fn finish_block(&mut self) -> io::Result<()> {
        end_block(&mut self.scratch)?;
        self.out.write_all(&self.scratch)
    }
}

/// Writes a classic pcap file: nanosecond magic, one link type.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    snaplen: u32,
    header: [u8; 16],
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header.
    pub fn new(mut out: W, link: LinkType, snaplen: u32) -> io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        put_u32(&mut h, 0xa1b2_3c4d);
        put_u16(&mut h, 2);
        put_u16(&mut h, 4);
        put_u32(&mut h, 0); // thiszone
        put_u32(&mut h, 0); // sigfigs
        put_u32(&mut h, snaplen);
        put_u32(&mut h, u32::from(link.0));
        out.write_all(&h)?;
        Ok(PcapWriter {
            out,
            snaplen,
            header: [0; 16],
        })
    }

    /// Writes one record. pcap stores seconds in 32 bits: timestamps after 2106 are refused.
    pub fn write_packet(&mut self, ts_ns: u64, data: &[u8], orig_len: u32) -> io::Result<()> {
        let caplen = u32::try_from(data.len()).map_err(|_| invalid("packet longer than 4 GiB"))?;
        if caplen > orig_len {
            return Err(invalid("captured length above the original length"));
        }
        if self.snaplen > 0 && caplen > self.snaplen {
            return Err(invalid("captured length above the file's snapshot length"));
        }
        let secs = u32::try_from(ts_ns / 1_000_000_000)
            .map_err(|_| invalid("timestamp beyond what pcap can store"))?;
        let nanos = (ts_ns % 1_000_000_000) as u32;
        for (i, field) in [secs, nanos, caplen, orig_len].into_iter().enumerate() {
            if let Some(slot) = self.header.get_mut(i * 4..i * 4 + 4) {
                slot.copy_from_slice(&field.to_le_bytes());
            }
        }
        self.out.write_all(&self.header)?;
        self.out.write_all(data)
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

pub(crate) fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Starts a block in `b`: type, and a length placeholder that `finish_block` fills in.
pub(crate) fn begin_block(b: &mut Vec<u8>, block_type: u32) {
    b.clear();
    put_u32(b, block_type);
    put_u32(b, 0);
}

/// Ends the block `begin_block` started in `b`: its trailing length, and the same in its leading field.
pub(crate) fn end_block(b: &mut Vec<u8>) -> io::Result<()> {
    let total = b.len() + 4;
    let len = u32::try_from(total).map_err(|_| invalid("block longer than 4 GiB"))?;
    put_u32(b, len);
    if let Some(field) = b.get_mut(4..8) {
        field.copy_from_slice(&len.to_le_bytes());
    }
    Ok(())
}

pub(crate) fn put_u16(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}

/// A pcapng timestamp: the 64-bit count split high word first, as the format wants.
pub(crate) fn put_ts(b: &mut Vec<u8>, ts: u64) {
    put_u32(b, (ts >> 32) as u32);
    put_u32(b, ts as u32);
}

pub(crate) fn pad4(b: &mut Vec<u8>) {
    b.resize(b.len().next_multiple_of(4), 0);
}

pub(crate) fn put_option(b: &mut Vec<u8>, code: u16, value: &[u8]) -> io::Result<()> {
    let len =
        u16::try_from(value.len()).map_err(|_| invalid("pcapng option longer than 65535 bytes"))?;
    put_u16(b, code);
    put_u16(b, len);
    b.extend_from_slice(value);
    pad4(b);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epb_layout_matches_the_format() {
        let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
        let shb_len = w.scratch.len();
        assert_eq!(shb_len, 28);
        w.add_interface(LinkType::ETHERNET, 0, None, None).unwrap();
        let idb_len = w.scratch.len();
        // 16 fixed + tsresol option (4 + 4 padded) + end of options (4) + trailing length.
        assert_eq!(idb_len, 32);
        w.write_packet(0, 0x1_0000_0002, &[0xaa; 5], 60).unwrap();
        let out = w.into_inner().unwrap();
        let epb = &out[shb_len + idb_len..];
        assert_eq!(epb.len(), 32 + 8);
        assert_eq!(&epb[0..4], &6u32.to_le_bytes());
        assert_eq!(&epb[4..8], &40u32.to_le_bytes());
        assert_eq!(&epb[12..16], &1u32.to_le_bytes());
        assert_eq!(&epb[16..20], &2u32.to_le_bytes());
        assert_eq!(&epb[20..24], &5u32.to_le_bytes());
        assert_eq!(&epb[24..28], &60u32.to_le_bytes());
        assert_eq!(&epb[28..33], &[0xaa; 5]);
        assert_eq!(&epb[33..36], &[0; 3]);
        assert_eq!(&epb[36..40], &40u32.to_le_bytes());
    }

    #[test]
    fn bad_arguments_are_errors_not_files() {
        let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
        assert!(w.write_packet(0, 0, &[1], 1).is_err(), "no interface yet");
        let id = w.add_interface(LinkType::ETHERNET, 4, None, None).unwrap();
        assert!(w.write_packet(id, 0, &[0; 5], 5).is_err(), "above snaplen");
        assert!(w.write_packet(id, 0, &[0; 3], 2).is_err(), "above orig_len");
        assert!(w.write_stats(id + 1, 0, None, None).is_err());
        let long = "x".repeat(70_000);
        assert!(
            w.write_packet_with_comment(id, 0, &[0; 3], 3, &long)
                .is_err()
        );

        let mut p = PcapWriter::new(Vec::new(), LinkType::RAW, 0).unwrap();
        assert!(p.write_packet(u64::MAX, &[0], 1).is_err(), "past 2106");
        assert!(p.write_packet(0, &[0; 2], 1).is_err());
        p.write_packet(1_500_000_000, &[7; 3], 9).unwrap();
        let out = p.into_inner().unwrap();
        assert_eq!(&out[0..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        assert_eq!(&out[20..24], &101u32.to_le_bytes());
        assert_eq!(&out[24..28], &1u32.to_le_bytes());
        assert_eq!(&out[28..32], &500_000_000u32.to_le_bytes());
        assert_eq!(out.len(), 24 + 16 + 3);
    }
}
