//! The test corpus: one capture that holds every header the decoder knows, in every framing it accepts.
//!
//! Public captures cover few opcodes and no PFC, CE or truncation, so the differential tests against tshark
//! run on this file too. It is deterministic (a fixed-seed generator), so a failure names the same frame
//! every time. Four interfaces exercise the link types: full Ethernet, Ethernet cut at a 96-byte snap
//! length, Linux cooked v2 (`tcpdump -i any`) and raw IP.

use std::io::{self, Write};

use etherparse::PacketBuilder;
use roce_capture::LinkType;
use roce_capture::write::{PcapWriter, PcapngWriter, SectionInfo};
use roce_wire::build::{IpSpec, RoceFrame, Vlan, emit_mac_control};
use roce_wire::ext::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, DethRepr, RdethRepr, RethRepr, XrcEthRepr,
};
use roce_wire::grh::{ETHERTYPE_ROCE_V1, GrhRepr};
use roce_wire::pfc::{MacControlRepr, PfcRepr};
use roce_wire::{BthRepr, ExtHeaders, Opcode};

/// Snap length of the truncating interface: enough for Ethernet + IPv4 + UDP + BTH + RETH, not the payload.
pub const SHORT_SNAPLEN: u32 = 96;

/// A small, fixed-seed generator (SplitMix64): the corpus must not change between runs or platforms.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose whole sequence `seed` decides.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (0 when `n` is 0); the modulo bias is far below what the captures could show.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Where a corpus frame goes: which interface, and (for cooked/raw ones) how its link header is rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Iface {
    Ethernet = 0,
    Short = 1,
    Sll2 = 2,
    Raw = 3,
}

/// One frame of the corpus, before link-layer rewriting.
struct Item {
    iface: Iface,
    eth: Vec<u8>,
}

/// Extension headers for `op` with values derived from `r`, so every field is exercised with non-trivial bits.
fn ext_for(op: Opcode, r: &mut Rng) -> ExtHeaders {
    let Some(l) = op.layout() else {
        return ExtHeaders::default();
    };
    let mut e = ExtHeaders::default();
    if l.xrceth {
        e.xrceth = Some(XrcEthRepr {
            srq: r.below(1 << 24) as u32,
        });
    }
    if l.rdeth {
        e.rdeth = Some(RdethRepr {
            ee_context: r.below(1 << 24) as u32,
        });
    }
    if l.deth {
        e.deth = Some(DethRepr {
            qkey: r.next_u64() as u32,
            src_qp: r.below(1 << 24) as u32,
        });
    }
    if l.reth {
        e.reth = Some(RethRepr {
            va: r.next_u64(),
            rkey: r.next_u64() as u32,
            dma_len: r.below(1 << 20) as u32,
        });
    }
    if l.atomic_eth {
        e.atomic_eth = Some(AtomicEthRepr {
            va: r.next_u64(),
            rkey: r.next_u64() as u32,
            swap_add: r.next_u64(),
            compare: r.next_u64(),
        });
    }
    if l.aeth {
        // ACK with credits, RNR NAK, or one of the five NAK codes.
        let syndrome = match r.below(4) {
            0 | 1 => r.below(32) as u8,
            2 => 0x20 | r.below(32) as u8,
            _ => 0x60 | r.below(5) as u8,
        };
        e.aeth = Some(AethRepr {
            syndrome,
            msn: r.below(1 << 24) as u32,
        });
    }
    if l.atomic_ack_eth {
        e.atomic_ack_eth = Some(AtomicAckEthRepr { orig: r.next_u64() });
    }
    if l.imm {
        e.imm = Some(r.next_u64() as u32);
    }
    if l.ieth {
        e.ieth = Some(r.next_u64() as u32);
    }
    e
}

fn mac(n: u8) -> [u8; 6] {
    [0x02, 0x00, 0x00, 0x00, 0x00, n]
}

fn ip_spec(v6: bool, a: u8, b: u8, dscp: u8, ecn: u8, r: &mut Rng) -> IpSpec {
    if v6 {
        let mut src = [0u8; 16];
        src[0] = 0xfd;
        src[15] = a;
        let mut dst = src;
        dst[15] = b;
        IpSpec::V6 {
            src,
            dst,
            dscp,
            ecn,
            flow_label: r.below(1 << 20) as u32,
            hop_limit: 64,
        }
    } else {
        IpSpec::V4 {
            src: [10, 0, 0, a],
            dst: [10, 0, 0, b],
            dscp,
            ecn,
            ttl: 64,
            ident: r.next_u64() as u16,
        }
    }
}

fn emit_roce(frame: &RoceFrame<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; frame.len()];
    match frame.emit(&mut buf) {
        Ok(n) => buf.truncate(n),
        Err(e) => panic!("corpus frame does not emit: {e}"),
    }
    buf
}

/// Every RoCE frame of the corpus as Ethernet bytes, with the interface it belongs on.
fn items() -> Vec<Item> {
    let mut r = Rng::new(0x5EED_0001);
    let mut out = Vec::new();
    let defined: Vec<Opcode> = (0..=255u8)
        .map(Opcode)
        .filter(|o| o.is_defined() && *o != Opcode::CNP)
        .collect();
    for (i, &op) in defined.iter().enumerate() {
        for v6 in [false, true] {
            // Payload lengths 0..=7 and one MTU-sized: every pad count, and a big frame for the ICRC.
            let payload_len = if i % 5 == 0 {
                1024
            } else {
                (i + usize::from(v6)) % 8
            };
            let payload: Vec<u8> = (0..payload_len).map(|k| (k * 7 + i) as u8).collect();
            let ecn = ((i + usize::from(v6)) % 4) as u8;
            let vlan = match i % 3 {
                0 => None,
                _ => Some(Vlan {
                    pcp: (i % 8) as u8,
                    dei: false,
                    vid: 100 + i as u16,
                }),
            };
            let bth = BthRepr {
                opcode: op,
                se: r.below(2) == 1,
                migreq: r.below(2) == 1,
                pad_count: 0,
                tver: 0,
                pkey: if r.below(4) == 0 { 0x7fff } else { 0xffff },
                fecn: r.below(8) == 0,
                becn: r.below(8) == 0,
                dest_qp: r.below(1 << 24) as u32,
                ack_req: r.below(2) == 1,
                psn: r.below(1 << 24) as u32,
            };
            let frame = RoceFrame {
                src_mac: mac(1),
                dst_mac: mac(2),
                vlan,
                ip: ip_spec(v6, 1, 2, 26, ecn, &mut r),
                sport: 49152 + r.below(16000) as u16,
                bth,
                ext: ext_for(op, &mut r),
                payload: &payload,
            };
            let eth = emit_roce(&frame);
            let iface = match i % 7 {
                3 if vlan.is_none() => Iface::Sll2,
                5 if vlan.is_none() => Iface::Raw,
                _ => Iface::Ethernet,
            };
            out.push(Item {
                iface,
                eth: eth.clone(),
            });
            if i % 4 == 0 {
                out.push(Item {
                    iface: Iface::Short,
                    eth,
                });
            }
        }
    }
    // CNPs as ConnectX sends them: DSCP 48, ECT(0), on priority 6 when tagged.
    for k in 0..6u8 {
        let frame = RoceFrame {
            src_mac: mac(2),
            dst_mac: mac(1),
            vlan: (k % 2 == 1).then_some(Vlan {
                pcp: 6,
                dei: false,
                vid: 10,
            }),
            ip: ip_spec(k >= 3, 2, 1, 48, 2, &mut r),
            sport: 0,
            bth: BthRepr::cnp(0x118 + u32::from(k)),
            ext: ExtHeaders::default(),
            payload: &[0u8; 16],
        };
        out.push(Item {
            iface: Iface::Ethernet,
            eth: emit_roce(&frame),
        });
    }
    // A frame whose payload was corrupted after the ICRC was computed.
    let payload = [0xAAu8; 64];
    let mut bad = emit_roce(&RoceFrame {
        src_mac: mac(1),
        dst_mac: mac(2),
        vlan: None,
        ip: ip_spec(false, 1, 2, 26, 2, &mut r),
        sport: 50000,
        bth: BthRepr {
            ack_req: true,
            ..BthRepr::new(Opcode::RC_SEND_ONLY, 0x42, 7)
        },
        ext: ExtHeaders::default(),
        payload: &payload,
    });
    let at = bad.len() - 10;
    bad[at] ^= 0x01;
    out.push(Item {
        iface: Iface::Ethernet,
        eth: bad,
    });
    // QinQ: an 802.1ad outer tag (PCP 3) around an 802.1Q inner tag.
    let inner = emit_roce(&RoceFrame {
        src_mac: mac(3),
        dst_mac: mac(4),
        vlan: Some(Vlan {
            pcp: 5,
            dei: false,
            vid: 200,
        }),
        ip: ip_spec(false, 3, 4, 26, 3, &mut r),
        sport: 51000,
        bth: BthRepr::new(Opcode::RC_RDMA_WRITE_MIDDLE, 0x77, 1000),
        ext: ExtHeaders::default(),
        payload: &[1, 2, 3, 4, 5, 6, 7, 8],
    });
    let mut qinq = inner[..12].to_vec();
    qinq.extend_from_slice(&[0x88, 0xa8, 0x60, 0x64]); // 802.1ad, PCP 3, VID 100
    qinq.extend_from_slice(&inner[12..]);
    out.push(Item {
        iface: Iface::Ethernet,
        eth: qinq,
    });
    out.extend(roce_v1_items());
    out.extend(mac_control_items());
    out.extend(other_items());
    out
}

/// RoCEv1: Ethernet, ethertype 0x8915, GRH, BTH. Its ICRC is not checked by the decoder, so the trailer is
/// four zero bytes.
fn roce_v1_items() -> Vec<Item> {
    let mut out = Vec::new();
    for (k, op) in [Opcode::RC_SEND_ONLY, Opcode::RC_ACKNOWLEDGE]
        .into_iter()
        .enumerate()
    {
        let mut ext = ExtHeaders::default();
        if op == Opcode::RC_ACKNOWLEDGE {
            ext.aeth = Some(AethRepr {
                syndrome: 0x1f,
                msn: 12,
            });
        }
        let payload: &[u8] = if k == 0 { &[9; 12] } else { &[] };
        let bth = BthRepr::new(op, 0x300 + k as u32, 55);
        let ext_len = if ext.aeth.is_some() { 4 } else { 0 };
        let ib_len = BthRepr::LEN + ext_len + payload.len() + 4;
        let mut sgid = [0u8; 16];
        sgid[..2].copy_from_slice(&[0xfe, 0x80]);
        sgid[15] = 1;
        let mut dgid = sgid;
        dgid[15] = 2;
        let grh = GrhRepr {
            tclass: 0x68,
            flow_label: 0,
            payload_len: ib_len as u16,
            next_header: 0x1b,
            hop_limit: 1,
            sgid,
            dgid,
        };
        let mut eth = Vec::new();
        eth.extend_from_slice(&mac(2));
        eth.extend_from_slice(&mac(1));
        eth.extend_from_slice(&ETHERTYPE_ROCE_V1.to_be_bytes());
        let mut g = [0u8; GrhRepr::LEN];
        grh.emit(&mut g).expect("GRH fits its length");
        eth.extend_from_slice(&g);
        let mut b = [0u8; BthRepr::LEN];
        bth.emit(&mut b).expect("BTH fits its length");
        eth.extend_from_slice(&b);
        if let Some(a) = ext.aeth {
            let mut x = [0u8; 4];
            a.emit(&mut x).expect("AETH fits its length");
            eth.extend_from_slice(&x);
        }
        eth.extend_from_slice(payload);
        eth.extend_from_slice(&[0; 4]);
        out.push(Item {
            iface: Iface::Ethernet,
            eth,
        });
    }
    out
}

fn mac_control_items() -> Vec<Item> {
    let mut out = Vec::new();
    let pfcs = [
        (0x08u16, [0, 0, 0, 0xffff, 0, 0, 0, 0]),
        (0x08, [0, 0, 0, 0, 0, 0, 0, 0]),
        (0xff, [1, 2, 3, 4, 5, 6, 7, 8]),
        (0x48, [0, 0, 0, 500, 0, 0, 1000, 0]),
        (0x00, [0; 8]),
    ];
    for (k, (enable, quanta)) in pfcs.into_iter().enumerate() {
        let vlan = (k == 2).then_some(Vlan {
            pcp: 7,
            dei: false,
            vid: 0,
        });
        let mut buf = [0u8; 128];
        let n = emit_mac_control(
            mac(10 + k as u8),
            vlan,
            &MacControlRepr::Pfc(PfcRepr { enable, quanta }),
            &mut buf,
        )
        .expect("PFC frame fits 128 bytes");
        out.push(Item {
            iface: Iface::Ethernet,
            eth: buf[..n].to_vec(),
        });
    }
    for quanta in [0xffffu16, 0, 0x1234] {
        let mut buf = [0u8; 128];
        let n = emit_mac_control(mac(20), None, &MacControlRepr::Pause { quanta }, &mut buf)
            .expect("PAUSE frame fits 128 bytes");
        out.push(Item {
            iface: Iface::Ethernet,
            eth: buf[..n].to_vec(),
        });
    }
    out
}

/// Traffic around RoCE that must stay "other": plain UDP, TCP, ARP.
fn other_items() -> Vec<Item> {
    let mut out = Vec::new();
    let payload = [0x11u8; 20];
    let mut udp = Vec::new();
    let b = PacketBuilder::ethernet2(mac(1), mac(2))
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(40000, 9999);
    if b.write(&mut udp, &payload).is_ok() {
        out.push(Item {
            iface: Iface::Ethernet,
            eth: udp,
        });
    }
    let mut tcp = Vec::new();
    let b = PacketBuilder::ethernet2(mac(1), mac(2))
        .ipv6([0xfd; 16], [0xfe; 16], 64)
        .tcp(4791, 80, 1, 1000);
    if b.write(&mut tcp, &payload).is_ok() {
        out.push(Item {
            iface: Iface::Ethernet,
            eth: tcp,
        });
    }
    let mut arp = Vec::new();
    arp.extend_from_slice(&[0xff; 6]);
    arp.extend_from_slice(&mac(1));
    arp.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&mac(1));
    arp.extend_from_slice(&[10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2]);
    arp.resize(60, 0);
    out.push(Item {
        iface: Iface::Ethernet,
        eth: arp,
    });
    out
}

/// Rewrites an Ethernet frame for a cooked (SLL2) interface: the 14-byte MAC header becomes the 20-byte
/// SLL2 header carrying the same ethertype and the source MAC.
fn to_sll2(eth: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(eth.len() + 6);
    v.extend_from_slice(&eth[12..14]); // protocol
    v.extend_from_slice(&[0, 0]); // reserved
    v.extend_from_slice(&2u32.to_be_bytes()); // interface index
    v.extend_from_slice(&1u16.to_be_bytes()); // ARPHRD_ETHER
    v.push(4); // sent by us
    v.push(6);
    v.extend_from_slice(&eth[6..12]);
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(&eth[14..]);
    v
}

/// Start of the corpus timeline: 2023-11-14T22:13:20Z, in ns.
pub const T0_NS: u64 = 1_700_000_000_000_000_000;

/// Writes the corpus as pcapng (four interfaces). Returns the number of frames written.
pub fn write_pcapng<W: Write>(w: W) -> io::Result<u64> {
    let mut out = PcapngWriter::new(
        w,
        &SectionInfo {
            user_application: Some("rocetrace samples::corpus".into()),
            comment: Some(
                "rocetrace decoder test corpus: every opcode, CNP, PFC, PAUSE, RoCEv1, truncation"
                    .into(),
            ),
            ..SectionInfo::default()
        },
    )?;
    out.add_interface(LinkType::ETHERNET, 65535, Some("eth-full"), None)?;
    out.add_interface(LinkType::ETHERNET, SHORT_SNAPLEN, Some("eth-snap96"), None)?;
    out.add_interface(LinkType::LINUX_SLL2, 65535, Some("any"), None)?;
    out.add_interface(LinkType::RAW, 65535, Some("raw"), None)?;
    let mut n = 0u64;
    for (k, item) in items().into_iter().enumerate() {
        let ts = T0_NS + k as u64 * 1_337;
        let (data, orig) = match item.iface {
            Iface::Ethernet => (item.eth.clone(), item.eth.len()),
            Iface::Short => {
                let cut = item.eth.len().min(SHORT_SNAPLEN as usize);
                (item.eth[..cut].to_vec(), item.eth.len())
            }
            Iface::Sll2 => {
                let v = to_sll2(&item.eth);
                let l = v.len();
                (v, l)
            }
            Iface::Raw => {
                let v = item.eth[14..].to_vec();
                let l = v.len();
                (v, l)
            }
        };
        out.write_packet(item.iface as u32, ts, &data, orig as u32)?;
        n += 1;
    }
    out.write_stats(0, T0_NS + n * 1_337, Some(n), Some(0))?;
    out.flush()?;
    Ok(n)
}

/// Writes the Ethernet part of the corpus as classic pcap (ns timestamps). Returns the number of frames.
pub fn write_pcap<W: Write>(w: W) -> io::Result<u64> {
    let mut out = PcapWriter::new(w, LinkType::ETHERNET, 65535)?;
    let mut n = 0u64;
    for (k, item) in items()
        .into_iter()
        .filter(|i| i.iface == Iface::Ethernet)
        .enumerate()
    {
        out.write_packet(T0_NS + k as u64 * 2_000, &item.eth, item.eth.len() as u32)?;
        n += 1;
    }
    out.flush()?;
    Ok(n)
}
