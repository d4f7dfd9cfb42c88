//! Writer → reader round trips: what `sink` writes, `source` must read back exactly, through every path a file
//! takes (whole reads, a pipe dribbling bytes, buffer refills, several sections, hand-made exotic blocks).

use std::io::{self, Cursor, Read};

use roce_capture::write::{PcapWriter, PcapngWriter, SectionInfo};
use roce_capture::{CaptureReader, Format, LinkType, Record};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    iface: u32,
    link: LinkType,
    speed_bps: Option<u64>,
    ts_ns: u64,
    len: u32,
    data: Vec<u8>,
    offset: u64,
}

impl Rec {
    fn of(r: &Record<'_>) -> Rec {
        Rec {
            iface: r.iface,
            link: r.link,
            speed_bps: r.speed_bps,
            ts_ns: r.ts_ns,
            len: r.len,
            data: r.data.to_vec(),
            offset: r.offset,
        }
    }
}

fn read_all(mut reader: CaptureReader) -> (CaptureReader, Vec<Rec>) {
    let mut out = Vec::new();
    while let Some(r) = reader.next_record().unwrap() {
        assert_eq!(r.caplen as usize, r.data.len());
        out.push(Rec::of(&r));
    }
    (reader, out)
}

fn from_bytes(bytes: Vec<u8>) -> CaptureReader {
    CaptureReader::from_reader("memory", Box::new(Cursor::new(bytes))).unwrap()
}

/// A reader that hands out at most `chunk` bytes per call, like a pipe under load.
struct Dribble {
    inner: Cursor<Vec<u8>>,
    chunk: usize,
}

impl Read for Dribble {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.chunk);
        self.inner.read(&mut buf[..n])
    }
}

/// A packet whose bytes encode its index, so a misplaced buffer boundary shows up as wrong content.
fn packet(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (i.wrapping_mul(31).wrapping_add(j) % 251) as u8)
        .collect()
}

#[test]
fn pcap_round_trip() {
    let mut w = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 9000).unwrap();
    let mut expected = Vec::new();
    let mut offset = 24u64;
    for i in 0..50usize {
        let data = packet(i, 60 + i * 37);
        let ts_ns = 1_700_000_000_123_456_789 + (i as u64) * 1_234_567;
        let len = data.len() as u32 + (i as u32 % 3);
        w.write_packet(ts_ns, &data, len).unwrap();
        expected.push(Rec {
            iface: 0,
            link: LinkType::ETHERNET,
            // A classic pcap file cannot say.
            speed_bps: None,
            ts_ns,
            len,
            offset,
            data: data.clone(),
        });
        offset += 16 + data.len() as u64;
    }
    let bytes = w.into_inner().unwrap();
    let file_len = bytes.len() as u64;
    let (reader, got) = read_all(from_bytes(bytes));
    assert_eq!(
        reader.format(),
        Format::Pcap {
            nanosecond: true,
            big_endian: false
        }
    );
    assert_eq!(reader.interfaces().len(), 1);
    assert_eq!(reader.interfaces()[0].snaplen, 9000);
    assert_eq!(reader.interfaces()[0].ts_resol_desc, "ns");
    assert_eq!(reader.bytes_read(), file_len);
    assert_eq!(got, expected);
}

fn multi_interface_pcapng() -> (Vec<u8>, Vec<Rec>) {
    let info = SectionInfo {
        hardware: Some("test rig".into()),
        os: Some("Linux".into()),
        user_application: Some("rocetrace tests".into()),
        comment: Some("three interfaces".into()),
    };
    let mut w = PcapngWriter::new(Vec::new(), &info).unwrap();
    let links = [LinkType::ETHERNET, LinkType::RAW, LinkType::LINUX_SLL2];
    // Each interface its own line rate, one none: every record must carry its own interface's.
    let speeds = [Some(25_000_000_000), Some(100_000_000_000), None];
    let eth = w
        .add_interface_with_speed(links[0], 0, Some("eth0"), Some("uplink"), speeds[0])
        .unwrap();
    let raw = w
        .add_interface_with_speed(links[1], 1500, Some("tun0"), None, speeds[1])
        .unwrap();
    let sll = w.add_interface(links[2], 262_144, None, None).unwrap();
    assert_eq!((eth, raw, sll), (0, 1, 2));
    let mut expected = Vec::new();
    for i in 0..30usize {
        let iface = (i % 3) as u32;
        let data = packet(i, 40 + (i * 13) % 200);
        let ts_ns = 1_700_000_000_000_000_000 + (i as u64) * 999_999_937;
        if i == 7 {
            w.write_custom(32473, b"counter samples", true).unwrap();
            w.write_custom(32473, b"kernel events, odd length", false)
                .unwrap();
        }
        if i % 5 == 0 {
            w.write_packet_with_comment(iface, ts_ns, &data, data.len() as u32, "labelled")
                .unwrap();
        } else {
            w.write_packet(iface, ts_ns, &data, data.len() as u32 + 4)
                .unwrap();
        }
        let len = if i % 5 == 0 {
            data.len() as u32
        } else {
            data.len() as u32 + 4
        };
        expected.push(Rec {
            iface,
            link: links[iface as usize],
            speed_bps: speeds[iface as usize],
            ts_ns,
            len,
            data,
            offset: 0,
        });
    }
    w.write_stats(eth, 1_700_000_100_000_000_000, Some(1000), Some(7))
        .unwrap();
    w.write_stats(raw, 1_700_000_100_000_000_000, Some(5), None)
        .unwrap();
    // A later ISB replaces the earlier one's counters.
    w.write_stats(eth, 1_700_000_200_000_000_000, Some(2000), Some(9))
        .unwrap();
    (w.into_inner().unwrap(), expected)
}

fn without_offsets(recs: &[Rec]) -> Vec<Rec> {
    recs.iter()
        .cloned()
        .map(|r| Rec { offset: 0, ..r })
        .collect()
}

#[test]
fn pcapng_round_trip_with_interfaces_stats_and_custom_blocks() {
    let (bytes, expected) = multi_interface_pcapng();
    let file_len = bytes.len() as u64;
    let (reader, got) = read_all(from_bytes(bytes.clone()));
    assert_eq!(reader.format(), Format::Pcapng);
    let ifs = reader.interfaces();
    assert_eq!(ifs.len(), 3);
    assert_eq!(ifs[0].name.as_deref(), Some("eth0"));
    assert_eq!(ifs[1].name.as_deref(), Some("tun0"));
    assert_eq!(ifs[2].name, None);
    assert_eq!(ifs[1].snaplen, 1500);
    assert_eq!(ifs[2].link, LinkType::LINUX_SLL2);
    assert!(ifs.iter().all(|i| i.ts_resol_desc == "ns"));
    let speeds: Vec<_> = ifs.iter().map(|i| i.speed_bps).collect();
    assert_eq!(speeds, [Some(25_000_000_000), Some(100_000_000_000), None]);
    let stats = reader.if_stats();
    assert_eq!(stats[0].received, Some(2000));
    assert_eq!(stats[0].dropped_iface, Some(9));
    assert_eq!(stats[1].received, Some(5));
    assert_eq!(stats[1].dropped_iface, None);
    assert_eq!(stats[2].received, None);
    assert_eq!(reader.bytes_read(), file_len);
    assert_eq!(without_offsets(&got), expected);
    // Every offset points at an EPB header whose captured length matches the record.
    for r in &got {
        let at = r.offset as usize;
        assert_eq!(&bytes[at..at + 4], &6u32.to_le_bytes());
        assert_eq!(
            &bytes[at + 20..at + 24],
            &(r.data.len() as u32).to_le_bytes()
        );
    }
}

#[test]
fn a_pipe_that_dribbles_bytes_reads_the_same() {
    let (bytes, expected) = multi_interface_pcapng();
    for chunk in [1, 3, 7, 4096] {
        let r = Dribble {
            inner: Cursor::new(bytes.clone()),
            chunk,
        };
        let reader = CaptureReader::from_reader("-", Box::new(r)).unwrap();
        let (_, got) = read_all(reader);
        assert_eq!(without_offsets(&got), expected, "chunk size {chunk}");
    }
    let mut w = PcapWriter::new(Vec::new(), LinkType::RAW, 0).unwrap();
    w.write_packet(5, &[1, 2, 3], 3).unwrap();
    let pcap = w.into_inner().unwrap();
    let r = Dribble {
        inner: Cursor::new(pcap),
        chunk: 1,
    };
    let (_, got) = read_all(CaptureReader::from_reader("-", Box::new(r)).unwrap());
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].data, [1, 2, 3]);
}

#[test]
fn a_dribbled_pcap_gives_the_same_records_and_offsets_as_a_whole_read() {
    // Many records of odd sizes, delivered in pieces that end anywhere: every record is found once by the
    // buffered fast path or by a refill, and both must agree on bytes, timestamps and file offsets.
    let mut w = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 0).unwrap();
    for i in 0..200usize {
        let data = packet(i, 14 + i % 61);
        w.write_packet(i as u64 * 977, &data, data.len() as u32 + (i % 3) as u32)
            .unwrap();
    }
    let bytes = w.into_inner().unwrap();
    let (reader, whole) = read_all(from_bytes(bytes.clone()));
    assert_eq!(whole.len(), 200);
    assert_eq!(reader.bytes_read(), bytes.len() as u64);
    let mut at = 24u64;
    for (i, r) in whole.iter().enumerate() {
        assert_eq!(r.offset, at, "record {i}");
        assert_eq!(r.data, packet(i, 14 + i % 61), "record {i}");
        at += 16 + r.data.len() as u64;
    }
    for chunk in [1, 5, 16, 17, 333] {
        let r = Dribble {
            inner: Cursor::new(bytes.clone()),
            chunk,
        };
        let (reader, got) = read_all(CaptureReader::from_reader("-", Box::new(r)).unwrap());
        assert_eq!(got, whole, "chunk size {chunk}");
        assert_eq!(
            reader.bytes_read(),
            bytes.len() as u64,
            "chunk size {chunk}"
        );
    }
}

#[test]
fn files_larger_than_the_buffer_stream_through_refills() {
    // About 11 MiB: the 4 MiB buffer is refilled several times, with records straddling each boundary.
    let mut ng = PcapngWriter::new(Vec::new(), &SectionInfo::application("big")).unwrap();
    ng.add_interface(LinkType::ETHERNET, 0, None, None).unwrap();
    let mut pc = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 0).unwrap();
    let n = 9000usize;
    for i in 0..n {
        let data = packet(i, 1200 + i % 97);
        ng.write_packet(0, i as u64 * 1000, &data, data.len() as u32)
            .unwrap();
        pc.write_packet(i as u64 * 1000, &data, data.len() as u32)
            .unwrap();
    }
    for bytes in [ng.into_inner().unwrap(), pc.into_inner().unwrap()] {
        let mut reader = from_bytes(bytes);
        let mut i = 0usize;
        while let Some(r) = reader.next_record().unwrap() {
            assert_eq!(r.data, packet(i, 1200 + i % 97).as_slice(), "record {i}");
            assert_eq!(r.ts_ns, i as u64 * 1000);
            i += 1;
        }
        assert_eq!(i, n);
    }
}

#[test]
fn several_sections_accumulate_interfaces() {
    let mut a = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    a.add_interface(LinkType::ETHERNET, 0, Some("a0"), None)
        .unwrap();
    a.write_packet(0, 10, &[1; 20], 20).unwrap();
    let mut b = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    b.add_interface(LinkType::IPOIB, 0, Some("b0"), None)
        .unwrap();
    b.add_interface(LinkType::RAW, 0, Some("b1"), None).unwrap();
    b.write_packet(1, 20, &[2; 20], 20).unwrap();
    b.write_packet(0, 30, &[3; 20], 20).unwrap();
    b.write_stats(1, 40, Some(2), Some(0)).unwrap();
    let mut bytes = a.into_inner().unwrap();
    bytes.extend(b.into_inner().unwrap());
    let (reader, got) = read_all(from_bytes(bytes));
    let names: Vec<_> = reader
        .interfaces()
        .iter()
        .map(|i| i.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["a0", "b0", "b1"]);
    let seen: Vec<_> = got.iter().map(|r| (r.iface, r.link, r.data[0])).collect();
    assert_eq!(
        seen,
        [
            (0, LinkType::ETHERNET, 1),
            (2, LinkType::RAW, 2),
            (1, LinkType::IPOIB, 3)
        ]
    );
    assert_eq!(reader.if_stats()[2].received, Some(2));
    assert_eq!(reader.if_stats()[0].received, None);
}

/// Builds pcapng blocks by hand, for what our writer never produces: other resolutions, SPBs, big-endian
/// sections, unknown blocks, `if_tsoffset`, `isb_osdrop`. The copy's tests build their files with it too.
pub(crate) struct Ng {
    pub(crate) out: Vec<u8>,
    pub(crate) be: bool,
}

impl Ng {
    pub(crate) fn u16(&self, v: u16) -> [u8; 2] {
        if self.be {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
    pub(crate) fn u32(&self, v: u32) -> [u8; 4] {
        if self.be {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
    pub(crate) fn u64(&self, v: u64) -> [u8; 8] {
        if self.be {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
    pub(crate) fn opt(&self, body: &mut Vec<u8>, code: u16, value: &[u8]) {
        body.extend(self.u16(code));
        body.extend(self.u16(value.len() as u16));
        body.extend(value);
        body.resize(body.len().next_multiple_of(4), 0);
    }
    pub(crate) fn block(&mut self, block_type: u32, body: &[u8]) {
        let len = 12 + body.len() as u32;
        let t = self.u32(block_type);
        let l = self.u32(len);
        self.out.extend(t);
        self.out.extend(l);
        self.out.extend(body);
        self.out.extend(l);
    }
    pub(crate) fn shb(&mut self) {
        let mut body = Vec::new();
        body.extend(self.u32(0x1A2B_3C4D));
        body.extend(self.u16(1));
        body.extend(self.u16(0));
        body.extend((-1i64).to_le_bytes());
        self.block(0x0A0D_0D0A, &body);
    }
    pub(crate) fn idb(&mut self, link: u16, tsresol: Option<u8>, tsoffset: Option<i64>) {
        self.idb_at(link, tsresol, tsoffset, None);
    }
    pub(crate) fn idb_at(
        &mut self,
        link: u16,
        tsresol: Option<u8>,
        tsoffset: Option<i64>,
        speed: Option<u64>,
    ) {
        let mut body = Vec::new();
        body.extend(self.u16(link));
        body.extend(self.u16(0));
        body.extend(self.u32(0));
        if let Some(bps) = speed {
            let v = self.u64(bps);
            self.opt(&mut body, 8, &v);
        }
        if let Some(r) = tsresol {
            self.opt(&mut body, 9, &[r]);
        }
        if let Some(o) = tsoffset {
            let v = self.u64(o as u64);
            self.opt(&mut body, 14, &v);
        }
        if tsresol.is_some() || tsoffset.is_some() || speed.is_some() {
            self.opt(&mut body, 0, &[]);
        }
        self.block(1, &body);
    }
    pub(crate) fn epb(&mut self, iface: u32, ticks: u64, data: &[u8]) {
        let mut body = Vec::new();
        body.extend(self.u32(iface));
        body.extend(self.u32((ticks >> 32) as u32));
        body.extend(self.u32(ticks as u32));
        body.extend(self.u32(data.len() as u32));
        body.extend(self.u32(data.len() as u32));
        body.extend(data);
        body.resize(body.len().next_multiple_of(4), 0);
        self.block(6, &body);
    }
    pub(crate) fn spb(&mut self, orig_len: u32, data: &[u8]) {
        let mut body = Vec::new();
        body.extend(self.u32(orig_len));
        body.extend(data);
        body.resize(body.len().next_multiple_of(4), 0);
        self.block(3, &body);
    }
    pub(crate) fn isb(&mut self, iface: u32, recv: u64, osdrop: u64) {
        let mut body = Vec::new();
        body.extend(self.u32(iface));
        body.extend(self.u32(0));
        body.extend(self.u32(0));
        let (r, d) = (self.u64(recv), self.u64(osdrop));
        self.opt(&mut body, 4, &r);
        self.opt(&mut body, 7, &d);
        self.opt(&mut body, 0, &[]);
        self.block(5, &body);
    }
}

#[test]
fn hand_made_pcapng_with_mixed_resolutions_spb_and_big_endian_section() {
    let mut f = Ng {
        out: Vec::new(),
        be: false,
    };
    f.shb();
    f.idb(1, None, None); // default: microseconds
    f.idb(1, Some(9), None); // nanoseconds
    f.idb(101, Some(0x80 | 20), Some(-100)); // 2^-20 s, 100 s earlier
    f.block(0x0000_0004, &[0u8; 8]); // a name resolution block, skipped
    f.block(0x1234_5678, &[9u8; 20]); // an unknown block type, skipped
    f.epb(0, 1_700_000_000_000_001, &[0xa; 14]);
    f.epb(1, 1_700_000_000_000_000_002, &[0xb; 15]);
    f.epb(2, 3 << 20, &[0xc; 16]);
    f.spb(100, &[0xd; 20]); // SPB: interface 0, no timestamp, cut to what the block holds
    f.spb(10, &[0xf; 12]); // SPB whose padding is not packet: cut to the original length
    // A big-endian section follows, as when two captures are concatenated.
    let mut g = Ng {
        out: Vec::new(),
        be: true,
    };
    g.shb();
    g.idb(276, Some(3), None); // milliseconds
    g.epb(0, 1_700_000_000_500, &[0xe; 9]);
    g.isb(0, 77, 3);
    f.out.extend(g.out);

    let (reader, got) = read_all(from_bytes(f.out));
    let desc: Vec<_> = reader
        .interfaces()
        .iter()
        .map(|i| i.ts_resol_desc.as_str())
        .collect();
    assert_eq!(desc, ["µs", "ns", "2^-20 s", "ms"]);
    let seen: Vec<_> = got
        .iter()
        .map(|r| (r.iface, r.link, r.ts_ns, r.len, r.data.len(), r.data[0]))
        .collect();
    assert_eq!(
        seen,
        [
            (
                0,
                LinkType::ETHERNET,
                1_700_000_000_000_001_000,
                14,
                14,
                0xa
            ),
            (
                1,
                LinkType::ETHERNET,
                1_700_000_000_000_000_002,
                15,
                15,
                0xb
            ),
            (2, LinkType::RAW, 0, 16, 16, 0xc), // 3 s minus the 100 s offset saturates at 0
            (0, LinkType::ETHERNET, 0, 100, 20, 0xd),
            (0, LinkType::ETHERNET, 0, 10, 10, 0xf),
            (
                3,
                LinkType::LINUX_SLL2,
                1_700_000_000_500_000_000,
                9,
                9,
                0xe
            ),
        ]
    );
    assert_eq!(reader.if_stats()[3].received, Some(77));
    assert_eq!(reader.if_stats()[3].dropped_os, Some(3));
}

/// `if_speed` in either byte order, per interface, carried onto each record; a 0 says nothing.
#[test]
fn if_speed_is_read_per_interface_in_both_byte_orders() {
    let mut f = Ng {
        out: Vec::new(),
        be: false,
    };
    f.shb();
    f.idb_at(1, Some(9), None, Some(25_000_000_000));
    f.idb_at(1, Some(9), None, Some(0));
    f.epb(0, 1, &[1; 60]);
    f.epb(1, 2, &[2; 60]);
    let mut g = Ng {
        out: Vec::new(),
        be: true,
    };
    g.shb();
    g.idb_at(1, Some(9), None, Some(400_000_000_000));
    g.epb(0, 3, &[3; 60]);
    f.out.extend(g.out);
    let (reader, got) = read_all(from_bytes(f.out));
    let speeds: Vec<_> = reader.interfaces().iter().map(|i| i.speed_bps).collect();
    assert_eq!(speeds, [Some(25_000_000_000), None, Some(400_000_000_000)]);
    let per_record: Vec<_> = got.iter().map(|r| (r.iface, r.speed_bps)).collect();
    assert_eq!(
        per_record,
        [
            (0, Some(25_000_000_000)),
            (1, None),
            (2, Some(400_000_000_000))
        ]
    );
}

#[test]
fn binary_resolution_with_positive_offset() {
    let mut f = Ng {
        out: Vec::new(),
        be: false,
    };
    f.shb();
    f.idb(1, Some(0x80 | 10), Some(1_000));
    f.epb(0, 1024 * 5 + 512, &[1; 60]);
    let (_, got) = read_all(from_bytes(f.out));
    assert_eq!(got[0].ts_ns, 1_005_500_000_000);
}

#[test]
fn big_endian_and_microsecond_pcap() {
    // Header and record written by hand in big-endian, microsecond flavour.
    let mut bytes = Vec::new();
    bytes.extend(0xa1b2_c3d4u32.to_be_bytes());
    bytes.extend(2u16.to_be_bytes());
    bytes.extend(4u16.to_be_bytes());
    bytes.extend(0u32.to_be_bytes());
    bytes.extend(0u32.to_be_bytes());
    bytes.extend(65535u32.to_be_bytes());
    bytes.extend(242u32.to_be_bytes());
    bytes.extend(1_600_000_000u32.to_be_bytes());
    bytes.extend(250_000u32.to_be_bytes());
    bytes.extend(4u32.to_be_bytes());
    bytes.extend(64u32.to_be_bytes());
    bytes.extend([1, 2, 3, 4]);
    let (reader, got) = read_all(from_bytes(bytes));
    assert_eq!(
        reader.format(),
        Format::Pcap {
            nanosecond: false,
            big_endian: true
        }
    );
    assert_eq!(reader.interfaces()[0].ts_resol_desc, "µs");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].link, LinkType::IPOIB);
    assert_eq!(got[0].ts_ns, 1_600_000_000_250_000_000);
    assert_eq!(
        (got[0].len, got[0].data.as_slice(), got[0].offset),
        (64, &[1u8, 2, 3, 4][..], 24)
    );
}

#[test]
fn blocks_larger_than_the_initial_buffer() {
    // A 180 KiB section header and packets of the maximum captured length: the reader's buffer starts small and
    // must grow for them.
    let info = SectionInfo {
        hardware: Some("h".repeat(60_000)),
        os: Some("o".repeat(60_000)),
        user_application: None,
        comment: Some("c".repeat(60_000)),
    };
    let big = packet(1, roce_capture::read::MAX_CAPLEN as usize);
    let mut ng = PcapngWriter::new(Vec::new(), &info).unwrap();
    ng.add_interface(LinkType::ETHERNET, 0, None, None).unwrap();
    let mut pc = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 0).unwrap();
    for i in 0..3u64 {
        ng.write_packet(0, i, &big, big.len() as u32).unwrap();
        pc.write_packet(i, &big, big.len() as u32).unwrap();
    }
    for bytes in [ng.into_inner().unwrap(), pc.into_inner().unwrap()] {
        let (_, got) = read_all(from_bytes(bytes));
        assert_eq!(got.len(), 3);
        assert!(got.iter().all(|r| r.data == big));
    }
    // One byte more than the limit is refused.
    let mut pc = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 0).unwrap();
    let too_big = vec![0u8; roce_capture::read::MAX_CAPLEN as usize + 1];
    pc.write_packet(0, &too_big, too_big.len() as u32).unwrap();
    let mut reader = from_bytes(pc.into_inner().unwrap());
    assert!(reader.next_record().is_err());
}

/// Every record and the error that ended the stream, as text: what a pipe and a file must agree on.
fn outcome(reader: Result<CaptureReader, roce_capture::SourceError>) -> (Vec<Rec>, Option<String>) {
    let mut reader = match reader {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Some(e.to_string())),
    };
    let mut out = Vec::new();
    loop {
        match reader.next_record() {
            Ok(Some(r)) => out.push(Rec::of(&r)),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e.to_string())),
        }
    }
}

#[test]
fn a_damaged_compressed_stream_fails_the_same_way_from_a_pipe_as_from_the_file() {
    // A decompressor returns more or less before it notices damage depending on the pieces its input comes
    // in. The reader must not let that chance show: the same records and the same error either way.
    let mut w = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 0).unwrap();
    for i in 0..300usize {
        let data = packet(i, 60 + i % 200);
        w.write_packet(i as u64 * 1000, &data, data.len() as u32)
            .unwrap();
    }
    let plain = w.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    io::Write::write_all(&mut gz, &plain).unwrap();
    let gz = gz.finish().unwrap();
    let zst = zstd::encode_all(Cursor::new(&plain), 3).unwrap();
    // Found by the fuzzer: a gzip header followed by a broken deflate stream.
    let fuzzed = vec![
        31, 139, 8, 0, 0, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26,
        26, 26, 26, 26, 26, 0, 0, 46, 18, 46, 18, 0, 91, 252,
    ];
    let mut cases = vec![fuzzed];
    for stream in [&gz, &zst] {
        for at in [12, stream.len() / 3, stream.len() / 2, stream.len() - 9] {
            let mut bad = stream.clone();
            bad[at] ^= 0x5a;
            cases.push(bad);
        }
        cases.push(stream[..stream.len() * 2 / 3].to_vec());
    }
    for (n, bytes) in cases.iter().enumerate() {
        let whole = outcome(CaptureReader::from_reader(
            "-",
            Box::new(Cursor::new(bytes.clone())),
        ));
        assert!(whole.1.is_some(), "case {n} must fail somewhere");
        for chunk in [1, 7, 23, 4096] {
            let r = Dribble {
                inner: Cursor::new(bytes.clone()),
                chunk,
            };
            let dribbled = outcome(CaptureReader::from_reader("-", Box::new(r)));
            assert_eq!(dribbled, whole, "case {n}, pieces of {chunk} bytes");
        }
    }
}
