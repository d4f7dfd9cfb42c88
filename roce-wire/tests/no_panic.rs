//! Arbitrary bytes into every parser, view and emitter: nothing may panic, and what the lax parser returns
//! must stay inside the buffer it was given.

use proptest::prelude::*;
use roce_wire::*;

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..400)
}

fn view_all<T: AsRef<[u8]> + Copy>(b: T) {
    if let Ok(v) = Bth::new_checked(b) {
        let _ = (
            v.opcode(),
            v.se(),
            v.migreq(),
            v.pad_count(),
            v.tver(),
            v.pkey(),
            v.fecn(),
            v.becn(),
        );
        let _ = (
            v.reserved_4(),
            v.dest_qp(),
            v.ack_req(),
            v.reserved_8(),
            v.psn(),
        );
    }
    if let Ok(v) = Reth::new_checked(b) {
        let _ = (v.va(), v.rkey(), v.dma_len());
    }
    if let Ok(v) = Aeth::new_checked(b) {
        let _ = (v.syndrome(), v.msn());
    }
    if let Ok(v) = Deth::new_checked(b) {
        let _ = (v.qkey(), v.src_qp());
    }
    if let Ok(v) = Rdeth::new_checked(b) {
        let _ = v.ee_context();
    }
    if let Ok(v) = XrcEth::new_checked(b) {
        let _ = v.srq();
    }
    if let Ok(v) = AtomicEth::new_checked(b) {
        let _ = (v.va(), v.rkey(), v.swap_add(), v.compare());
    }
    if let Ok(v) = AtomicAckEth::new_checked(b) {
        let _ = v.orig();
    }
    if let Ok(v) = ImmDt::new_checked(b) {
        let _ = v.imm();
    }
    if let Ok(v) = Ieth::new_checked(b) {
        let _ = v.rkey();
    }
    if let Ok(v) = Grh::new_checked(b) {
        let _ = (
            v.ip_ver(),
            v.tclass(),
            v.flow_label(),
            v.payload_len(),
            v.next_header(),
            v.hop_limit(),
        );
        let _ = (v.sgid(), v.dgid());
    }
    if let Ok(v) = MacControl::new_checked(b) {
        let _ = (v.opcode(), v.pause_time(), v.pfc_enable());
        for prio in [0, 3, 7, 8, usize::MAX] {
            let _ = v.pfc_time(prio);
        }
    }
    if let Ok(v) = Mad::new_checked(b) {
        let _ = (
            v.base_version(),
            v.mgmt_class(),
            v.class_version(),
            v.method(),
            v.status(),
        );
        let _ = (v.transaction_id(), v.attr_id(), v.attr_modifier());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn parsers_never_panic(b in bytes(), wire_len in prop_oneof![0usize..500, Just(usize::MAX), any::<usize>()],
                           split in any::<usize>(), opcode in any::<u8>()) {
        view_all(&b[..]);
        let _ = BthRepr::parse(&b);
        let _ = RethRepr::parse(&b);
        let _ = AethRepr::parse(&b).map(|a| a.kind());
        let _ = DethRepr::parse(&b);
        let _ = RdethRepr::parse(&b);
        let _ = XrcEthRepr::parse(&b);
        let _ = AtomicEthRepr::parse(&b);
        let _ = AtomicAckEthRepr::parse(&b);
        let _ = ImmDtRepr::parse(&b);
        let _ = IethRepr::parse(&b);
        let _ = GrhRepr::parse(&b);
        let _ = MacControlRepr::parse(&b);
        let _ = MadHeaderRepr::parse(&b);
        let _ = parse_cm(&b);
        let _ = CmMadRepr::parse(&b);
        if let Some(layout) = Opcode(opcode).layout() {
            let p = roce_wire::ext::ExtHeaders::parse_partial(&layout, &b);
            prop_assert!(p.len <= b.len());
        }
        let _ = Opcode(opcode).name();

        if let Ok(p) = RocePacket::parse(&b) {
            prop_assert_eq!(p.header_len + p.payload.len() + p.pad.len() + 4, b.len());
        }
        let lax = RocePacket::parse_lax(&b, wire_len);
        let seen = b.len().min(wire_len);
        prop_assert!(lax.header_len <= seen);
        prop_assert!(lax.payload.len() <= seen - lax.header_len);
        if let Some(n) = lax.payload_len {
            prop_assert!(lax.payload.len() <= n);
        }
        prop_assert_eq!(lax.stop.is_none(), lax.icrc.is_some());

        let s = split % (b.len() + 1);
        let (ip, rest) = b.split_at(s);
        let _ = icrc(ip, rest);
        let _ = icrc_matches(ip, rest);
        let _ = icrc_v1(ip, rest);
        let _ = crc32(&b);
    }

    /// Garbage behind a defined opcode and TVer 0, so that the parsers go past the BTH.
    #[test]
    fn garbage_behind_a_good_bth(mut b in prop::collection::vec(any::<u8>(), 12..200), op in 0usize..83,
                                 wire_extra in 0usize..64, cut in any::<usize>()) {
        let defined: Vec<u8> = (0..=255u8).filter(|&o| Opcode(o).is_defined()).collect();
        b[0] = defined[op % defined.len()];
        b[1] &= 0xf0;
        let strict = RocePacket::parse(&b);
        if let Ok(p) = strict {
            prop_assert_eq!(p.header_len + p.payload.len() + p.pad.len() + 4, b.len());
            let mut out = vec![0u8; b.len()];
            prop_assert_eq!(p.emit(&mut out), Ok(b.len()));
        }
        let full = RocePacket::parse_lax(&b, b.len());
        prop_assert_eq!(full.stop, strict.err());
        let k = cut % (b.len() + 1);
        let lax = RocePacket::parse_lax(&b[..k], b.len() + wire_extra);
        prop_assert!(lax.header_len <= k);
        prop_assert!(lax.payload.len() <= k - lax.header_len);
    }

    #[test]
    fn emitters_never_panic(b in bytes(), len in 0usize..200, opcode in any::<u8>(), q in any::<u16>(),
                            bps in any::<u64>()) {
        let mut out = vec![0u8; len];
        if let Ok(p) = RocePacket::parse(&b) {
            let _ = p.emit(&mut out);
        }
        if let Ok(m) = MacControlRepr::parse(&b) {
            let _ = m.emit(&mut out);
            let _ = emit_mac_control([0; 6], None, &m, &mut out);
        }
        let _ = BthRepr { opcode: Opcode(opcode), ..BthRepr::cnp(u32::from(q)) }.emit(&mut out);
        if let Ok(h) = MadHeaderRepr::parse(&b) {
            let _ = h.emit(&mut out);
            let wide = u32::from(q) << (opcode % 16);
            let message = CmMessage::Req { local_comm_id: wide, local_qpn: wide, starting_psn: u32::from(q) };
            let _ = CmMadRepr { header: h, message }.emit(&mut out);
        }
        if let Ok(Some(m)) = CmMadRepr::parse(&b) {
            let _ = m.emit(&mut out);
        }
        let frame = RoceFrame {
            src_mac: [0; 6],
            dst_mac: [0; 6],
            vlan: Some(Vlan { pcp: (q % 9) as u8, dei: false, vid: q }),
            ip: IpSpec::V4 { src: [0; 4], dst: [0; 4], dscp: (q % 70) as u8, ecn: (q % 5) as u8, ttl: 1, ident: q },
            sport: q,
            bth: BthRepr { opcode: Opcode(opcode), ..BthRepr::cnp(1) },
            ext: ExtHeaders::default(),
            payload: &b,
        };
        let _ = frame.emit(&mut out);
        let _ = quanta_to_ps(q, bps);
    }
}
