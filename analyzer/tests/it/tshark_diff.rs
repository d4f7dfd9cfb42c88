//! Differential test: `roce-analyzer decode --json` against tshark, field by field, frame by frame, on the
//! generated corpus and on every public capture in ../shared/captures.
//!
//! The compared fields are the tshark column of the table in wire.md. A field must agree in presence as well
//! as value, so a header one side decodes and the other misses is a failure too. A frame we call `other` must be
//! one where tshark finds no BTH and no MAC Control header. The few places where tshark
//! 4.0 decodes differently on purpose are listed in `tshark_blind_spot` with the reason.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::{analyzer_json, shared_capture, tshark_fields, workspace};
use serde_json::Value;

/// (our JSON path, tshark field). Paths index nested objects with '.'.
const FIELDS: &[(&str, &str)] = &[
    ("opcode", "infiniband.bth.opcode"),
    ("dest_qp", "infiniband.bth.destqp"),
    ("psn", "infiniband.bth.psn"),
    ("ack_req", "infiniband.bth.a"),
    ("se", "infiniband.bth.se"),
    ("pad", "infiniband.bth.padcnt"),
    ("pkey", "infiniband.bth.p_key"),
    ("reth.va|atomic.va", "infiniband.reth.va"),
    ("reth.rkey|atomic.rkey", "infiniband.reth.r_key"),
    ("reth.len", "infiniband.reth.dmalen"),
    ("aeth.syndrome", "infiniband.aeth.syndrome"),
    ("aeth.msn", "infiniband.aeth.msn"),
    ("deth.qkey", "infiniband.deth.q_key"),
    ("deth.src_qp", "infiniband.deth.srcqp"),
    ("imm", "infiniband.immdt"),
    ("ieth", "infiniband.ieth"),
    ("atomic.swap_add", "infiniband.atomiceth.swapdt"),
    ("atomic.compare", "infiniband.atomiceth.cmpdt"),
    ("atomic_ack", "infiniband.atomicacketh.origremdt"),
    ("ecn", "ip.dsfield.ecn|ipv6.tclass.ecn"),
    ("dscp", "ip.dsfield.dscp|ipv6.tclass.dscp"),
    // The outer tag decides the priority. tshark names an 802.1ad outer tag ieee8021ad and keeps vlan.* for
    // the inner one, so the outer tag is whichever of the two it shows first.
    ("vlan", "ieee8021ad.id|vlan.id"),
    ("pcp", "ieee8021ad.priority|vlan.priority"),
    // RoCEv1 carries DSCP and ECN in the GRH traffic class.
    ("grh_tclass", "infiniband.grh.tclass"),
    // Our JSON has no MAC Control opcode: the kind stands for it (see `ours`).
    ("mac_opcode", "macc.opcode"),
    ("pfc_enable", "macc.cbfc.enbv"),
    ("pfc_quanta.0", "macc.cbfc.pause_time.c0"),
    ("pfc_quanta.1", "macc.cbfc.pause_time.c1"),
    ("pfc_quanta.2", "macc.cbfc.pause_time.c2"),
    ("pfc_quanta.3", "macc.cbfc.pause_time.c3"),
    ("pfc_quanta.4", "macc.cbfc.pause_time.c4"),
    ("pfc_quanta.5", "macc.cbfc.pause_time.c5"),
    ("pfc_quanta.6", "macc.cbfc.pause_time.c6"),
    ("pfc_quanta.7", "macc.cbfc.pause_time.c7"),
    ("pause_quanta", "macc.pause_time"),
];

/// Looks up `a.b` or `a.0` (array index) in a JSON object; `x|y` takes the first present.
/// `grh_tclass` is derived: a RoCEv1 frame's DSCP and ECN put back together. So is `mac_opcode`: a PFC or
/// PAUSE kind is our claim about the MAC Control opcode, and tshark reads that opcode itself.
fn ours(frame: &Value, path: &str) -> Option<u64> {
    if path == "mac_opcode" {
        return match frame.get("kind").and_then(Value::as_str) {
            Some("pfc") => Some(0x0101),
            Some("pause") => Some(0x0001),
            _ => None,
        };
    }
    if path == "grh_tclass" {
        if frame.get("roce_version").and_then(Value::as_u64) != Some(1) {
            return None;
        }
        return Some(frame.get("dscp")?.as_u64()? << 2 | frame.get("ecn")?.as_u64()?);
    }
    path.split('|').find_map(|p| {
        let mut v = frame;
        for part in p.split('.') {
            v = match part.parse::<usize>() {
                Ok(i) => v.get(i)?,
                Err(_) => v.get(part)?,
            };
        }
        match v {
            Value::Bool(b) => Some(u64::from(*b)),
            other => other.as_u64(),
        }
    })
}

/// tshark prints decimal, 0x-hex, booleans as 1/0 or True/False, and FT_BYTES as bare hex.
fn theirs(cell: &str, field: &str) -> Option<u64> {
    let c = cell.trim();
    if c.is_empty() {
        return None;
    }
    if let Some(h) = c.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).ok();
    }
    match c {
        "True" => return Some(1),
        "False" => return Some(0),
        _ => {}
    }
    if field == "infiniband.immdt" || field == "infiniband.ieth" {
        return u64::from_str_radix(&c.replace(':', ""), 16).ok();
    }
    c.parse()
        .ok()
        .or_else(|| panic!("cannot read tshark value {c:?} of {field}"))
}

/// Places where tshark 4.0 cannot be the reference, each with the evidence.
fn tshark_blind_spot(frame: &Value, field: &str) -> bool {
    let transport = frame.get("opcode").and_then(Value::as_u64).unwrap_or(0) >> 5;
    let ext_field = field.starts_with("infiniband.") && !field.starts_with("infiniband.bth");
    // RoCEv1 has no IP header: its DSCP/ECN are compared through infiniband.grh.tclass instead.
    if frame.get("roce_version").and_then(Value::as_u64) == Some(1) && field.starts_with("ip") {
        return true;
    }
    match transport {
        // RD (0b010): tshark 4.0 starts the RDETH four bytes too late. On corpus frame 63 the bytes after
        // the BTH are `00 18 90 7b | 7d e4 22 48 00 0e af 6d` (RDETH, then DETH with source QP 0x0eaf6d);
        // tshark shows "E2E Context: 962413" (0x0eaf6d) and takes the payload for the DETH. Every RD
        // extension header after that is shifted, so only the BTH is compared for RD.
        2 => ext_field,
        // XRC (0b101): tshark 4.0 does not dissect XRC beyond the BTH.
        5 => ext_field,
        _ => false,
    }
}

/// Compares every frame; returns how many (frame, field) pairs with a value on either side were compared,
/// and the frames by kind. Each frame must have given at least the fields its headers always hold.
fn compare(file: &Path, decode_as: &[&str]) -> (u64, BTreeMap<String, u64>) {
    let ours_frames = analyzer_json(file);
    let tshark_names: Vec<&str> = FIELDS.iter().flat_map(|(_, t)| t.split('|')).collect();
    let theirs_rows = tshark_fields(file, decode_as, &tshark_names);
    assert_eq!(
        ours_frames.len(),
        theirs_rows.len(),
        "{}: frame count differs from tshark",
        file.display()
    );
    let mut mismatches = Vec::new();
    let mut compared = 0u64;
    for (ours_frame, row) in ours_frames.iter().zip(&theirs_rows) {
        let num = ours_frame["frame"].as_u64().unwrap_or(0);
        let cells: BTreeMap<&str, &str> = tshark_names
            .iter()
            .copied()
            .zip(row.iter().map(String::as_str))
            .collect();
        let kind = ours_frame["kind"].as_str().unwrap_or("");
        // A frame we call `other` is compared field by field with nothing, so instead tshark must not find a
        // BTH or a MAC Control header in it either: otherwise we would be dropping RoCE or PFC on the floor.
        if kind == "other" {
            for (name, cell) in &cells {
                if (name.starts_with("infiniband.bth") || name.starts_with("macc"))
                    && !cell.trim().is_empty()
                {
                    mismatches.push(format!(
                        "frame {num} (other): tshark has {name} = {}",
                        cell.trim()
                    ));
                }
            }
            continue;
        }
        for (our_path, their_names) in FIELDS {
            let t = their_names
                .split('|')
                .find_map(|n| theirs(cells.get(n).copied().unwrap_or(""), n));
            // A PFC or PAUSE frame has no IP header or BTH to compare.
            let transport_field =
                their_names.starts_with("infiniband") || their_names.starts_with("ip");
            if matches!(kind, "pfc" | "pause") && transport_field {
                continue;
            }
            if tshark_blind_spot(ours_frame, their_names) {
                continue;
            }
            let o = ours(ours_frame, our_path);
            // Absent on both sides agrees, but proves nothing about the decoder: only fields with a
            // value count as compared.
            if o.is_some() || t.is_some() {
                compared += 1;
            }
            if o != t {
                mismatches.push(format!(
                    "frame {num} ({kind}) {our_path}: ours {o:?}, tshark {their_names} {t:?}"
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{}: {} mismatches of {compared} compared fields:\n{}",
        file.display(),
        mismatches.len(),
        mismatches[..mismatches.len().min(40)].join("\n")
    );
    let mut kinds = BTreeMap::new();
    for f in &ours_frames {
        *kinds
            .entry(f["kind"].as_str().unwrap_or("?").to_string())
            .or_insert(0) += 1;
    }
    // A RoCE or CNP frame's BTH always holds seven compared fields (opcode, QP, PSN, A, SE, pad count,
    // P_Key), a PFC frame ten (the MAC Control opcode, the enable vector and eight quanta), a PAUSE frame
    // two (the opcode and its quanta).
    let least = 7 * (kind(&kinds, "roce") + kind(&kinds, "cnp"))
        + 10 * kind(&kinds, "pfc")
        + 2 * kind(&kinds, "pause");
    assert!(
        compared >= least,
        "{}: {compared} fields with a value compared, fewer than the {least} its frames' headers hold: {kinds:?}",
        file.display()
    );
    (compared, kinds)
}

fn kind(kinds: &BTreeMap<String, u64>, k: &str) -> u64 {
    kinds.get(k).copied().unwrap_or(0)
}

#[test]
fn corpus_pcapng_agrees_with_tshark() {
    let (compared, kinds) = compare(&workspace().join("samples/corpus/corpus.pcapng"), &[]);
    assert!(compared > 1000, "only {compared} fields compared");
    assert!(
        kind(&kinds, "roce") > 100 && kind(&kinds, "cnp") == 6,
        "{kinds:?}"
    );
    assert!(
        kind(&kinds, "pfc") == 5 && kind(&kinds, "pause") == 3,
        "{kinds:?}"
    );
}

#[test]
fn corpus_pcap_agrees_with_tshark() {
    let (compared, kinds) = compare(&workspace().join("samples/corpus/corpus.pcap"), &[]);
    assert!(compared > 1000, "only {compared} fields compared");
    assert!(kind(&kinds, "roce") > 100, "{kinds:?}");
}

#[test]
fn shared_roce_agrees_with_tshark() {
    // 37 RoCE frames there have UDP source port 69; without this tshark calls them TFTP.
    let Some(cap_roce) = shared_capture("roce.pcap") else {
        return;
    };
    let (_, kinds) = compare(&cap_roce, &["udp.port==69,infiniband"]);
    assert_eq!(kind(&kinds, "roce"), 105, "{kinds:?}");
}

#[test]
fn shared_soft_roce_agrees_with_tshark() {
    let Some(cap_test) = shared_capture("test.pcap") else {
        return;
    };
    let (_, kinds) = compare(&cap_test, &[]);
    assert_eq!(kind(&kinds, "roce"), 12, "{kinds:?}");
}

#[test]
fn shared_cnp_agrees_with_tshark() {
    let Some(cap_scapy_roce_uts_cx4lx_cnp) = shared_capture("scapy_roce_uts_cx4lx_cnp.pcap") else {
        return;
    };
    let (compared, kinds) = compare(&cap_scapy_roce_uts_cx4lx_cnp, &[]);
    assert_eq!(kind(&kinds, "cnp"), 1, "{kinds:?}");
    // The BTH's seven, and the IP header's DSCP and ECN.
    assert!(compared >= 9, "{compared}");
}

#[test]
fn shared_read_request_agrees_with_tshark() {
    let Some(cap_pcpp_pr1603_infinibandpacket) =
        shared_capture("pcpp_pr1603_InfiniBandPacket.pcap")
    else {
        return;
    };
    let (_, kinds) = compare(&cap_pcpp_pr1603_infinibandpacket, &[]);
    assert_eq!(kind(&kinds, "roce"), 1, "{kinds:?}");
}

#[test]
fn shared_pause_agrees_with_tshark() {
    let Some(cap_ethernet_pause_frame) = shared_capture("Ethernet_Pause_Frame.pcap") else {
        return;
    };
    let (compared, kinds) = compare(&cap_ethernet_pause_frame, &[]);
    assert_eq!(kind(&kinds, "pause"), 2, "{kinds:?}");
    // Per frame: the MAC Control opcode and pause_quanta; the frames are untagged and carry no PFC fields.
    assert_eq!(compared, 2 * 2);
}

#[test]
fn shared_tcp_ecn_has_no_roce() {
    let Some(cap_tcp_ecn_sample) = shared_capture("tcp-ecn-sample.pcap") else {
        return;
    };
    let (_, kinds) = compare(&cap_tcp_ecn_sample, &[]);
    assert_eq!(kinds.keys().collect::<Vec<_>>(), ["other"], "{kinds:?}");
}

#[test]
fn shared_lldp_dcbx_is_not_pfc() {
    let Some(cap_dcb_pfc) = shared_capture("dcb_pfc.pcap") else {
        return;
    };
    let (_, kinds) = compare(&cap_dcb_pfc, &[]);
    assert_eq!(kinds.keys().collect::<Vec<_>>(), ["other"], "{kinds:?}");
}

/// Each interface's line rate as Wireshark's `capinfos` reads it (`Speed = N` under `Interface #i info`),
/// in interface order; `None` where it shows none.
fn capinfos_speeds(file: &Path) -> Vec<Option<u64>> {
    let out = crate::common::run(std::process::Command::new("capinfos").arg(file));
    assert!(
        out.status.success(),
        "capinfos {} (installed with tshark): {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut speeds = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let line = line.trim();
        if line.starts_with("Interface #") {
            speeds.push(None);
        } else if let (Some(v), Some(last)) = (line.strip_prefix("Speed = "), speeds.last_mut()) {
            *last = Some(v.trim().parse::<u64>().unwrap());
        }
    }
    speeds
}

/// Every tap's `if_speed` as our reader takes it, in tap order.
fn our_speeds(file: &Path) -> Vec<Option<u64>> {
    let mut c = roce_capture::Capture::open_file(file).unwrap();
    while c.next_record().is_some() {}
    c.taps().iter().map(|t| t.description.speed_bps).collect()
}

/// The line rate the simulator writes into each tap's interface block is the one Wireshark reads, and the one
/// the analyzer reads; a file without it reads as none on both sides.
#[test]
fn if_speed_reads_as_wireshark_reads_it() {
    for f in crate::common::sample_captures() {
        let ours = our_speeds(&f);
        assert!(
            !ours.is_empty() && ours.iter().all(Option::is_some),
            "{}: {ours:?}",
            f.display()
        );
        assert_eq!(capinfos_speeds(&f), ours, "{}", f.display());
    }
    let corpus = workspace().join("samples/corpus/corpus.pcapng");
    let ours = our_speeds(&corpus);
    assert!(ours.iter().all(Option::is_none));
    assert_eq!(capinfos_speeds(&corpus), ours);
}
