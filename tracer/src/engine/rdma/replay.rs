//! Recorded completions, replayed as if a device delivered them: the way the tests (and anyone without a
//! ConnectX) run the RDMA engine's whole path, from completions to the file.
//!
//! The recording is JSON, one object per line, in delivery order:
//!
//! ```text
//! {"clock": {"khz": 156250, "mask": 281474976710655}}    the NIC clock (first; omit for wall stamps only)
//! {"anchor": {"ticks": 123, "wall_ns": 1700000000000000000}}    NIC count and wall time read together
//! {"frame": "<hex bytes>", "ticks": 456}                 a frame stamped by the NIC clock
//! {"frame": "<hex bytes>", "len": 1082, "wall_ns": ...}  a frame stamped in wall time, longer on the wire
//! {"lost": 3}                                            frames lost (receive buffers exhausted)
//! {"pause_ms": 200}                                      nothing arrives for a while
//! ```
//!
//! The file is read a line at a time, so a long recording costs no memory.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::clock::{Anchor, NicClock};
use super::{CompletionSource, Item, RdmaError, SourceError, Stamp};

/// Items handed over per poll at most, so that the stop flag is seen between batches.
const BATCH: usize = 1024;

/// Recorded completions played back as a source, so the engine runs end to end without a NIC.
#[derive(Debug)]
pub struct Replay {
    path: String,
    lines: std::io::Lines<BufReader<File>>,
    line_no: usize,
    clock: Option<NicClock>,
    snaplen: usize,
    /// A pause in progress: nothing until then.
    paused_until: Option<Instant>,
    /// A line read while looking for the clock, not yet delivered.
    pending: Option<String>,
}

impl Replay {
    /// Opens a recording, keeping `snaplen` bytes of each frame as a NIC source would.
    pub fn open(path: &Path, snaplen: u32) -> Result<Replay, RdmaError> {
        let err = |source| RdmaError::Replay {
            path: path.display().to_string(),
            source,
        };
        let mut lines = BufReader::new(File::open(path).map_err(err)?).lines();
        let mut clock = None;
        let mut pending = None;
        let mut line_no = 0;
        // The clock, if any, comes first.
        if let Some(first) = lines.next() {
            let first = first.map_err(err)?;
            line_no = 1;
            match serde_json::from_str::<Value>(&first)
                .ok()
                .and_then(|v| v.get("clock").cloned())
            {
                Some(c) => {
                    let num = |k: &str| c.get(k).and_then(Value::as_u64).unwrap_or(0);
                    clock = Some(NicClock::new(num("khz"), num("mask")).map_err(|e| {
                        err(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
                    })?);
                }
                None => pending = Some(first),
            }
        }
        Ok(Replay {
            path: path.display().to_string(),
            lines,
            line_no,
            clock,
            snaplen: snaplen.max(1) as usize,
            paused_until: None,
            pending,
        })
    }

    fn bad(&self, why: &str) -> SourceError {
        SourceError::Other(format!("{} line {}: {why}", self.path, self.line_no))
    }

    fn next_line(&mut self) -> Result<Option<String>, SourceError> {
        if let Some(l) = self.pending.take() {
            return Ok(Some(l));
        }
        match self.lines.next() {
            None => Ok(None),
            Some(Ok(l)) => {
                self.line_no += 1;
                Ok(Some(l))
            }
            Some(Err(errno)) => Err(SourceError::Verb {
                what: "reading the recording",
                errno,
            }),
        }
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let s = s.as_bytes();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks_exact(2)
        .map(|p| {
            let d = |c: u8| (c as char).to_digit(16);
            Some((d(p[0])? * 16 + d(p[1])?) as u8)
        })
        .collect()
}

impl CompletionSource for Replay {
    fn clock(&self) -> Option<NicClock> {
        self.clock
    }

    fn poll(
        &mut self,
        wait: Duration,
        each: &mut dyn FnMut(Item<'_>) -> bool,
    ) -> Result<bool, SourceError> {
        if let Some(until) = self.paused_until {
            let now = Instant::now();
            if now < until {
                std::thread::sleep((until - now).min(wait));
                return Ok(true);
            }
            self.paused_until = None;
        }
        for _ in 0..BATCH {
            let Some(line) = self.next_line()? else {
                return Ok(false);
            };
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(&line).map_err(|e| self.bad(&e.to_string()))?;
            let num = |k: &str| v.get(k).and_then(Value::as_u64);
            let keep_going = if let Some(hex) = v.get("frame").and_then(Value::as_str) {
                let data = unhex(hex).ok_or_else(|| self.bad("the frame is not hex"))?;
                let stamp = match (num("ticks"), num("wall_ns")) {
                    (Some(t), _) => Stamp::Nic(t),
                    (None, Some(ns)) => Stamp::Wall(ns),
                    (None, None) => return Err(self.bad("a frame needs \"ticks\" or \"wall_ns\"")),
                };
                let len = num("len")
                    .and_then(|l| u32::try_from(l).ok())
                    .unwrap_or(data.len() as u32);
                let cut = data.get(..self.snaplen).unwrap_or(&data);
                each(Item::Frame {
                    data: cut,
                    len,
                    stamp,
                })
            } else if let Some(a) = v.get("anchor") {
                let n = |k: &str| a.get(k).and_then(Value::as_u64);
                let (Some(ticks), Some(wall_ns)) = (n("ticks"), n("wall_ns")) else {
                    return Err(self.bad("an anchor needs \"ticks\" and \"wall_ns\""));
                };
                each(Item::Anchor(Anchor { ticks, wall_ns }))
            } else if let Some(n) = num("lost") {
                each(Item::Lost(n))
            } else if let Some(ms) = num("pause_ms") {
                self.paused_until = Some(Instant::now() + Duration::from_millis(ms));
                return Ok(true);
            } else {
                return Err(self.bad("not a clock, anchor, frame, lost or pause_ms line"));
            };
            if !keep_going {
                break;
            }
        }
        Ok(true)
    }

    fn timestamps(&self) -> String {
        match self.clock {
            Some(c) => format!(
                "the recording {}: its NIC clock stamps ({} kHz), turned into wall time with its anchors",
                self.path, c.khz
            ),
            None => format!("the recording {}: its wall-clock stamps", self.path),
        }
    }

    fn describe(&self) -> String {
        match self.clock {
            Some(c) => format!(
                "replay={} clock=nic({} kHz, mask {:#x})",
                self.path, c.khz, c.mask
            ),
            None => format!("replay={} clock=host", self.path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex() {
        assert_eq!(unhex("00ff10Ab"), Some(vec![0, 255, 16, 171]));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
    }

    #[test]
    fn a_recording_reads_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.jsonl");
        std::fs::write(
            &path,
            "{\"clock\":{\"khz\":1000000,\"mask\":65535}}\n\
             {\"anchor\":{\"ticks\":10,\"wall_ns\":1000}}\n\
             {\"frame\":\"0102030405\",\"ticks\":20}\n\
             \n\
             {\"lost\":4}\n\
             {\"frame\":\"aabb\",\"len\":60,\"wall_ns\":77}\n",
        )
        .unwrap();
        let mut r = Replay::open(&path, 3).unwrap();
        assert_eq!(
            r.clock(),
            Some(NicClock {
                khz: 1_000_000,
                mask: 65535
            })
        );
        let mut got = Vec::new();
        let more = r
            .poll(Duration::ZERO, &mut |i| {
                got.push(format!("{i:?}"));
                true
            })
            .unwrap();
        assert!(!more);
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(
            got[1].contains("data: [1, 2, 3], len: 5, stamp: Nic(20)"),
            "{got:?}"
        );
        assert!(got[2].contains("Lost(4)"));
        assert!(got[3].contains("len: 60, stamp: Wall(77)"), "{got:?}");

        std::fs::write(&path, "{\"frame\":\"01\"}\n").unwrap();
        let mut r = Replay::open(&path, 3).unwrap();
        let e = r.poll(Duration::ZERO, &mut |_| true).unwrap_err();
        assert!(e.to_string().contains("line 1: a frame needs"), "{e}");
    }
}
