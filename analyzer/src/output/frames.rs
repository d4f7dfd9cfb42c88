//! How `decode` shows a frame: one readable line, or one JSON object per the field contract in wire.md.
//!
//! JSON is written by hand rather than through serde: every value is a number, a boolean, or text we produce
//! ourselves (addresses, opcode names), so nothing needs escaping, and skipping the intermediate tree keeps
//! `decode --json` close to the speed of the decoder.

use std::io::{self, Write};

use roce_wire::ext::{AethKind, NakCode};
use roce_wire::pfc::MacControlRepr;

use roce_core::decode::{Frame, Kind, RoceInfo, mac_to_string};

/// Names a NAK code for people; the JSON carries the number.
fn nak_name(code: NakCode) -> &'static str {
    match code {
        NakCode::PsnSequenceError => "PSN sequence error",
        NakCode::InvalidRequest => "invalid request",
        NakCode::RemoteAccessError => "remote access error",
        NakCode::RemoteOperationalError => "remote operational error",
        NakCode::InvalidRdRequest => "invalid RD request",
        NakCode::Reserved(_) => "reserved",
    }
}

const ECN_NAMES: [&str; 4] = ["Not-ECT", "ECT(1)", "ECT(0)", "CE"];

/// Writes one JSON line for the frame.
pub fn json_line(w: &mut impl Write, f: &Frame<'_>) -> io::Result<()> {
    write!(
        w,
        r#"{{"frame":{},"ts_ns":{},"caplen":{},"len":{},"kind":"{}""#,
        f.number,
        f.ts_ns,
        f.caplen,
        f.len,
        f.kind.as_str()
    )?;
    if let Some(v) = f.vlan {
        write!(w, r#","vlan":{v}"#)?;
    }
    if let Some(p) = f.pcp {
        write!(w, r#","pcp":{p}"#)?;
    }
    if let Some(v) = f.inner_vlan {
        write!(w, r#","inner_vlan":{v}"#)?;
    }
    match f.kind {
        Kind::Roce | Kind::Cnp => roce_json(w, f)?,
        Kind::Pfc | Kind::Pause => mac_control_json(w, f)?,
        Kind::Other => {}
    }
    w.write_all(b"}\n")
}

fn roce_json(w: &mut impl Write, f: &Frame<'_>) -> io::Result<()> {
    if let Some(ip) = f.ip {
        write!(
            w,
            r#","src":"{}","dst":"{}","dscp":{},"ecn":{}"#,
            ip.src, ip.dst, ip.dscp, ip.ecn
        )?;
    }
    let Some(r) = f.roce else { return Ok(()) };
    if r.version != 2 {
        write!(w, r#","roce_version":{}"#, r.version)?;
    }
    if let Some(sport) = r.sport {
        write!(w, r#","sport":{sport}"#)?;
    }
    if let Some(b) = r.packet.bth {
        write!(
            w,
            r#","opcode":{},"opcode_name":"{}","dest_qp":{},"psn":{},"ack_req":{},"fecn":{},"becn":{},"se":{},"pkey":{},"pad":{}"#,
            b.opcode.0,
            b.opcode.name(),
            b.dest_qp,
            b.psn,
            b.ack_req,
            b.fecn,
            b.becn,
            b.se,
            b.pkey,
            b.pad_count
        )?;
    }
    match r.packet.payload_len {
        Some(n) => write!(w, r#","payload_len":{n}"#)?,
        None => w.write_all(br#","payload_len":null"#)?,
    }
    match r.icrc.as_option() {
        Some(ok) => write!(w, r#","icrc_ok":{ok}"#)?,
        None => w.write_all(br#","icrc_ok":null"#)?,
    }
    ext_json(w, &r)
}

fn ext_json(w: &mut impl Write, r: &RoceInfo<'_>) -> io::Result<()> {
    let e = &r.packet.ext;
    if let Some(x) = e.reth {
        write!(
            w,
            r#","reth":{{"va":{},"rkey":{},"len":{}}}"#,
            x.va, x.rkey, x.dma_len
        )?;
    }
    if let Some(a) = e.aeth {
        write!(w, r#","aeth":{{"syndrome":{},"msn":{}"#, a.syndrome, a.msn)?;
        match a.kind() {
            AethKind::Ack { .. } => w.write_all(br#","kind":"ack"}"#)?,
            AethKind::RnrNak { .. } => w.write_all(br#","kind":"rnr_nak"}"#)?,
            AethKind::Nak(code) => write!(w, r#","kind":"nak","nak_code":{}}}"#, code.code())?,
            AethKind::Reserved(_) => w.write_all(br#","kind":"reserved"}"#)?,
        }
    }
    if let Some(d) = e.deth {
        write!(w, r#","deth":{{"qkey":{},"src_qp":{}}}"#, d.qkey, d.src_qp)?;
    }
    if let Some(x) = e.rdeth {
        write!(w, r#","rdeth":{{"ee_context":{}}}"#, x.ee_context)?;
    }
    if let Some(x) = e.xrceth {
        write!(w, r#","xrceth":{{"srq":{}}}"#, x.srq)?;
    }
    if let Some(i) = e.imm {
        write!(w, r#","imm":{i}"#)?;
    }
    if let Some(i) = e.ieth {
        write!(w, r#","ieth":{i}"#)?;
    }
    if let Some(a) = e.atomic_eth {
        write!(
            w,
            r#","atomic":{{"va":{},"rkey":{},"swap_add":{},"compare":{}}}"#,
            a.va, a.rkey, a.swap_add, a.compare
        )?;
    }
    if let Some(a) = e.atomic_ack_eth {
        write!(w, r#","atomic_ack":{}"#, a.orig)?;
    }
    Ok(())
}

fn mac_control_json(w: &mut impl Write, f: &Frame<'_>) -> io::Result<()> {
    if let Some(mac) = f.src_mac {
        write!(w, r#","src_mac":"{}""#, mac_to_string(&mac))?;
    }
    match f.mac_control {
        Some(MacControlRepr::Pfc(p)) => {
            let q = p.quanta;
            write!(
                w,
                r#","pfc_enable":{},"pfc_quanta":[{},{},{},{},{},{},{},{}]"#,
                p.enable, q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]
            )
        }
        Some(MacControlRepr::Pause { quanta }) => write!(w, r#","pause_quanta":{quanta}"#),
        _ => Ok(()),
    }
}

/// Writes one readable line, in the spirit of tshark's summary: number, relative time, endpoints, what it is.
pub fn text_line(w: &mut impl Write, f: &Frame<'_>, first_ns: u64) -> io::Result<()> {
    let rel = f.ts_ns.saturating_sub(first_ns);
    write!(
        w,
        "{:>7} {:>5}.{:09} ",
        f.number,
        rel / 1_000_000_000,
        rel % 1_000_000_000
    )?;
    if let Some(ip) = f.ip {
        write!(w, "{} → {} ", ip.src, ip.dst)?;
    } else if let Some(mac) = f.src_mac {
        write!(w, "{} ", mac_to_string(&mac))?;
    }
    if let (Some(v), Some(p)) = (f.vlan, f.pcp) {
        write!(w, "vlan {v} pcp {p} ")?;
    }
    match f.kind {
        Kind::Roce | Kind::Cnp => {
            let Some(r) = f.roce else {
                return writeln!(w, "RoCE");
            };
            match r.packet.bth {
                Some(b) => write!(
                    w,
                    "{} QP=0x{:06x} PSN={}",
                    b.opcode.name(),
                    b.dest_qp,
                    b.psn
                )?,
                None => write!(w, "RoCE (BTH cut short)")?,
            }
            if let Some(a) = r.packet.ext.aeth {
                match a.kind() {
                    AethKind::Nak(code) => write!(w, " NAK({})", nak_name(code))?,
                    AethKind::RnrNak { .. } => write!(w, " RNR-NAK")?,
                    _ => write!(w, " MSN={}", a.msn)?,
                }
            }
            if let Some(ip) = f.ip {
                write!(w, " {}", ECN_NAMES[usize::from(ip.ecn & 3)])?;
            }
            if let Some(b) = r.packet.bth
                && b.becn
            {
                write!(w, " BECN")?;
            }
            if let Some(n) = r.packet.payload_len {
                write!(w, " len={n}")?;
            }
            match r.icrc.as_option() {
                Some(true) => {}
                Some(false) => write!(w, " [ICRC BAD]")?,
                None => write!(w, " [ICRC unchecked]")?,
            }
            writeln!(w)
        }
        Kind::Pfc => {
            if let Some(MacControlRepr::Pfc(p)) = f.mac_control {
                write!(w, "PFC")?;
                for prio in 0..8u8 {
                    if p.enabled(prio) {
                        write!(w, " p{}={}", prio, p.quanta[usize::from(prio)])?;
                    }
                }
            }
            writeln!(w)
        }
        Kind::Pause => {
            if let Some(MacControlRepr::Pause { quanta }) = f.mac_control {
                write!(w, "PAUSE quanta={quanta}")?;
            }
            writeln!(w)
        }
        Kind::Other => writeln!(w, "other ({} bytes)", f.len),
    }
}
