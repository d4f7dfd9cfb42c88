//! Property tests: emit → parse round trips for every header, every defined opcode and every CM message, exact
//! length errors for every truncation (transport packets, MAC Control, GRH, CM MADs), and frames built by
//! `RoceFrame` checked with an independent ICRC computation.

mod common;

use common::split_roce_v2;
use proptest::prelude::*;
use roce_wire::*;

fn u24() -> impl Strategy<Value = u32> {
    0u32..1 << 24
}

prop_compose! {
    fn arb_bth()(opcode in any::<u8>(), se in any::<bool>(), migreq in any::<bool>(), pad_count in 0u8..4,
                 tver in 0u8..16, pkey in any::<u16>(), fecn in any::<bool>(), becn in any::<bool>(),
                 dest_qp in u24(), ack_req in any::<bool>(), psn in u24()) -> BthRepr {
        BthRepr { opcode: Opcode(opcode), se, migreq, pad_count, tver, pkey, fecn, becn, dest_qp, ack_req, psn }
    }
}

prop_compose! {
    fn arb_reth()(va in any::<u64>(), rkey in any::<u32>(), dma_len in any::<u32>()) -> RethRepr {
        RethRepr { va, rkey, dma_len }
    }
}
prop_compose! {
    fn arb_aeth()(syndrome in any::<u8>(), msn in u24()) -> AethRepr { AethRepr { syndrome, msn } }
}
prop_compose! {
    fn arb_deth()(qkey in any::<u32>(), src_qp in u24()) -> DethRepr { DethRepr { qkey, src_qp } }
}
prop_compose! {
    fn arb_atomic()(va in any::<u64>(), rkey in any::<u32>(), swap_add in any::<u64>(), compare in any::<u64>())
        -> AtomicEthRepr { AtomicEthRepr { va, rkey, swap_add, compare } }
}

prop_compose! {
    fn arb_mad_header()(base_version in any::<u8>(), class_version in any::<u8>(), method in any::<u8>(),
                        status in any::<u16>(), transaction_id in any::<u64>(), attr_modifier in any::<u32>())
        -> MadHeaderRepr {
        MadHeaderRepr {
            base_version, mgmt_class: roce_wire::mad::MGMT_CLASS_CM, class_version, method, status,
            transaction_id, attr_id: 0, attr_modifier,
        }
    }
}

/// One of each CM message the parser reads, plus an attribute it only names, all from the same random fields.
fn cm_messages(ids: [u32; 2], qpn: u32, psn: u32, other: u16) -> Vec<CmMessage> {
    let [local_comm_id, remote_comm_id] = ids;
    vec![
        CmMessage::Req {
            local_comm_id,
            local_qpn: qpn,
            starting_psn: psn,
        },
        CmMessage::Rep {
            local_comm_id,
            remote_comm_id,
            local_qpn: qpn,
            starting_psn: psn,
        },
        CmMessage::Rtu {
            local_comm_id,
            remote_comm_id,
        },
        CmMessage::Dreq {
            local_comm_id,
            remote_comm_id,
            remote_qpn: qpn,
        },
        CmMessage::Drep {
            local_comm_id,
            remote_comm_id,
        },
        CmMessage::Other { attr_id: other },
    ]
}

/// How many bytes `parse_cm` needs for a message: up to the end of the last field it reads.
fn cm_needs(m: &CmMessage) -> usize {
    match m {
        CmMessage::Req { .. } => 71,
        CmMessage::Rep { .. } => 47,
        CmMessage::Dreq { .. } => 35,
        CmMessage::Rtu { .. } | CmMessage::Drep { .. } => 32,
        CmMessage::Other { .. } => 24,
    }
}

/// Attribute IDs that `parse_cm` reports as `Other`.
fn other_attr() -> impl Strategy<Value = u16> {
    any::<u16>().prop_filter("a CM message with fields", |a| {
        !(0x10..=0x16).contains(a) || *a == 0x11 || *a == 0x12
    })
}

/// Every defined opcode.
fn defined_opcodes() -> Vec<Opcode> {
    (0..=255u8).map(Opcode).filter(|o| o.is_defined()).collect()
}

/// Headers with random contents, present exactly where `layout` says.
fn arb_ext(layout: ExtLayout) -> impl Strategy<Value = ExtHeaders> {
    (
        u24(),
        u24(),
        arb_deth(),
        arb_reth(),
        arb_atomic(),
        arb_aeth(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(
            move |(srq, ee, deth, reth, atomic, aeth, orig, imm, ieth)| ExtHeaders {
                xrceth: layout.xrceth.then_some(XrcEthRepr { srq }),
                rdeth: layout.rdeth.then_some(RdethRepr { ee_context: ee }),
                deth: layout.deth.then_some(deth),
                reth: layout.reth.then_some(reth),
                atomic_eth: layout.atomic_eth.then_some(atomic),
                aeth: layout.aeth.then_some(aeth),
                atomic_ack_eth: layout.atomic_ack_eth.then_some(AtomicAckEthRepr { orig }),
                imm: layout.imm.then_some(imm),
                ieth: layout.ieth.then_some(ieth),
            },
        )
}

/// A valid packet: defined opcode, TVer 0, the right headers, any payload (a CNP's is at least 16 bytes).
fn arb_packet() -> impl Strategy<Value = (BthRepr, ExtHeaders, Vec<u8>, u32)> {
    (prop::sample::select(defined_opcodes()), arb_bth()).prop_flat_map(|(opcode, bth)| {
        let layout = opcode.layout().unwrap();
        let min = if layout.cnp { 16 } else { 0 };
        (
            Just(BthRepr {
                opcode,
                tver: 0,
                ..bth
            }),
            arb_ext(layout),
            prop::collection::vec(any::<u8>(), min..min + 70),
            any::<u32>(),
        )
    })
}

fn emit_packet(
    bth: BthRepr,
    ext: ExtHeaders,
    payload: &[u8],
    icrc: u32,
) -> (RocePacket<'_>, Vec<u8>) {
    let pkt = RocePacket {
        icrc,
        ..RocePacket::new(bth, ext, payload).unwrap()
    };
    let mut buf = vec![0u8; pkt.wire_len()];
    assert_eq!(pkt.emit(&mut buf), Ok(buf.len()));
    (pkt, buf)
}

/// The wire layout of the headers after the BTH, as (layer, offset, length), written out from the IBTA order.
fn header_layers(ext: &ExtHeaders) -> Vec<(Layer, usize, usize)> {
    let mut v = vec![(Layer::Bth, 0, 12)];
    let mut off = 12;
    let mut push = |present: bool, layer, len| {
        if present {
            v.push((layer, off, len));
            off += len;
        }
    };
    push(ext.xrceth.is_some(), Layer::XrcEth, 4);
    push(ext.rdeth.is_some(), Layer::Rdeth, 4);
    push(ext.deth.is_some(), Layer::Deth, 8);
    push(ext.reth.is_some(), Layer::Reth, 16);
    push(ext.atomic_eth.is_some(), Layer::AtomicEth, 28);
    push(ext.aeth.is_some(), Layer::Aeth, 4);
    push(ext.atomic_ack_eth.is_some(), Layer::AtomicAckEth, 8);
    push(ext.imm.is_some(), Layer::ImmDt, 4);
    push(ext.ieth.is_some(), Layer::Ieth, 4);
    v
}

fn len_err(layer: Layer, layer_start_offset: usize, required_len: usize, len: usize) -> Error {
    Error::Len(LenError {
        required_len,
        len,
        layer,
        layer_start_offset,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn bth_round_trip(bth in arb_bth(), junk in any::<[u8; 12]>()) {
        let mut buf = junk;
        bth.emit(&mut buf).unwrap();
        prop_assert_eq!(BthRepr::parse(&buf), Ok(bth));
        let v = Bth::new_checked(&buf[..]).unwrap();
        prop_assert_eq!((v.reserved_4(), v.reserved_8()), (0, 0));
        prop_assert_eq!(v.psn(), bth.psn);
    }

    #[test]
    fn ext_header_round_trips(reth in arb_reth(), aeth in arb_aeth(), deth in arb_deth(), atomic in arb_atomic(),
                              v24 in u24(), orig in any::<u64>(), junk in any::<[u8; 28]>()) {
        let mut b = junk;
        reth.emit(&mut b).unwrap();
        prop_assert_eq!(RethRepr::parse(&b), Ok(reth));
        aeth.emit(&mut b).unwrap();
        prop_assert_eq!(AethRepr::parse(&b), Ok(aeth));
        prop_assert_eq!(AethRepr { syndrome: aeth.kind().syndrome(), ..aeth }, aeth);
        deth.emit(&mut b).unwrap();
        prop_assert_eq!(DethRepr::parse(&b), Ok(deth));
        atomic.emit(&mut b).unwrap();
        prop_assert_eq!(AtomicEthRepr::parse(&b), Ok(atomic));
        AtomicAckEthRepr { orig }.emit(&mut b).unwrap();
        prop_assert_eq!(AtomicAckEthRepr::parse(&b), Ok(AtomicAckEthRepr { orig }));
        RdethRepr { ee_context: v24 }.emit(&mut b).unwrap();
        prop_assert_eq!(RdethRepr::parse(&b), Ok(RdethRepr { ee_context: v24 }));
        XrcEthRepr { srq: v24 }.emit(&mut b).unwrap();
        prop_assert_eq!(XrcEthRepr::parse(&b), Ok(XrcEthRepr { srq: v24 }));
        ImmDtRepr(orig as u32).emit(&mut b).unwrap();
        prop_assert_eq!(ImmDtRepr::parse(&b), Ok(ImmDtRepr(orig as u32)));
        IethRepr(v24).emit(&mut b).unwrap();
        prop_assert_eq!(IethRepr::parse(&b), Ok(IethRepr(v24)));
    }

    #[test]
    fn packet_round_trip((bth, ext, payload, icrc) in arb_packet()) {
        let (pkt, buf) = emit_packet(bth, ext, &payload, icrc);
        prop_assert_eq!(buf.len() % 4, 0, "packets end on a 4-byte boundary");
        let back = RocePacket::parse(&buf).unwrap();
        prop_assert_eq!(back, pkt);
        prop_assert_eq!(back.payload, &payload[..]);
        prop_assert_eq!(back.header_len, 12 + bth.opcode.layout().unwrap().len());
        let lax = RocePacket::parse_lax(&buf, buf.len());
        prop_assert!(lax.is_complete());
        prop_assert_eq!((lax.bth, lax.ext, lax.header_len), (Some(back.bth), back.ext, back.header_len));
        prop_assert_eq!(lax.payload_len, Some(payload.len()));
        prop_assert_eq!(lax.icrc, Some(icrc));
    }

    /// Every truncation: the strict parser names exactly the layer that was cut, with its offset and both
    /// lengths; the lax parser, told the real wire length, keeps every header that fits.
    #[test]
    fn every_truncation((bth, ext, payload, icrc) in arb_packet()) {
        let (pkt, buf) = emit_packet(bth, ext, &payload, icrc);
        let layers = header_layers(&pkt.ext);
        let h = pkt.header_len;
        let pad = usize::from(pkt.bth.pad_count);
        let cnp = pkt.bth.opcode == Opcode::CNP;
        for k in 0..buf.len() {
            let cut = &buf[..k];
            // Strict.
            let expected = match layers.iter().find(|&&(_, off, len)| k < off + len) {
                Some(&(layer, off, len)) => Err(len_err(layer, off, len, k - off)),
                None => {
                    let tail = k - h;
                    if tail < 4 {
                        Err(len_err(Layer::Icrc, h, 4, tail))
                    } else if tail - 4 < pad {
                        Err(len_err(Layer::Pad, h, pad, tail - 4))
                    } else if cnp && tail - 4 - pad < 16 {
                        Err(len_err(Layer::CnpReserved, h, 16, tail - 4 - pad))
                    } else {
                        Ok(tail - 4 - pad)
                    }
                }
            };
            match (RocePacket::parse(cut), expected) {
                (Err(e), Err(x)) => prop_assert_eq!(e, x, "cut at {}", k),
                // A shorter payload cannot be told from a cut one without the wire length.
                (Ok(p), Ok(n)) => prop_assert_eq!(p.payload.len(), n, "cut at {}", k),
                (got, want) => prop_assert!(false, "cut at {}: got {:?}, want {:?}", k, got, want),
            }

            // Lax, with the length the packet had on the wire.
            let lax = RocePacket::parse_lax(cut, buf.len());
            prop_assert_eq!(lax.icrc, None);
            prop_assert_eq!(lax.bth, (k >= 12).then_some(pkt.bth));
            let fitting: usize = layers.iter().filter(|&&(_, off, len)| off + len <= k).map(|l| l.2).sum();
            prop_assert_eq!(lax.header_len, fitting);
            let e = lax.ext;
            let fits = |layer| layers.iter().any(|&(l, off, len)| l == layer && off + len <= k);
            prop_assert_eq!(e.xrceth.is_some(), fits(Layer::XrcEth));
            prop_assert_eq!(e.rdeth.is_some(), fits(Layer::Rdeth));
            prop_assert_eq!(e.deth.is_some(), fits(Layer::Deth));
            prop_assert_eq!(e.reth.is_some(), fits(Layer::Reth));
            prop_assert_eq!(e.atomic_eth.is_some(), fits(Layer::AtomicEth));
            prop_assert_eq!(e.aeth.is_some(), fits(Layer::Aeth));
            prop_assert_eq!(e.atomic_ack_eth.is_some(), fits(Layer::AtomicAckEth));
            prop_assert_eq!(e.imm.is_some(), fits(Layer::ImmDt));
            prop_assert_eq!(e.ieth.is_some(), fits(Layer::Ieth));
            if e.xrceth.is_some() { prop_assert_eq!(e.xrceth, pkt.ext.xrceth); }
            if e.deth.is_some() { prop_assert_eq!(e.deth, pkt.ext.deth); }
            if e.reth.is_some() { prop_assert_eq!(e.reth, pkt.ext.reth); }
            if e.aeth.is_some() { prop_assert_eq!(e.aeth, pkt.ext.aeth); }
            if e.imm.is_some() { prop_assert_eq!(e.imm, pkt.ext.imm); }
            let stop = lax.stop.unwrap();
            prop_assert!(stop.is_len());
            if k < h {
                // Cut inside the headers: the payload's length still follows from the opcode's layout.
                prop_assert_eq!(lax.payload_len, (k >= 12).then_some(payload.len()));
                prop_assert_eq!(Err(stop), RocePacket::parse(cut).map(|_| ()));
            } else {
                prop_assert_eq!(lax.payload_len, Some(payload.len()));
                let n = payload.len();
                prop_assert_eq!(lax.payload, &payload[..(k - h).min(n)]);
                let payload_layer = if cnp { Layer::CnpReserved } else { Layer::Payload };
                let want = if k < h + n {
                    len_err(payload_layer, h, n, k - h)
                } else if k < h + n + pad {
                    len_err(Layer::Pad, h + n, pad, k - h - n)
                } else {
                    len_err(Layer::Icrc, h + n + pad, 4, k - h - n - pad)
                };
                prop_assert_eq!(stop, want);
            }
        }
    }

    #[test]
    fn undefined_opcodes_stop_after_the_bth(bth in arb_bth(), rest in prop::collection::vec(any::<u8>(), 0..40)) {
        prop_assume!(!bth.opcode.is_defined());
        let mut buf = vec![0u8; 12];
        bth.emit(&mut buf).unwrap();
        buf.extend_from_slice(&rest);
        prop_assert!(
            matches!(RocePacket::parse(&buf), Err(Error::Malformed { layer: Layer::Bth, offset: 0, .. })),
            "undefined opcode must be rejected"
        );
        let lax = RocePacket::parse_lax(&buf, buf.len());
        prop_assert_eq!(lax.bth, Some(bth));
        prop_assert_eq!(lax.header_len, 12);
        prop_assert_eq!(lax.ext, ExtHeaders::default());
        prop_assert!(matches!(lax.stop, Some(Error::Malformed { .. })), "lax stop must be Malformed");
    }

    #[test]
    fn mac_control_round_trip(enable in any::<u16>(), quanta in any::<[u16; 8]>(), q in any::<u16>(),
                              opcode in any::<u16>(), pcp in 0u8..8, vid in 0u16..4096, tagged in any::<bool>()) {
        let mut others = vec![MacControlRepr::Pause { quanta: q }, MacControlRepr::Pfc(PfcRepr { enable, quanta })];
        if opcode != OPCODE_PAUSE && opcode != OPCODE_PFC {
            others.push(MacControlRepr::Other { opcode });
        }
        for ctl in others {
            let mut buf = [0u8; 20];
            let n = ctl.emit(&mut buf).unwrap();
            prop_assert_eq!(MacControlRepr::parse(&buf[..n]), Ok(ctl));
            let vlan = tagged.then_some(Vlan { pcp, dei: false, vid });
            let mut frame = [0u8; 64];
            let len = emit_mac_control([2, 0, 0, 0, 0, 1], vlan, &ctl, &mut frame).unwrap();
            prop_assert_eq!(len, 60);
            let l2 = if tagged { 18 } else { 14 };
            prop_assert_eq!(u16::from_be_bytes([frame[l2 - 2], frame[l2 - 1]]), ETHERTYPE_MAC_CONTROL);
            prop_assert_eq!(MacControlRepr::parse(&frame[l2..len]), Ok(ctl));
            if tagged {
                prop_assert_eq!(frame[14] >> 5, pcp);
            }
        }
        let p = PfcRepr { enable, quanta };
        for prio in 0..8u8 {
            prop_assert_eq!(p.enabled(prio), enable >> prio & 1 == 1);
        }
    }

    #[test]
    fn grh_round_trip(tclass in any::<u8>(), flow_label in 0u32..1 << 20, payload_len in any::<u16>(),
                      next_header in any::<u8>(), hop_limit in any::<u8>(), sgid in any::<[u8; 16]>(),
                      dgid in any::<[u8; 16]>()) {
        let g = GrhRepr { tclass, flow_label, payload_len, next_header, hop_limit, sgid, dgid };
        let mut buf = [0u8; 40];
        g.emit(&mut buf).unwrap();
        prop_assert_eq!(GrhRepr::parse(&buf), Ok(g));
    }

    #[test]
    fn cm_mad_round_trip(header in arb_mad_header(), ids in any::<[u32; 2]>(), qpn in u24(), psn in u24(),
                         other in other_attr(), junk in any::<u8>()) {
        for message in cm_messages(ids, qpn, psn, other) {
            let repr = CmMadRepr { header: MadHeaderRepr { attr_id: message.attr_id(), ..header }, message };
            let mut buf = [junk; 260];
            repr.emit(&mut buf).unwrap();
            prop_assert!(buf[256..].iter().all(|&b| b == junk), "emit stays within the MAD");
            prop_assert_eq!(CmMadRepr::parse(&buf[..256]), Ok(Some(repr)));
            prop_assert_eq!(parse_cm(&buf), Ok(Some(message)));
            prop_assert_eq!(MadHeaderRepr::parse(&buf), Ok(repr.header));
            prop_assert!(buf[cm_needs(&message)..256].iter().all(|&b| b == 0), "zero after the last field");
        }
    }

    /// PFC, PAUSE and other MAC Control payloads cut anywhere: the opcode first, then the body, which starts at
    /// byte 2 and is measured from there.
    #[test]
    fn every_truncation_mac_control(enable in any::<u16>(), quanta in any::<[u16; 8]>(), q in any::<u16>(),
                                    opcode in any::<u16>()) {
        let mut ctls = vec![(MacControlRepr::Pause { quanta: q }, Layer::Pause),
                            (MacControlRepr::Pfc(PfcRepr { enable, quanta }), Layer::Pfc)];
        if opcode != OPCODE_PAUSE && opcode != OPCODE_PFC {
            ctls.push((MacControlRepr::Other { opcode }, Layer::MacControl));
        }
        for (ctl, body) in ctls {
            let mut buf = [0u8; 20];
            let n = ctl.emit(&mut buf).unwrap();
            prop_assert_eq!(n, ctl.len());
            prop_assert_eq!(MacControlRepr::parse(&buf[..n]), Ok(ctl));
            for k in 0..n {
                let want = if k < 2 {
                    len_err(Layer::MacControl, 0, 2, k)
                } else {
                    len_err(body, 2, n - 2, k - 2)
                };
                prop_assert_eq!(MacControlRepr::parse(&buf[..k]), Err(want), "{:?} cut at {}", ctl, k);
                let mut out = [0u8; 20];
                prop_assert_eq!(ctl.emit(&mut out[..k]), Err(want), "{:?} emitted into {}", ctl, k);
            }
        }
    }

    #[test]
    fn every_truncation_grh(tclass in any::<u8>(), flow_label in 0u32..1 << 20, payload_len in any::<u16>(),
                            hop_limit in any::<u8>(), sgid in any::<[u8; 16]>(), dgid in any::<[u8; 16]>()) {
        let g = GrhRepr { tclass, flow_label, payload_len, next_header: 0x1b, hop_limit, sgid, dgid };
        let mut buf = [0u8; 40];
        g.emit(&mut buf).unwrap();
        for k in 0..40 {
            prop_assert_eq!(GrhRepr::parse(&buf[..k]), Err(len_err(Layer::Grh, 0, 40, k)), "cut at {}", k);
            prop_assert!(Grh::new_checked(&buf[..k]).is_err());
            let mut out = [0u8; 40];
            prop_assert_eq!(g.emit(&mut out[..k]), Err(len_err(Layer::Grh, 0, 40, k)));
        }
    }

    /// CM MADs cut anywhere. The strict parser wants the whole 256 bytes; `parse_cm`, made for snap lengths,
    /// wants the header and then the bytes up to the last field of the message, and reads the message as soon as
    /// they are there.
    #[test]
    fn every_truncation_cm_mad(header in arb_mad_header(), ids in any::<[u32; 2]>(), qpn in u24(), psn in u24(),
                               other in other_attr()) {
        for message in cm_messages(ids, qpn, psn, other) {
            let repr = CmMadRepr { header: MadHeaderRepr { attr_id: message.attr_id(), ..header }, message };
            let mut buf = [0u8; 256];
            repr.emit(&mut buf).unwrap();
            let need = cm_needs(&message);
            for k in 0..256 {
                let cut = &buf[..k];
                prop_assert_eq!(CmMadRepr::parse(cut), Err(len_err(Layer::Mad, 0, 256, k)), "{:?} cut at {}", message, k);
                let mut out = [0u8; 256];
                prop_assert_eq!(repr.emit(&mut out[..k]), Err(len_err(Layer::Mad, 0, 256, k)));
                let header_want = if k < 24 { Err(len_err(Layer::Mad, 0, 24, k)) } else { Ok(repr.header) };
                prop_assert_eq!(MadHeaderRepr::parse(cut), header_want);
                let lax_want = if k < 24 {
                    Err(len_err(Layer::Mad, 0, 24, k))
                } else if k < need {
                    Err(len_err(Layer::Mad, 0, need, k))
                } else {
                    Ok(Some(message))
                };
                prop_assert_eq!(parse_cm(cut), lax_want, "{:?} cut at {}", message, k);
            }
        }
    }

    /// Frames built by `RoceFrame` carry a good ICRC, computed here once more from the masking rules by a
    /// bit-at-a-time CRC that shares no code with the crate, and their UDP payload parses back.
    #[test]
    fn roce_frame_round_trip((bth, ext, payload, _) in arb_packet(), v6 in any::<bool>(), sport in any::<u16>(),
                             dscp in 0u8..64, ecn in 0u8..4, flow_label in 0u32..1 << 20, ttl in any::<u8>(),
                             vlan in prop::option::of((0u8..8, any::<bool>(), 0u16..4096)),
                             a4 in any::<[u8; 4]>(), a6 in any::<[u8; 16]>()) {
        let ip = if v6 {
            IpSpec::V6 { src: a6, dst: [0xfd; 16], dscp, ecn, flow_label, hop_limit: ttl }
        } else {
            IpSpec::V4 { src: a4, dst: [10, 0, 0, 2], dscp, ecn, ttl, ident: sport ^ 0x5555 }
        };
        let frame = RoceFrame {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            vlan: vlan.map(|(pcp, dei, vid)| Vlan { pcp, dei, vid }),
            ip,
            sport,
            bth,
            ext,
            payload: &payload,
        };
        let mut buf = vec![0u8; frame.len()];
        prop_assert_eq!(frame.emit(&mut buf), Ok(frame.len()));
        let s = split_roce_v2(&buf).unwrap();
        prop_assert_eq!(s.ip.as_ptr() as usize - buf.as_ptr() as usize, frame.ip_offset());
        prop_assert!(icrc_matches(s.ip, s.udp).unwrap());
        let (covered, stored) = s.udp.split_at(s.udp.len() - 4);
        prop_assert_eq!(independent_icrc(s.ip, covered).to_le_bytes(), [stored[0], stored[1], stored[2], stored[3]]);
        let p = RocePacket::parse(&s.udp[8..]).unwrap();
        prop_assert_eq!(p.bth, BthRepr { pad_count: pad_for(payload.len()), ..bth });
        prop_assert_eq!(p.ext, ext);
        prop_assert_eq!(p.payload, &payload[..]);
        if !v6 {
            // The IPv4 header checksum verifies.
            let mut sum = 0u32;
            for w in s.ip.chunks(2) {
                sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
            }
            while sum > 0xffff { sum = (sum & 0xffff) + (sum >> 16); }
            prop_assert_eq!(sum, 0xffff);
        }
    }
}

/// The ICRC from the annex's rules, written without the crate: pseudo LRH of ones, variant fields set to ones.
fn independent_icrc(ip: &[u8], udp_to_icrc: &[u8]) -> u32 {
    let mut bytes = vec![0xffu8; 8];
    let mut iph = ip.to_vec();
    if iph[0] >> 4 == 4 {
        iph[1] = 0xff;
        iph[8] = 0xff;
        iph[10] = 0xff;
        iph[11] = 0xff;
    } else {
        iph[0] |= 0x0f;
        iph[1] = 0xff;
        iph[2] = 0xff;
        iph[3] = 0xff;
        iph[7] = 0xff;
    }
    bytes.extend_from_slice(&iph);
    let mut rest = udp_to_icrc.to_vec();
    rest[6] = 0xff;
    rest[7] = 0xff;
    rest[8 + 4] = 0xff;
    bytes.extend_from_slice(&rest);
    let mut c = !0u32;
    for b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// The IPv6 masking by hand: the variant fields (traffic class, flow label, hop limit) and BTH byte 4 do not
/// change the ICRC, every other header field does.
#[test]
fn ipv6_icrc_masks_exactly_the_variant_fields() {
    let build = |dscp, ecn, flow_label, hop_limit, src0: u8, becn| {
        let frame = RoceFrame {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            vlan: None,
            ip: IpSpec::V6 {
                src: [src0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                dst: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                dscp,
                ecn,
                flow_label,
                hop_limit,
            },
            sport: 0xc000,
            bth: BthRepr {
                becn,
                ..BthRepr::cnp(0x1234)
            },
            ext: ExtHeaders::default(),
            payload: &[0; 16],
        };
        let mut buf = vec![0u8; frame.len()];
        frame.emit(&mut buf).unwrap();
        assert_eq!(buf.len(), 14 + 40 + 8 + 12 + 16 + 4);
        // Traffic class and flow label land where IPv6 puts them.
        assert_eq!(buf[14] >> 4, 6);
        assert_eq!(((buf[14] & 0x0f) << 4) | (buf[15] >> 4), (dscp << 2) | ecn);
        assert_eq!(
            u32::from_be_bytes([0, buf[15] & 0x0f, buf[16], buf[17]]),
            flow_label
        );
        assert_eq!(buf[21], hop_limit);
        let icrc = u32::from_le_bytes(buf[buf.len() - 4..].try_into().unwrap());
        assert_eq!(
            icrc,
            independent_icrc(&buf[14..54], &buf[54..buf.len() - 4])
        );
        icrc
    };
    let base = build(26, 0, 0x12345, 64, 0xfe, true);
    assert_eq!(
        base,
        build(48, 3, 0x12345, 64, 0xfe, true),
        "traffic class is masked"
    );
    assert_eq!(
        base,
        build(26, 0, 0xfffff, 64, 0xfe, true),
        "flow label is masked"
    );
    assert_eq!(
        base,
        build(26, 0, 0x12345, 1, 0xfe, true),
        "hop limit is masked"
    );
    assert_eq!(
        base,
        build(26, 0, 0x12345, 64, 0xfe, false),
        "BTH byte 4 is masked"
    );
    assert_ne!(
        base,
        build(26, 0, 0x12345, 64, 0xfd, true),
        "the source address is covered"
    );
}
