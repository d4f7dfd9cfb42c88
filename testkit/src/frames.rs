//! Frames and capture files for tests: RoCEv2 frames built by roce-wire the way a sender puts them on the
//! wire, and every record of a capture file, so that suites do not each write the same builder and loop.

use std::path::Path;

use roce_capture::write::{PcapngWriter, SectionInfo};
use roce_capture::{CaptureReader, LinkType, Record};
use roce_wire::build::Vlan;
use roce_wire::ext::AethRepr;
use roce_wire::{BthRepr, ExtHeaders, IpSpec, Opcode, RoceFrame};

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
    let hosts = Net {
        prefix: [10, 0, 0],
        dscp: 26,
    };
    hosts.frame(src, dst, ecn, vlan, bth, ext, payload)
}

/// Hosts of one /24 whose RoCE travels with one DSCP: what a test needs to keep its hosts apart from another
/// test's, or its traffic on a priority of its own.
#[derive(Debug, Clone, Copy)]
pub struct Net {
    /// The first three bytes of every host's address: host `h` is `prefix.h`.
    pub prefix: [u8; 3],
    /// The DSCP of every frame (the default DSCP → priority map gives DSCP/8).
    pub dscp: u8,
}

impl Net {
    /// A host's MAC: `02:00:P1:P2:00:h` for prefix `P0.P1.P2`, so that 10.0.0.h keeps `02:00:00:00:00:h`.
    pub fn mac(&self, host: u8) -> [u8; 6] {
        [2, 0, self.prefix[1], self.prefix[2], 0, host]
    }

    /// A RoCEv2 frame over IPv4 from host `src` to host `dst` of this net.
    #[allow(clippy::too_many_arguments)]
    pub fn frame(
        &self,
        src: u8,
        dst: u8,
        ecn: u8,
        vlan: Option<Vlan>,
        bth: BthRepr,
        ext: ExtHeaders,
        payload: &[u8],
    ) -> Vec<u8> {
        let ip = |h: u8| [self.prefix[0], self.prefix[1], self.prefix[2], h];
        emit(&RoceFrame {
            src_mac: self.mac(src),
            dst_mac: self.mac(dst),
            vlan,
            ip: IpSpec::V4 {
                src: ip(src),
                dst: ip(dst),
                dscp: self.dscp,
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

    /// `packets` SEND ONLY packets of 1 KiB from host `src` to host `dst`, 1 µs apart from `t0_ns`, each seen
    /// at every tap of `taps` in turn (a tap further along 500 ns later), as (tap, time, frame). A packet
    /// whose index `ce` takes arrives CE-marked at the taps after the first (the marking switch sits between
    /// the first tap and the next); `dst` acknowledges every 16th, which is how its MAC becomes known.
    pub fn sends(
        &self,
        (src, dst): (u8, u8),
        packets: u32,
        t0_ns: u64,
        taps: &[u32],
        ce: impl Fn(u32) -> bool,
    ) -> Vec<(u32, u64, Vec<u8>)> {
        let mut out = Vec::new();
        for i in 0..packets {
            let bth = BthRepr::new(Opcode::RC_SEND_ONLY, 0x100 + u32::from(dst), 1000 + i);
            let t = t0_ns + u64::from(i) * 1_000;
            for (k, &tap) in taps.iter().enumerate() {
                let ecn = if k > 0 && ce(i) { 3 } else { 2 };
                let data = self.frame(src, dst, ecn, None, bth, ExtHeaders::default(), &[0; 1024]);
                out.push((tap, t + 500 * k as u64, data));
                if i % 16 == 15 {
                    let aeth = ExtHeaders {
                        aeth: Some(AethRepr {
                            syndrome: 0x1f,
                            msn: i,
                        }),
                        ..ExtHeaders::default()
                    };
                    let bth =
                        BthRepr::new(Opcode::RC_ACKNOWLEDGE, 0x200 + u32::from(src), 1000 + i);
                    let ack = self.frame(dst, src, 2, None, bth, aeth, &[]);
                    out.push((tap, t + 800 - 300 * k as u64, ack));
                }
            }
        }
        out
    }
}

/// A PFC frame from `src_mac` pausing `priority` for `quanta` (0 resumes it).
pub fn pfc_frame(src_mac: [u8; 6], priority: usize, quanta: u16) -> Vec<u8> {
    let mut q = [0u16; 8];
    q[priority] = quanta;
    let mut buf = [0u8; 64];
    let n = roce_wire::build::emit_mac_control(
        src_mac,
        None,
        &roce_wire::pfc::MacControlRepr::Pfc(roce_wire::pfc::PfcRepr {
            enable: 1 << priority,
            quanta: q,
        }),
        &mut buf,
    )
    .expect("a PFC frame fits 64 bytes");
    buf[..n].to_vec()
}

/// Writes a pcapng file with an Ethernet interface per tap (named after it, 100 Gb/s as its `if_speed`) and
/// `frames`, (tap, time, bytes), in time order.
pub fn write_taps(path: &Path, taps: &[&str], mut frames: Vec<(u32, u64, Vec<u8>)>) {
    let file =
        std::fs::File::create(path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
    let mut w = PcapngWriter::new(file, &SectionInfo::default()).expect("a pcapng header");
    for t in taps {
        w.add_interface_with_speed(
            LinkType::ETHERNET,
            65535,
            Some(t),
            None,
            Some(100_000_000_000),
        )
        .expect("an interface block");
    }
    frames.sort_by_key(|f| f.1);
    for (tap, ts, data) in frames {
        w.write_packet(tap, ts, &data, data.len() as u32)
            .expect("a packet block");
    }
    w.flush().expect("the capture written");
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
