//! QP owners from iproute2's `rdma res show qp` (`--kernel-events`).
//!
//! The RDMA tracepoints only see QPs that go through the connection manager while the capture runs: a QP
//! created with verbs alone (perftest without `-R`, NCCL) or before the start never shows up there. The
//! kernel's resource tracking knows every QP with the process that created it, and `rdma -j -d res show
//! qp` prints it. Its output is turned into events of the pseudo tracepoint [`TRACEPOINT`], carried in the
//! `EVNT` blocks like any other, so the analyzer labels flows from them as from `cm_qp_create`.
//!
//! Running a program rather than speaking RDMA netlink ourselves keeps the tracer free of a netlink
//! dependency, and `rdma` is installed wherever iproute2 is. [`RDMA_ENV`] names another program (a fixture
//! script in the tests).

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::kevents::EventRow;

/// The pseudo tracepoint of a QP found in a snapshot; the name is `rdma res`'s, the form a tracepoint's,
/// so that the analyzer's event handling carries it unchanged.
pub const TRACEPOINT: &str = analyzer::blocks::RDMA_RES_QP;

/// Environment variable naming the `rdma` program to run instead of the one on `PATH`.
pub const RDMA_ENV: &str = "ROCE_TRACER_RDMA";

/// A snapshot runs in the capture loop: a wedged `rdma` must not stall the capture for longer than this.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Device, port, local QP number, pid, comm.
type QpKey = (String, Option<u32>, u32, Option<u32>, Option<String>);

/// One QP of the snapshot and who owns it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct QpOwner {
    /// The RDMA device (`mlx5_0`).
    pub device: String,
    /// `None` for a QP not bound to a port yet.
    pub port: Option<u32>,
    pub lqpn: u32,
    /// The connected peer's QP (RC, UC, XRC once past INIT).
    pub rqpn: Option<u32>,
    /// `RC`, `UD`, `GSI`, ... as `rdma` names it.
    pub qp_type: Option<String>,
    /// `RESET`, `INIT`, `RTR`, `RTS`, ...
    pub state: Option<String>,
    /// `None` for a QP of a kernel consumer.
    pub pid: Option<u32>,
    /// The process's name, or the kernel consumer's (`ib_core`, `nvme_rdma`).
    pub comm: Option<String>,
}

impl QpOwner {
    /// What identifies the QP between snapshots: a QP number reused by another process is a new QP.
    fn key(&self) -> QpKey {
        (
            self.device.clone(),
            self.port,
            self.lqpn,
            self.pid,
            self.comm.clone(),
        )
    }

    /// The QP as an `EVNT` event at `ts_ns`. A kernel QP fires "in" pid 0, as a kernel thread would.
    pub fn event(&self, ts_ns: u64) -> EventRow {
        let mut fields = Map::new();
        fields.insert("device".into(), self.device.clone().into());
        if let Some(p) = self.port {
            fields.insert("port".into(), p.into());
        }
        fields.insert("lqpn".into(), self.lqpn.into());
        if let Some(r) = self.rqpn {
            fields.insert("rqpn".into(), r.into());
        }
        if let Some(t) = &self.qp_type {
            fields.insert("type".into(), t.clone().into());
        }
        if let Some(s) = &self.state {
            fields.insert("state".into(), s.clone().into());
        }
        if let Some(p) = self.pid {
            fields.insert("pid".into(), p.into());
        }
        if let Some(c) = &self.comm {
            fields.insert("comm".into(), c.clone().into());
        }
        EventRow {
            ts_ns,
            tracepoint: TRACEPOINT.into(),
            pid: self.pid.unwrap_or(0),
            tid: self.pid.unwrap_or(0),
            comm: self.comm.clone().unwrap_or_default(),
            fields,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum QpOwnersError {
    #[error("cannot run {program}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} did not answer within {TIMEOUT:?}")]
    Timeout { program: String },
    #[error("{program} failed ({status}): {stderr}")]
    Failed {
        program: String,
        status: String,
        stderr: String,
    },
    #[error("unexpected output: {0}")]
    Parse(String),
}

/// Reads the JSON of `rdma -j [-d] res show qp`: an array with an object per QP. An entry without a device
/// or a local QP number is skipped; every other field may be missing.
pub fn parse(json: &str) -> Result<Vec<QpOwner>, QpOwnersError> {
    let value: Value =
        serde_json::from_str(json.trim()).map_err(|e| QpOwnersError::Parse(e.to_string()))?;
    let rows = value
        .as_array()
        .ok_or_else(|| QpOwnersError::Parse("not a JSON array".into()))?;
    let u32_of = |o: &Map<String, Value>, k: &str| {
        o.get(k)
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
    };
    let text_of = |o: &Map<String, Value>, k: &str| {
        o.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    Ok(rows
        .iter()
        .filter_map(Value::as_object)
        .filter_map(|o| {
            Some(QpOwner {
                device: text_of(o, "ifname")?,
                port: u32_of(o, "port"),
                lqpn: u32_of(o, "lqpn")?,
                rqpn: u32_of(o, "rqpn"),
                qp_type: text_of(o, "type"),
                state: text_of(o, "state"),
                pid: u32_of(o, "pid"),
                comm: text_of(o, "comm"),
            })
        })
        .collect())
}

/// The program to run: [`RDMA_ENV`] when set, `rdma` from `PATH` otherwise.
pub fn rdma_program() -> PathBuf {
    program_from(std::env::var_os(RDMA_ENV))
}

fn program_from(var: Option<std::ffi::OsString>) -> PathBuf {
    var.filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("rdma"), PathBuf::from)
}

/// Runs `program -j -d res show qp` and parses what it prints.
pub fn query(program: &Path) -> Result<Vec<QpOwner>, QpOwnersError> {
    let name = program.display().to_string();
    let mut child = Command::new(program)
        .args(["-j", "-d", "res", "show", "qp"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| QpOwnersError::Spawn {
            program: name.clone(),
            source,
        })?;
    // Read on threads: a host with thousands of QPs prints more than a pipe holds, and waiting for the exit
    // before reading would deadlock.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut out);
            }
            out
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < TIMEOUT => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                // The reader threads end when the pipes close; they are not waited for, in case something
                // the program started still holds them.
                return Err(QpOwnersError::Timeout { program: name });
            }
            Err(source) => {
                return Err(QpOwnersError::Spawn {
                    program: name,
                    source,
                });
            }
        }
    };
    let out = stdout.join().unwrap_or_default();
    let err = stderr.join().unwrap_or_default();
    let err = String::from_utf8_lossy(&err).trim().to_string();
    if !status.success() {
        return Err(QpOwnersError::Failed {
            program: name,
            status: status.to_string(),
            stderr: err,
        });
    }
    let text = String::from_utf8_lossy(&out);
    // Without an RDMA device some versions print their complaint and still exit 0.
    if text.trim().is_empty() {
        return Err(QpOwnersError::Parse(if err.is_empty() {
            "no output".into()
        } else {
            err
        }));
    }
    parse(&text)
}

/// Snapshots taken during a capture, each reporting only the QPs the previous one did not have.
#[derive(Debug)]
pub struct QpSnapshots {
    program: PathBuf,
    /// The QPs of the last snapshot that worked.
    known: BTreeSet<QpKey>,
    /// The first snapshot failed: no more are taken.
    disabled: bool,
}

impl QpSnapshots {
    /// Takes the first snapshot at once with `program`. On failure the warning to print is returned beside
    /// a disabled recorder: ownership from `rdma` is a bonus, never a reason not to capture.
    pub fn start(program: PathBuf, ts_ns: u64) -> (QpSnapshots, Vec<EventRow>, Option<String>) {
        let mut s = QpSnapshots {
            program,
            known: BTreeSet::new(),
            disabled: false,
        };
        match query(&s.program) {
            Ok(qps) => {
                let events = s.update(qps, ts_ns);
                (s, events, None)
            }
            Err(e) => {
                s.disabled = true;
                let warning = format!(
                    "roce-tracer: warning: QP owners from `{} -j -d res show qp` unavailable ({}); flows \
                     are labelled from the RDMA tracepoints only",
                    s.program.display(),
                    error_chain(&e)
                );
                (s, Vec::new(), Some(warning))
            }
        }
    }

    /// [`QpSnapshots::start`] with [`rdma_program`].
    pub fn start_default(ts_ns: u64) -> (QpSnapshots, Vec<EventRow>, Option<String>) {
        Self::start(rdma_program(), ts_ns)
    }

    /// Events for the QPs that appeared since the previous snapshot. A failing snapshot after a good
    /// start yields nothing and keeps the previous state, so the next one reports what it missed.
    pub fn snapshot(&mut self, ts_ns: u64) -> Vec<EventRow> {
        if self.disabled {
            return Vec::new();
        }
        match query(&self.program) {
            Ok(qps) => self.update(qps, ts_ns),
            Err(_) => Vec::new(),
        }
    }

    /// Makes the next snapshot report every QP again, so that each file of a rotated capture names the
    /// owners of the QPs alive while it was written.
    pub fn forget(&mut self) {
        self.known.clear();
    }

    /// Replaces the known set with `qps`, returning the events of those not in it before.
    pub fn update(&mut self, qps: Vec<QpOwner>, ts_ns: u64) -> Vec<EventRow> {
        let mut now = BTreeSet::new();
        let mut events = Vec::new();
        for q in qps {
            let key = q.key();
            if !self.known.contains(&key) && !now.contains(&key) {
                events.push(q.event(ts_ns));
            }
            now.insert(key);
        }
        self.known = now;
        events
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Two mlx5 ports as `rdma -j -d res show qp` prints them on a host running `ib_write_bw` (a verbs RC
    /// QP, no connection manager) and an NCCL job, beside the kernel's GSI/SMI QPs and an NVMe-oF target's.
    const FIXTURE: &str = r#"[{"ifindex":0,"ifname":"mlx5_0","port":1,"lqpn":0,"type":"SMI","state":"RTS","sq-psn":0,"comm":"ib_core"},{"ifindex":0,"ifname":"mlx5_0","port":1,"lqpn":1,"type":"GSI","state":"RTS","sq-psn":0,"comm":"ib_core"},{"ifindex":0,"ifname":"mlx5_0","port":1,"lqpn":1722,"rqpn":1723,"type":"RC","state":"RTS","rq-psn":9813421,"sq-psn":4459178,"path-mig-state":"MIGRATED","pdn":3,"pid":30488,"comm":"ib_write_bw"},{"ifindex":0,"ifname":"mlx5_0","port":1,"lqpn":1724,"type":"UD","state":"RTS","sq-psn":0,"pdn":5,"pid":30502,"comm":"python3"},{"ifindex":1,"ifname":"mlx5_1","port":1,"lqpn":1,"type":"GSI","state":"RTS","sq-psn":0,"comm":"ib_core"},{"ifindex":1,"ifname":"mlx5_1","port":1,"lqpn":203,"rqpn":17,"type":"RC","state":"RTS","rq-psn":0,"sq-psn":0,"path-mig-state":"MIGRATED","pdn":2,"comm":"nvmet_rdma"},{"ifindex":1,"ifname":"mlx5_1","lqpn":210,"type":"RC","state":"RESET","sq-psn":0,"pdn":6,"pid":30502,"comm":"python3"}]"#;

    #[test]
    fn user_and_kernel_qps_of_two_devices() {
        let qps = parse(FIXTURE).unwrap();
        assert_eq!(qps.len(), 7);
        let perftest = qps.iter().find(|q| q.lqpn == 1722).unwrap();
        assert_eq!(
            perftest,
            &QpOwner {
                device: "mlx5_0".into(),
                port: Some(1),
                lqpn: 1722,
                rqpn: Some(1723),
                qp_type: Some("RC".into()),
                state: Some("RTS".into()),
                pid: Some(30488),
                comm: Some("ib_write_bw".into()),
            }
        );
        let nvmet = qps.iter().find(|q| q.lqpn == 203).unwrap();
        assert_eq!(
            (nvmet.pid, nvmet.comm.as_deref()),
            (None, Some("nvmet_rdma"))
        );
        assert_eq!(nvmet.device, "mlx5_1");
        // Not bound to a port yet, and not connected.
        let unbound = qps.iter().find(|q| q.lqpn == 210).unwrap();
        assert_eq!((unbound.port, unbound.rqpn), (None, None));
        // The same QP number on two devices is two QPs.
        assert_eq!(qps.iter().filter(|q| q.lqpn == 1).count(), 2);

        let e = perftest.event(42);
        assert_eq!(
            (e.ts_ns, e.pid, e.comm.as_str()),
            (42, 30488, "ib_write_bw")
        );
        assert_eq!(e.tracepoint, "rdma_res:qp");
        assert_eq!(e.fields["lqpn"], 1722);
        assert_eq!(e.fields["rqpn"], 1723);
        assert_eq!(e.fields["type"], "RC");
        let k = nvmet.event(42);
        assert_eq!(k.pid, 0);
        assert!(!k.fields.contains_key("pid"));
        assert_eq!(k.fields["rqpn"], 17);
        assert_eq!(k.fields["comm"], "nvmet_rdma");
    }

    #[test]
    fn missing_fields_and_bad_output() {
        let qps = parse(
            r#"[{"ifname":"mlx5_0","lqpn":7},{"ifname":"mlx5_0"},{"lqpn":8},{"ifname":"rxe0","lqpn":-1},
               {"ifname":"rxe0","lqpn":9,"pid":"x","comm":""},3,"x"]"#,
        )
        .unwrap();
        assert_eq!(qps.len(), 2);
        assert_eq!(
            qps[0],
            QpOwner {
                device: "mlx5_0".into(),
                port: None,
                lqpn: 7,
                rqpn: None,
                qp_type: None,
                state: None,
                pid: None,
                comm: None,
            }
        );
        assert_eq!(
            (qps[1].lqpn, qps[1].pid, qps[1].comm.as_deref()),
            (9, None, None)
        );
        assert!(parse("[]").unwrap().is_empty());
        for bad in [
            "",
            "Failed to open NETLINK_RDMA socket",
            "{\"lqpn\":1}",
            "[{",
        ] {
            assert!(
                matches!(parse(bad), Err(QpOwnersError::Parse(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn only_new_qps_are_reported() {
        let mut s = QpSnapshots {
            program: PathBuf::from("/nonexistent"),
            known: BTreeSet::new(),
            disabled: false,
        };
        let all = parse(FIXTURE).unwrap();
        let first = s.update(all.clone(), 1);
        assert_eq!(first.len(), 7);
        assert!(first.iter().all(|e| e.ts_ns == 1));
        assert!(s.update(all.clone(), 2).is_empty());
        // ib_write_bw's QP goes away and its number comes back for another process; a new QP appears.
        let mut next: Vec<QpOwner> = all.iter().filter(|q| q.lqpn != 1722).cloned().collect();
        next.push(QpOwner {
            pid: Some(31000),
            comm: Some("all_reduce_perf".into()),
            ..all.iter().find(|q| q.lqpn == 1722).unwrap().clone()
        });
        next.push(QpOwner {
            lqpn: 1730,
            ..all.iter().find(|q| q.lqpn == 1722).unwrap().clone()
        });
        let third = s.update(next.clone(), 3);
        let got: Vec<(u64, u32, u32)> = third
            .iter()
            .map(|e| (e.ts_ns, e.fields["lqpn"].as_u64().unwrap() as u32, e.pid))
            .collect();
        assert_eq!(got, [(3, 1722, 31000), (3, 1730, 30488)]);
        // A QP that left and came back is new again; after forget() everything is.
        let without: Vec<QpOwner> = next.iter().filter(|q| q.lqpn != 1730).cloned().collect();
        assert!(s.update(without, 4).is_empty());
        assert_eq!(s.update(next.clone(), 5).len(), 1);
        s.forget();
        assert_eq!(s.update(next, 6).len(), 8);
    }

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn snapshots_from_a_program() {
        let dir = tempfile::tempdir().unwrap();
        let fixture = dir.path().join("qps.json");
        std::fs::write(&fixture, FIXTURE).unwrap();
        // The arguments are the ones the real tool needs; anything else is an error.
        let rdma = script(
            dir.path(),
            "rdma",
            &format!(
                "[ \"$*\" = \"-j -d res show qp\" ] || exit 9\ncat {}",
                fixture.display()
            ),
        );
        let (mut s, events, warning) = QpSnapshots::start(rdma, 10);
        assert_eq!(warning, None);
        assert_eq!(events.len(), 7);
        assert!(s.snapshot(20).is_empty());
        // A QP appears between two snapshots.
        let more = FIXTURE.replacen(
            "[",
            r#"[{"ifname":"mlx5_1","port":1,"lqpn":300,"type":"RC","state":"RTR","pid":4242,"comm":"ib_read_bw"},"#,
            1,
        );
        std::fs::write(&fixture, more).unwrap();
        let new = s.snapshot(30);
        assert_eq!(new.len(), 1);
        assert_eq!(
            (new[0].ts_ns, new[0].pid, new[0].comm.as_str()),
            (30, 4242, "ib_read_bw")
        );
        // A failing snapshot later on is quiet and loses nothing: what it missed comes with the next one.
        std::fs::write(&fixture, "garbage").unwrap();
        assert!(s.snapshot(40).is_empty());
        std::fs::write(&fixture, FIXTURE).unwrap();
        assert!(s.snapshot(50).is_empty());
    }

    #[test]
    fn a_broken_rdma_is_a_warning_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (dir.path().join("missing"), "cannot run"),
            (
                script(
                    dir.path(),
                    "no-device",
                    "echo 'Failed to open NETLINK_RDMA socket' >&2; exit 1",
                ),
                "Failed to open NETLINK_RDMA socket",
            ),
            (
                script(
                    dir.path(),
                    "quiet-failure",
                    "echo 'Failed to open NETLINK_RDMA socket' >&2",
                ),
                "Failed to open NETLINK_RDMA socket",
            ),
            (
                script(dir.path(), "garbage", "echo 'link mlx5_0/1 lqpn 1'"),
                "unexpected output",
            ),
            (
                script(dir.path(), "hung", "exec sleep 30"),
                "did not answer",
            ),
        ];
        for (program, why) in cases {
            let started = Instant::now();
            let (mut s, events, warning) = QpSnapshots::start(program.clone(), 1);
            let warning = warning.unwrap_or_else(|| panic!("{program:?} gave no warning"));
            assert!(warning.contains(why), "{warning}");
            assert!(warning.contains("warning"), "{warning}");
            assert!(events.is_empty());
            assert!(started.elapsed() < TIMEOUT + Duration::from_secs(3));
            // Reported once: later snapshots neither run the program nor warn.
            assert!(s.snapshot(2).is_empty());
            assert!(s.disabled);
        }
    }

    #[test]
    fn the_program_comes_from_the_environment() {
        assert_eq!(
            program_from(Some("/opt/fake/rdma".into())),
            PathBuf::from("/opt/fake/rdma")
        );
        assert_eq!(program_from(Some("".into())), PathBuf::from("rdma"));
        assert_eq!(program_from(None), PathBuf::from("rdma"));
    }
}
