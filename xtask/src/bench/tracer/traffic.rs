//! What the capture benchmarks replay: the corpus's RoCE, CNP, PFC and PAUSE frames, and a replay of data
//! frames where copying headers only matters.

use std::path::{Path, PathBuf};

use anyhow::Result;
use roce_capture::write::PcapWriter;
use roce_capture::{CaptureReader, LinkType};
use roce_core::decode::{Decoder, Kind};

/// Passes of the corpus per engine in the capture benchmark.
pub const PASSES: u32 = 2000;

/// Writes the Ethernet frames of `src` that are not `other` to a classic pcap tcpreplay can send; returns
/// how many.
pub fn replayable(src: &Path, dst: &Path) -> Result<u64> {
    let mut reader = CaptureReader::open(src)?;
    let decoder = Decoder::default();
    let file = std::fs::File::create(dst)?;
    let mut w = PcapWriter::new(std::io::BufWriter::new(file), LinkType::ETHERNET, 65535)?;
    let (mut i, mut n) = (0, 0);
    while let Some(rec) = reader.next_record()? {
        i += 1;
        if rec.link != LinkType::ETHERNET || decoder.decode(i, &rec).kind == Kind::Other {
            continue;
        }
        w.write_packet(rec.ts_ns, rec.data, rec.caplen)?;
        n += 1;
    }
    w.into_inner()?;
    Ok(n)
}

/// Names of the two replays in the tables.
pub const CORPUS: &str = "corpus";
pub const DATA: &str = "1 KiB writes";

/// Frames per pass of the data-frame replay, and passes.
pub const DATA_FRAMES: u32 = 200;
pub const DATA_PASSES: u32 = 1500;

/// Writes a pcap of RoCEv2 RDMA WRITE frames with 1 KiB payloads on four QPs (a WRITE FIRST with its RETH
/// every 50 frames, WRITE MIDDLE otherwise): traffic made of data frames, where a header-only copy saves
/// most of the 256 bytes the corpus's mostly short frames do not have. The ICRC is left zero: the probe
/// does not check it. Returns the number of frames.
pub fn data_frames(dst: &Path) -> Result<u64> {
    let file = std::fs::File::create(dst)?;
    let mut w = PcapWriter::new(std::io::BufWriter::new(file), LinkType::ETHERNET, 65535)?;
    for i in 0..DATA_FRAMES {
        let first = i % 50 == 0;
        let mut roce = Vec::with_capacity(1100);
        // BTH: opcode, solicited/migreq/pad/version, P_Key, reserved + destination QP, ack request + PSN.
        roce.push(if first { 0x06 } else { 0x07 });
        roce.push(0x40);
        roce.extend_from_slice(&0xffffu16.to_be_bytes());
        roce.extend_from_slice(&(0x10 + i % 4).to_be_bytes());
        roce.extend_from_slice(&i.to_be_bytes());
        if first {
            // RETH: virtual address, R_Key, DMA length.
            roce.extend_from_slice(&0x1000u64.to_be_bytes());
            roce.extend_from_slice(&0x42u32.to_be_bytes());
            roce.extend_from_slice(&65536u32.to_be_bytes());
        }
        roce.extend_from_slice(&[0xa5; 1024]);
        roce.extend_from_slice(&[0; 4]);
        let udp_len = 8 + roce.len();
        let ip_len = 20 + udp_len;
        let mut f = Vec::with_capacity(14 + ip_len);
        f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
        // IPv4: DSCP 26 with ECT(0), don't fragment, UDP; the checksum is not needed on a veth.
        f.extend_from_slice(&[0x45, (26 << 2) | 2]);
        f.extend_from_slice(&(ip_len as u16).to_be_bytes());
        f.extend_from_slice(&(i as u16).to_be_bytes());
        f.extend_from_slice(&[0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&49152u16.to_be_bytes());
        f.extend_from_slice(&4791u16.to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&roce);
        w.write_packet(u64::from(i) * 1000, &f, f.len() as u32)?;
    }
    w.into_inner()?;
    Ok(u64::from(DATA_FRAMES))
}

/// What a capture benchmark replays.
pub struct Workload {
    pub name: &'static str,
    pub path: PathBuf,
    pub per_pass: u64,
    pub passes: u32,
    /// Also capture it with libpcap.
    pub pcap: bool,
}
