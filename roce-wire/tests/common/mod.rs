//! Helpers shared by the integration tests: hex literals, a minimal Ethernet/IP/UDP splitter and a legacy pcap
//! reader. They are deliberately small and separate from the crate, so the crate is checked against independent
//! code rather than against itself.

#![allow(dead_code)]

use std::path::PathBuf;

pub fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The IP header and the UDP datagram (as long as the UDP length says) of a RoCEv2 frame, or `None` when the frame
/// is not UDP to port 4791.
pub struct Split<'a> {
    pub ip: &'a [u8],
    pub udp: &'a [u8],
    pub captured_udp: &'a [u8],
}

pub fn split_roce_v2(frame: &[u8]) -> Option<Split<'_>> {
    let mut off = 12;
    let mut ethertype = u16::from_be_bytes([frame[off], frame[off + 1]]);
    while ethertype == 0x8100 || ethertype == 0x88a8 {
        off += 4;
        ethertype = u16::from_be_bytes([frame[off], frame[off + 1]]);
    }
    off += 2;
    let (ip_len, proto) = match ethertype {
        0x0800 => (usize::from(frame[off] & 0x0f) * 4, frame[off + 9]),
        0x86dd => (40, frame[off + 6]),
        _ => return None,
    };
    if proto != 17 {
        return None;
    }
    let ip = &frame[off..off + ip_len];
    let udp_off = off + ip_len;
    let dport = u16::from_be_bytes([frame[udp_off + 2], frame[udp_off + 3]]);
    if dport != 4791 {
        return None;
    }
    let udp_len = usize::from(u16::from_be_bytes([frame[udp_off + 4], frame[udp_off + 5]]));
    let captured_udp = &frame[udp_off..];
    let udp = &frame[udp_off..(udp_off + udp_len).min(frame.len())];
    Some(Split {
        ip,
        udp,
        captured_udp,
    })
}

pub fn captures_dir() -> Option<PathBuf> {
    testkit::shared_captures()
}

/// Frames of a little- or big-endian legacy pcap file (microsecond or nanosecond), as (caplen bytes, orig len).
pub fn read_pcap(bytes: &[u8]) -> Vec<(Vec<u8>, usize)> {
    let magic = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        m => panic!("not a legacy pcap: {m:#x}"),
    };
    let rd = |b: &[u8]| {
        let a: [u8; 4] = b.try_into().unwrap();
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let mut out = Vec::new();
    let mut off = 24;
    while off + 16 <= bytes.len() {
        let caplen = rd(&bytes[off + 8..off + 12]) as usize;
        let orig = rd(&bytes[off + 12..off + 16]) as usize;
        out.push((bytes[off + 16..off + 16 + caplen].to_vec(), orig));
        off += 16 + caplen;
    }
    out
}
