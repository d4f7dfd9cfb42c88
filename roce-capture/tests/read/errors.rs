//! Broken files: each kind of damage gives its documented error at the right byte offset, the records before the
//! damage still come out, and no input at all can make the reader panic.

use std::io::Cursor;

use proptest::prelude::*;
use roce_capture::read::MAX_CAPLEN;
use roce_capture::write::{PcapWriter, PcapngWriter, SectionInfo};
use roce_capture::{CaptureReader, LinkType, SourceError, SourceErrorKind};

fn open_bytes(bytes: Vec<u8>) -> Result<CaptureReader, SourceError> {
    CaptureReader::from_reader("broken.pcap", Box::new(Cursor::new(bytes)))
}

/// Reads to the end; returns the number of records and the error that stopped the reader, if any.
fn drain(mut reader: CaptureReader) -> (usize, Option<SourceError>) {
    let mut n = 0;
    loop {
        match reader.next_record() {
            Ok(Some(_)) => n += 1,
            Ok(None) => return (n, None),
            Err(e) => {
                // Documented: after an error the reader is done.
                assert!(matches!(reader.next_record(), Ok(None)));
                return (n, Some(e));
            }
        }
    }
}

/// Three records of 100, 200 and 300 bytes: the third starts at 24 + 116 + 216 = 356.
fn three_record_pcap(snaplen: u32) -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new(), LinkType::ETHERNET, snaplen).unwrap();
    for (i, len) in [100usize, 200, 300].into_iter().enumerate() {
        w.write_packet(i as u64, &vec![i as u8; len], len as u32)
            .unwrap();
    }
    w.into_inner().unwrap()
}

const THIRD: usize = 356;

/// Two EPBs on one interface; returns the bytes and the offset of the second EPB.
fn two_record_pcapng() -> (Vec<u8>, usize) {
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    w.add_interface(LinkType::ETHERNET, 0, None, None).unwrap();
    w.write_packet(0, 1, &[1; 64], 64).unwrap();
    w.write_packet(0, 2, &[2; 64], 64).unwrap();
    let bytes = w.into_inner().unwrap();
    // SHB 28 + IDB 32 + EPB 96.
    (bytes, 28 + 32 + 96)
}

fn patch_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn empty_file() {
    let e = open_bytes(Vec::new()).unwrap_err();
    assert!(matches!(e.kind, SourceErrorKind::Empty), "{e}");
    assert_eq!(e.offset, 0);
    assert!(e.to_string().contains("empty"), "{e}");
}

#[test]
fn wrong_magic() {
    let e = open_bytes(b"hello world, not a capture".to_vec()).unwrap_err();
    assert!(
        matches!(e.kind, SourceErrorKind::NotACapture { magic } if &magic == b"hell"),
        "{e}"
    );
    assert!(e.to_string().contains("68 65 6c 6c"), "{e}");
    let e = open_bytes(vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0]).unwrap_err();
    assert!(e.to_string().contains("gzip"), "{e}");
}

#[test]
fn a_file_shorter_than_its_header() {
    let bytes = three_record_pcap(0);
    let e = open_bytes(bytes[..10].to_vec()).unwrap_err();
    assert!(
        matches!(
            e.kind,
            SourceErrorKind::Truncated {
                needed: 24,
                have: 10,
                ..
            }
        ),
        "{e}"
    );
    let e = open_bytes(bytes[..2].to_vec()).unwrap_err();
    assert!(
        matches!(e.kind, SourceErrorKind::Truncated { have: 2, .. }),
        "{e}"
    );
}

#[test]
fn missing_file_and_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope.pcap");
    let e = CaptureReader::open(&missing).unwrap_err();
    assert!(matches!(e.kind, SourceErrorKind::NotFound), "{e}");
    assert!(
        e.to_string().contains("nope.pcap") && e.to_string().contains("no such file"),
        "{e}"
    );
    let e = CaptureReader::open(tmp.path()).unwrap_err();
    assert!(matches!(e.kind, SourceErrorKind::IsDirectory), "{e}");
    assert!(e.to_string().contains("directory"), "{e}");
}

#[test]
fn open_reads_from_a_path() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ok.pcap");
    std::fs::write(&path, three_record_pcap(0)).unwrap();
    let reader = CaptureReader::open(&path).unwrap();
    assert_eq!(reader.name(), path.display().to_string());
    assert_eq!(drain(reader).0, 3);
}

#[test]
fn pcap_truncated_mid_record_keeps_the_records_before() {
    let bytes = three_record_pcap(0);
    // Inside the third record's data.
    let (n, e) = drain(open_bytes(bytes[..THIRD + 16 + 50].to_vec()).unwrap());
    let e = e.unwrap();
    assert_eq!(n, 2);
    assert_eq!(e.offset, THIRD as u64);
    assert!(
        matches!(
            e.kind,
            SourceErrorKind::Truncated {
                needed: 316,
                have: 66,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .starts_with("broken.pcap: byte 356: truncated"),
        "{e}"
    );
    // Inside the third record's header.
    let (n, e) = drain(open_bytes(bytes[..THIRD + 5].to_vec()).unwrap());
    assert_eq!(n, 2);
    let e = e.unwrap();
    assert_eq!(e.offset, THIRD as u64);
    assert!(
        matches!(
            e.kind,
            SourceErrorKind::Truncated {
                needed: 16,
                have: 5,
                ..
            }
        ),
        "{e}"
    );
    // Exactly at a record boundary: a clean end.
    let (n, e) = drain(open_bytes(bytes[..THIRD].to_vec()).unwrap());
    assert_eq!((n, e.is_none()), (2, true));
}

#[test]
fn pcapng_truncated_mid_block() {
    let (bytes, second) = two_record_pcapng();
    let (n, e) = drain(open_bytes(bytes[..second + 40].to_vec()).unwrap());
    let e = e.unwrap();
    assert_eq!(n, 1);
    assert_eq!(e.offset, second as u64);
    assert!(
        matches!(
            e.kind,
            SourceErrorKind::Truncated {
                needed: 96,
                have: 40,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn caplen_above_snaplen() {
    let mut bytes = three_record_pcap(0);
    patch_u32(&mut bytes, 16, 250); // snaplen 250: only the third record (300) is too long
    let (n, e) = drain(open_bytes(bytes).unwrap());
    let e = e.unwrap();
    assert_eq!(n, 2);
    assert_eq!(e.offset, THIRD as u64);
    assert!(
        matches!(
            e.kind,
            SourceErrorKind::CaplenAboveSnaplen {
                caplen: 300,
                snaplen: 250
            }
        ),
        "{e}"
    );
}

#[test]
fn caplen_above_len() {
    let mut bytes = three_record_pcap(0);
    patch_u32(&mut bytes, 24 + 116 + 12, 150); // second record: 200 captured of 150
    let (n, e) = drain(open_bytes(bytes).unwrap());
    let e = e.unwrap();
    assert_eq!(n, 1);
    assert_eq!(e.offset, 24 + 116);
    assert!(
        matches!(
            e.kind,
            SourceErrorKind::CaplenAboveLen {
                caplen: 200,
                len: 150
            }
        ),
        "{e}"
    );
}

#[test]
fn four_gigabyte_caplen_is_an_error_not_an_allocation() {
    let mut bytes = three_record_pcap(0);
    patch_u32(&mut bytes, THIRD + 8, 0xffff_fff0);
    patch_u32(&mut bytes, THIRD + 12, 0xffff_fff0);
    let (n, e) = drain(open_bytes(bytes).unwrap());
    let e = e.unwrap();
    assert_eq!(n, 2);
    assert_eq!(e.offset, THIRD as u64);
    assert!(
        matches!(
            e.kind,
            SourceErrorKind::CaplenTooLarge {
                caplen: 0xffff_fff0,
                limit: MAX_CAPLEN
            }
        ),
        "{e}"
    );

    let (mut bytes, second) = two_record_pcapng();
    patch_u32(&mut bytes, second + 20, 0xffff_fff0);
    let (n, e) = drain(open_bytes(bytes).unwrap());
    let e = e.unwrap();
    assert_eq!((n, e.offset), (1, second as u64));
    assert!(
        matches!(e.kind, SourceErrorKind::CaplenTooLarge { .. }),
        "{e}"
    );
}

#[test]
fn pcapng_broken_block_lengths() {
    let (bytes, second) = two_record_pcapng();
    for len in [13u32, 8, 0xffff_fff0] {
        let mut b = bytes.clone();
        patch_u32(&mut b, second + 4, len);
        let (n, e) = drain(open_bytes(b).unwrap());
        let e = e.unwrap();
        assert_eq!((n, e.offset), (1, second as u64), "length {len}: {e}");
        assert!(
            matches!(e.kind, SourceErrorKind::BadBlockLength { block_type: 6, len: l } if l == len),
            "{e}"
        );
    }
    // The trailing copy of the length disagrees with the leading one.
    let mut b = bytes.clone();
    patch_u32(&mut b, second + 92, 100);
    let (n, e) = drain(open_bytes(b).unwrap());
    let e = e.unwrap();
    assert_eq!((n, e.offset), (1, second as u64));
    assert!(
        matches!(
            e.kind,
            SourceErrorKind::BlockLengthMismatch {
                leading: 96,
                trailing: 100,
                ..
            }
        ),
        "{e}"
    );
    // An EPB whose packet claims more bytes than the block holds.
    let mut b = bytes.clone();
    patch_u32(&mut b, second + 20, 200);
    patch_u32(&mut b, second + 24, 200);
    let e = drain(open_bytes(b).unwrap()).1.unwrap();
    assert!(
        matches!(
            e.kind,
            SourceErrorKind::PacketBeyondBlock {
                caplen: 200,
                block_len: 96
            }
        ),
        "{e}"
    );
}

#[test]
fn packet_on_an_undeclared_interface() {
    let (mut bytes, second) = two_record_pcapng();
    patch_u32(&mut bytes, second + 8, 5);
    let (n, e) = drain(open_bytes(bytes).unwrap());
    let e = e.unwrap();
    assert_eq!((n, e.offset), (1, second as u64));
    assert!(
        matches!(e.kind, SourceErrorKind::UnknownInterface { id: 5 }),
        "{e}"
    );
}

#[test]
fn huge_unknown_blocks_are_skipped_without_buffering() {
    // A 6 MiB custom block, larger than the read buffer, between two packets.
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    w.add_interface(LinkType::ETHERNET, 0, None, None).unwrap();
    w.write_packet(0, 1, &[1; 64], 64).unwrap();
    w.write_custom(1, &vec![0x55; 6 << 20], true).unwrap();
    w.write_packet(0, 2, &[2; 64], 64).unwrap();
    let bytes = w.into_inner().unwrap();
    assert_eq!(drain(open_bytes(bytes.clone()).unwrap()).0, 2);
    // Cut inside the custom block: the first packet, then a truncation error at the block's start.
    let (n, e) = drain(open_bytes(bytes[..5 << 20].to_vec()).unwrap());
    let e = e.unwrap();
    assert_eq!((n, e.offset), (1, 28 + 32 + 96));
    assert!(
        matches!(
            e.kind,
            SourceErrorKind::Truncated {
                what: "custom block",
                ..
            }
        ),
        "{e}"
    );
}

fn valid_pcapng() -> Vec<u8> {
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::application("proptest")).unwrap();
    w.add_interface(LinkType::ETHERNET, 0, Some("eth0"), None)
        .unwrap();
    w.add_interface(LinkType::RAW, 128, None, None).unwrap();
    for i in 0..6u8 {
        w.write_packet(
            u32::from(i % 2),
            u64::from(i),
            &vec![i; 20 + usize::from(i) * 7],
            100,
        )
        .unwrap();
    }
    w.write_stats(0, 9, Some(6), Some(0)).unwrap();
    w.write_custom(7, b"abc", false).unwrap();
    w.into_inner().unwrap()
}

/// Reads everything it can; the record bytes are touched so a bad slice would be noticed.
fn read_total(bytes: Vec<u8>) -> Vec<Vec<u8>> {
    let Ok(mut reader) = open_bytes(bytes) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Ok(Some(r)) = reader.next_record() {
        assert_eq!(r.data.len(), r.caplen as usize);
        out.push(r.data.to_vec());
        assert!(out.len() < 100_000);
    }
    out
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        read_total(bytes);
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_magic_never_panic(
        magic in prop::sample::select(vec![
            [0xd4u8, 0xc3, 0xb2, 0xa1], [0xa1, 0xb2, 0xc3, 0xd4], [0x4d, 0x3c, 0xb2, 0xa1],
            [0x34, 0xcd, 0xb2, 0xa1], [0x0a, 0x0d, 0x0d, 0x0a],
        ]),
        rest in proptest::collection::vec(any::<u8>(), 0..2048),
    ) {
        let mut bytes = magic.to_vec();
        bytes.extend(rest);
        read_total(bytes);
    }

    #[test]
    fn truncations_return_a_prefix_of_the_records(cut in 0usize..2000) {
        let full = valid_pcapng();
        let all = read_total(full.clone());
        prop_assert_eq!(all.len(), 6);
        let cut = cut.min(full.len());
        let some = read_total(full[..cut].to_vec());
        prop_assert!(some.len() <= all.len());
        prop_assert_eq!(&all[..some.len()], &some[..]);
    }

    #[test]
    fn corrupted_bytes_never_panic(flips in proptest::collection::vec((0usize..2000, any::<u8>()), 1..8)) {
        for mut bytes in [valid_pcapng(), three_record_pcap(0)] {
            for &(at, v) in &flips {
                let len = bytes.len();
                bytes[at % len] = v;
            }
            read_total(bytes);
        }
    }
}
