//! Frames and capture files for tests: RoCEv2 frames built by roce-wire the way a sender puts them on the
//! wire, and every record of a capture file, so that suites do not each write the same builder and loop.

use std::path::Path;

use roce_capture::{CaptureReader, Record};
use roce_wire::build::Vlan;
use roce_wire::{BthRepr, ExtHeaders, IpSpec, RoceFrame};

/// The bytes of `frame` as emitted, ICRC included.
pub fn emit(frame: &RoceFrame<'_>) -> Vec<u8> {
    let mut buf = vec![0; frame.len()];
    let n = frame.emit(&mut buf).expect("a frame fits its own length");
    buf.truncate(n);
    buf
}

/// The BTH most tests send: `opcode` to `dest_qp` at `psn`, partition key 0xffff, BECN set on a CNP.
pub fn bth(opcode: roce_wire::Opcode, dest_qp: u32, psn: u32) -> BthRepr {
    BthRepr {
        opcode,
        se: false,
        migreq: true,
        pad_count: 0,
        tver: 0,
        pkey: 0xffff,
        fecn: false,
        becn: opcode == roce_wire::Opcode::CNP,
        dest_qp,
        ack_req: false,
        psn,
    }
}

/// A RoCEv2 frame over IPv4 from 10.0.0.`src` to 10.0.0.`dst` (MACs ending in the same bytes, DSCP 26).
pub fn v4_frame(
    src: u8,
    dst: u8,
    ecn: u8,
    bth: BthRepr,
    ext: ExtHeaders,
    payload: &[u8],
) -> Vec<u8> {
    v4_frame_on(src, dst, ecn, None, bth, ext, payload)
}

/// [`v4_frame`] with an 802.1Q tag, when given.
pub fn v4_frame_on(
    src: u8,
    dst: u8,
    ecn: u8,
    vlan: Option<Vlan>,
    bth: BthRepr,
    ext: ExtHeaders,
    payload: &[u8],
) -> Vec<u8> {
    emit(&RoceFrame {
        src_mac: [2, 0, 0, 0, 0, src],
        dst_mac: [2, 0, 0, 0, 0, dst],
        vlan,
        ip: IpSpec::V4 {
            src: [10, 0, 0, src],
            dst: [10, 0, 0, dst],
            dscp: 26,
            ecn,
            ttl: 64,
            ident: 0,
        },
        sport: 50000,
        bth,
        ext,
        payload,
    })
}

/// [`v4_frame`] over IPv6, from 2001:db8::`src` to 2001:db8::`dst`.
pub fn v6_frame(
    src: u8,
    dst: u8,
    ecn: u8,
    bth: BthRepr,
    ext: ExtHeaders,
    payload: &[u8],
) -> Vec<u8> {
    let addr = |host: u8| {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        a[15] = host;
        a
    };
    emit(&RoceFrame {
        src_mac: [2, 0, 0, 0, 6, src],
        dst_mac: [2, 0, 0, 0, 6, dst],
        vlan: None,
        ip: IpSpec::V6 {
            src: addr(src),
            dst: addr(dst),
            dscp: 26,
            ecn,
            flow_label: 0x12345,
            hop_limit: 64,
        },
        sport: 49152,
        bth,
        ext,
        payload,
    })
}

/// Calls `each` with every record of the capture at `path`, in file order, and returns the reader, which
/// then holds what the whole file told (interfaces, custom blocks, statistics). A capture a test made or
/// chose must read: an error panics, naming the file.
pub fn for_each_frame(path: &Path, mut each: impl FnMut(&Record<'_>)) -> CaptureReader {
    let mut reader =
        CaptureReader::open(path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    while let Some(r) = reader
        .next_record()
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    {
        each(&r);
    }
    reader
}
