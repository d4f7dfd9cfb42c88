//! Every event of every flow's DCQCN model, written to disk as the model makes it and read back in chunks of
//! rows: the per-event table that `report --model-table` asks for, in memory that does not grow with it.
//!
//! The file is a run of fixed 80-byte records in this process's own layout: a scratch file, read back by the
//! same binary and then removed, never an exchange format.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::dcqcn::FlowId;
use roce_core::dcqcn::{Cause, Event, EventKind};

const RECORD: usize = 80;

const KINDS: [EventKind; 7] = [
    EventKind::FirstCnp,
    EventKind::Cnp,
    EventKind::Cut,
    EventKind::FastRecovery,
    EventKind::AdditiveIncrease,
    EventKind::HyperIncrease,
    EventKind::Released,
];
const CAUSES: [Cause; 4] = [
    Cause::Cnp,
    Cause::DecreaseTimer,
    Cause::IncreaseTimer,
    Cause::ByteCounter,
];

/// One row of the per-event table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ModelEventRow {
    /// The data's sender, whose model made the event.
    pub sender: IpAddr,
    /// The data's receiver.
    pub receiver: IpAddr,
    /// The receiver's QP, which names the flow on the wire.
    pub receiver_qp: u32,
    /// When the event happened, on the capture's clock.
    pub t_ns: u64,
    /// What the model did (cut, increase, ...).
    pub event: EventKind,
    /// What set it off: a CNP, a timer, or the byte counter.
    pub cause: Cause,
    /// The rate limit before the event, so each row shows the step it made.
    pub rc_before_gbps: f64,
    /// The current rate (Rc) after the event.
    pub rc_gbps: f64,
    /// The target rate (Rt) after the event.
    pub rt_gbps: f64,
    /// The congestion estimate after the event.
    pub alpha: f64,
}

/// The writing end: events are appended as they come; the first write error is kept for [`ModelLog::finish`]
/// (the model hands events to a callback that cannot fail).
#[derive(Debug)]
pub struct ModelLog {
    out: BufWriter<File>,
    path: PathBuf,
    rows: u64,
    error: Option<io::Error>,
}

impl ModelLog {
    /// Creates (or truncates) the file at `path`.
    pub fn create(path: &Path) -> io::Result<ModelLog> {
        Ok(ModelLog {
            out: BufWriter::with_capacity(1 << 20, File::create(path)?),
            path: path.to_path_buf(),
            rows: 0,
            error: None,
        })
    }

    /// Appends one event of flow `id`.
    pub fn push(&mut self, id: &FlowId, e: &Event) {
        if self.error.is_some() {
            return;
        }
        let mut r = [0u8; RECORD];
        let (sender, v4_sender) = as_v6(id.sender);
        let (receiver, v4_receiver) = as_v6(id.receiver);
        r[..16].copy_from_slice(&sender.octets());
        r[16..32].copy_from_slice(&receiver.octets());
        r[32..36].copy_from_slice(&id.receiver_qp.to_le_bytes());
        r[36] = KINDS.iter().position(|k| *k == e.kind).unwrap_or(0) as u8;
        r[37] = CAUSES.iter().position(|c| *c == e.cause).unwrap_or(0) as u8;
        r[38] = u8::from(v4_sender) | (u8::from(v4_receiver) << 1);
        r[40..48].copy_from_slice(&e.t_ns.to_le_bytes());
        for (k, v) in [e.rc_before_mbps, e.rc_mbps, e.rt_mbps, e.alpha]
            .iter()
            .enumerate()
        {
            r[48 + 8 * k..56 + 8 * k].copy_from_slice(&v.to_le_bytes());
        }
        match self.out.write_all(&r) {
            Ok(()) => self.rows += 1,
            Err(e) => self.error = Some(e),
        }
    }

    /// Flushes the file: its path and the rows in it, or the first error met.
    pub fn finish(mut self) -> io::Result<(PathBuf, u64)> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok((self.path, self.rows))
    }
}

fn as_v6(ip: IpAddr) -> (Ipv6Addr, bool) {
    match ip {
        IpAddr::V4(a) => (a.to_ipv6_mapped(), true),
        IpAddr::V6(a) => (a, false),
    }
}

fn ip_at(bytes: &[u8], v4: bool) -> IpAddr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&bytes[..16]);
    let a = Ipv6Addr::from(o);
    match a.to_ipv4_mapped() {
        Some(v) if v4 => IpAddr::V4(v),
        _ => IpAddr::V6(a),
    }
}

fn f64_at(bytes: &[u8], at: usize) -> f64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    f64::from_le_bytes(b)
}

/// The rows of the file at `path`, `chunk` at a time (the last chunk may be shorter).
pub fn read_rows(
    path: &Path,
    chunk: usize,
) -> io::Result<impl Iterator<Item = io::Result<Vec<ModelEventRow>>>> {
    let mut input = BufReader::with_capacity(1 << 20, File::open(path)?);
    let chunk = chunk.max(1);
    let mut done = false;
    Ok(std::iter::from_fn(move || {
        if done {
            return None;
        }
        let mut rows = Vec::with_capacity(chunk);
        let mut r = [0u8; RECORD];
        while rows.len() < chunk {
            match input.read_exact(&mut r) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    done = true;
                    break;
                }
                Err(e) => {
                    done = true;
                    return Some(Err(e));
                }
            }
            let mut t = [0u8; 8];
            t.copy_from_slice(&r[40..48]);
            let mut qp = [0u8; 4];
            qp.copy_from_slice(&r[32..36]);
            rows.push(ModelEventRow {
                sender: ip_at(&r[..16], r[38] & 1 != 0),
                receiver: ip_at(&r[16..32], r[38] & 2 != 0),
                receiver_qp: u32::from_le_bytes(qp),
                t_ns: u64::from_le_bytes(t),
                event: KINDS[usize::from(r[36]).min(KINDS.len() - 1)],
                cause: CAUSES[usize::from(r[37]).min(CAUSES.len() - 1)],
                rc_before_gbps: f64_at(&r, 48) / 1000.0,
                rc_gbps: f64_at(&r, 56) / 1000.0,
                rt_gbps: f64_at(&r, 64) / 1000.0,
                alpha: f64_at(&r, 72),
            });
        }
        (!rows.is_empty()).then_some(Ok(rows))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_back_as_they_went_in() {
        let dir = std::env::temp_dir().join(format!("model_log_test_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        let mut log = ModelLog::create(&path).unwrap();
        let ids = [
            FlowId {
                sender: "10.0.0.1".parse().unwrap(),
                receiver: "10.0.0.2".parse().unwrap(),
                receiver_qp: 0x7a,
            },
            FlowId {
                sender: "2001:db8::1".parse().unwrap(),
                receiver: "::ffff:10.0.0.3".parse().unwrap(),
                receiver_qp: 0xff_ffff,
            },
        ];
        let mut want = Vec::new();
        for k in 0..1000u64 {
            let e = Event {
                t_ns: k * 1_000,
                kind: KINDS[(k % 7) as usize],
                cause: CAUSES[(k % 4) as usize],
                rc_mbps: 1000.0 + k as f64,
                rt_mbps: 2000.0 + k as f64,
                alpha: 1.0 / (k + 1) as f64,
                rc_before_mbps: 3000.5,
            };
            let id = ids[(k % 2) as usize];
            log.push(&id, &e);
            want.push((id, e));
        }
        let (p, rows) = log.finish().unwrap();
        assert_eq!((p, rows), (path.clone(), 1000));
        let chunks: Vec<Vec<ModelEventRow>> = read_rows(&path, 300)
            .unwrap()
            .collect::<io::Result<_>>()
            .unwrap();
        assert_eq!(
            chunks.iter().map(Vec::len).collect::<Vec<_>>(),
            [300, 300, 300, 100]
        );
        for (r, (id, e)) in chunks.iter().flatten().zip(&want) {
            assert_eq!(
                (r.sender, r.receiver, r.receiver_qp),
                (id.sender, id.receiver, id.receiver_qp)
            );
            assert_eq!((r.t_ns, r.event, r.cause), (e.t_ns, e.kind, e.cause));
            assert_eq!(
                (r.rc_gbps, r.rt_gbps, r.alpha, r.rc_before_gbps),
                (
                    e.rc_mbps / 1000.0,
                    e.rt_mbps / 1000.0,
                    e.alpha,
                    e.rc_before_mbps / 1000.0
                )
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
