//! RoCE frames as a capture with a header snap length records them, cheaply enough for captures of millions of
//! frames.
//!
//! Building every frame whole (an ICRC over 4 KiB of payload) would make a generator slower than the analysis
//! it feeds. A capture that keeps only the headers never shows the payload or the ICRC, so the frame is built
//! with an empty payload and its IP and UDP lengths are then set to what the wire carried.

use std::io::{self, Write};

use roce_capture::write::PcapWriter;
use roce_wire::build::RoceFrame;

/// Where generated frames go: one pcap file, or a caller's rotation over several files of any format.
pub trait FrameSink {
    /// Writes one record: `data` is what was kept of a frame that was `orig_len` bytes on the wire.
    fn packet(&mut self, ts_ns: u64, data: &[u8], orig_len: u32) -> io::Result<()>;
}

impl<W: Write> FrameSink for PcapWriter<W> {
    fn packet(&mut self, ts_ns: u64, data: &[u8], orig_len: u32) -> io::Result<()> {
        self.write_packet(ts_ns, data, orig_len)
    }
}

/// Offset of the BTH in an untagged IPv4 frame (the only kind the generators write headers-only).
const BTH_AT: usize = 14 + 20 + 8;

/// Writes frames whole or headers-only, reusing its buffers.
#[derive(Debug)]
pub struct HeaderEmitter {
    snaplen: Option<u32>,
    buf: Vec<u8>,
    payload: Vec<u8>,
}

impl HeaderEmitter {
    /// An emitter keeping `snaplen` bytes of each frame (`None`: whole frames with valid ICRCs), for payloads
    /// of at most `max_payload` bytes.
    pub fn new(snaplen: Option<u32>, max_payload: usize) -> Self {
        HeaderEmitter {
            snaplen,
            buf: Vec::with_capacity(9000),
            payload: vec![0x5a; max_payload],
        }
    }

    /// Writes `frame` (its `payload` field is ignored) carrying `payload_len` bytes of payload, and returns its
    /// length on the wire. Headers-only frames must be untagged IPv4.
    pub fn emit(
        &mut self,
        out: &mut dyn FrameSink,
        ts: u64,
        frame: RoceFrame<'_>,
        payload_len: usize,
    ) -> io::Result<usize> {
        let whole = RoceFrame {
            payload: &self.payload[..payload_len],
            ..frame
        };
        let wire = whole.len();
        let bad = |e: roce_wire::Error| io::Error::other(e.to_string());
        match self.snaplen {
            None => {
                self.buf.resize(wire, 0);
                let n = whole.emit(&mut self.buf).map_err(bad)?;
                out.packet(ts, &self.buf[..n], n as u32)?;
            }
            Some(snap) => {
                let short = RoceFrame {
                    payload: &[],
                    ..frame
                };
                self.buf.resize(short.len(), 0);
                let n = short.emit(&mut self.buf).map_err(bad)?;
                let extra = wire - n;
                let ip_len = u16::from_be_bytes([self.buf[16], self.buf[17]]) as usize + extra;
                self.buf[16..18].copy_from_slice(&(ip_len as u16).to_be_bytes());
                self.buf[24] = 0;
                self.buf[25] = 0;
                let sum = roce_wire::build::ipv4_checksum(&self.buf[14..34]);
                self.buf[24..26].copy_from_slice(&sum.to_be_bytes());
                let udp_len = u16::from_be_bytes([self.buf[38], self.buf[39]]) as usize + extra;
                self.buf[38..40].copy_from_slice(&(udp_len as u16).to_be_bytes());
                // The pad count follows the real payload length.
                let pad = ((4 - payload_len % 4) % 4) as u8;
                self.buf[BTH_AT + 1] = (self.buf[BTH_AT + 1] & !0x30) | (pad << 4);
                self.buf.resize(n.max(snap as usize), 0);
                let keep = (snap as usize).min(wire);
                out.packet(ts, &self.buf[..keep], wire as u32)?;
            }
        }
        Ok(wire)
    }
}
