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
//!
//! `rdma` gives a QP's device and port but no address, and QP numbers are only unique per device: on its own
//! a snapshot QP would match a flow to or from any host using that number. Each QP event therefore carries
//! the addresses of its port, read from the port's GID table in sysfs (see [`read_gid_table`]), so that the
//! analyzer ties it only to flows at that host.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use roce_capture::blocks::records::Event;

/// The pseudo tracepoint of a QP found in a snapshot; the name is `rdma res`'s, the form a tracepoint's,
/// so that the analyzer's event handling carries it unchanged.
pub const TRACEPOINT: &str = roce_core::recorded::RDMA_RES_QP;

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
    /// The QP number.
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

    /// The QP as an `EVNT` event at `ts_ns`, with `addrs`, its port's addresses (see [`port_addrs`]), as
    /// text in the field `addrs`; left out when empty, which the analyzer reads as "any host". A kernel QP
    /// fires "in" pid 0, as a kernel thread would.
    pub fn event(&self, ts_ns: u64, addrs: &[IpAddr]) -> Event {
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
        if !addrs.is_empty() {
            let text: Vec<Value> = addrs.iter().map(|a| a.to_string().into()).collect();
            fields.insert("addrs".into(), text.into());
        }
        Event {
            ts_ns,
            tracepoint: TRACEPOINT.into(),
            pid: self.pid.unwrap_or(0),
            tid: self.pid.unwrap_or(0),
            comm: self.comm.clone().unwrap_or_default(),
            fields,
        }
    }
}

/// Why a snapshot of the QPs could not be taken: said once as a warning, never fatal.
#[derive(Debug, thiserror::Error)]
pub enum QpOwnersError {
    /// The program could not be started.
    #[error("cannot run {program}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The program did not answer in time.
    #[error("{program} did not answer within {TIMEOUT:?}")]
    Timeout {
        /// The program.
        program: String,
    },
    /// The program failed.
    #[error("{program} failed ({status}): {stderr}")]
    Failed {
        /// The program.
        program: String,
        /// Its exit status.
        status: String,
        /// What it printed on standard error.
        stderr: String,
    },
    /// Its output is not the JSON expected.
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

/// One entry of a port's GID table that is in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gid {
    /// The entry's index (what `show_gids` lists and perftest's `-x` takes).
    pub index: u32,
    /// The GID as an address. RoCE keeps an IPv4 address as the IPv4-mapped GID `::ffff:a.b.c.d`; that is
    /// given as the IPv4 address, the form a flow's addresses have.
    pub addr: IpAddr,
    /// `RoCE v2` or `IB/RoCE v1`, as the kernel names it; `None` when `gid_attrs` does not say (older
    /// kernels, an InfiniBand port).
    pub kind: Option<String>,
    /// The netdev the entry belongs to; `None` as for `kind`.
    pub ndev: Option<String>,
}

/// The text of a `gids/<index>` file (eight groups of four hex digits) as an IPv6 address; `None` for
/// anything else.
pub fn parse_gid(text: &str) -> Option<Ipv6Addr> {
    text.trim().parse().ok()
}

/// The used entries of `device`'s `port` GID table under `sysfs_root` (`/sys` on a live host), by index:
/// `class/infiniband/<device>/ports/<port>/gids/<index>`, with `gid_attrs/types/<index>` and
/// `gid_attrs/ndevs/<index>` beside. All-zero GIDs are free slots and left out, as are files that cannot be
/// read or parsed (the kernel refuses to read some entries while they change). An error only when the table
/// itself cannot be listed.
pub fn read_gid_table(sysfs_root: &Path, device: &str, port: u32) -> std::io::Result<Vec<Gid>> {
    // The device name comes from another program's output and becomes a path component.
    if device.is_empty() || device.contains('/') || device == "." || device == ".." {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{device:?} is not a device name"),
        ));
    }
    let port_dir = sysfs_root
        .join("class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string());
    let attr = |group: &str, index: u32| {
        std::fs::read_to_string(
            port_dir
                .join("gid_attrs")
                .join(group)
                .join(index.to_string()),
        )
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(port_dir.join("gids"))?.flatten() {
        let Some(index) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Some(gid) = std::fs::read_to_string(entry.path())
            .ok()
            .and_then(|t| parse_gid(&t))
            .filter(|g| !g.is_unspecified())
        else {
            continue;
        };
        out.push(Gid {
            index,
            addr: gid.to_canonical(),
            kind: attr("types", index),
            ndev: attr("ndevs", index),
        });
    }
    out.sort_by_key(|g| g.index);
    Ok(out)
}

/// The distinct addresses of a GID table, in index order. RoCE v1 entries count as well as v2 ones: both
/// are addresses of the port's netdev, and a v1 entry's address is the host's even though v1 frames carry
/// no IP header.
pub fn port_addrs(gids: &[Gid]) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    for g in gids {
        if !out.contains(&g.addr) {
            out.push(g.addr);
        }
    }
    out
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
    /// Where the GID tables are read: `/sys`, or a fixture tree (`--sysfs-root`).
    sysfs_root: PathBuf,
    /// The QPs of the last snapshot that worked.
    known: BTreeSet<QpKey>,
    /// The first snapshot failed: no more are taken.
    disabled: bool,
}

impl QpSnapshots {
    /// Takes the first snapshot at once with `program`, reading the ports' GID tables under `sysfs_root`.
    /// On failure the warning to print is returned beside a disabled recorder: ownership from `rdma` is a
    /// bonus, never a reason not to capture.
    pub fn start(
        program: PathBuf,
        sysfs_root: PathBuf,
        ts_ns: u64,
    ) -> (QpSnapshots, Vec<Event>, Option<String>) {
        let mut s = QpSnapshots {
            program,
            sysfs_root,
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

    /// [`QpSnapshots::start`] with [`rdma_program`], and `/sys` unless a fixture tree is given.
    pub fn start_default(
        ts_ns: u64,
        sysfs_root: Option<&Path>,
    ) -> (QpSnapshots, Vec<Event>, Option<String>) {
        let root = sysfs_root.unwrap_or(Path::new("/sys")).to_path_buf();
        Self::start(rdma_program(), root, ts_ns)
    }

    /// Events for the QPs that appeared since the previous snapshot. A failing snapshot after a good
    /// start yields nothing and keeps the previous state, so the next one reports what it missed.
    pub fn snapshot(&mut self, ts_ns: u64) -> Vec<Event> {
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

    /// Replaces the known set with `qps`, returning the events of those not in it before. The GID table of
    /// each port with a new QP is read then, once per call: only new QPs need it, and addresses may have
    /// changed since the previous snapshot. A port whose table cannot be read gives no addresses.
    pub fn update(&mut self, qps: Vec<QpOwner>, ts_ns: u64) -> Vec<Event> {
        let mut now = BTreeSet::new();
        let mut events = Vec::new();
        let mut addrs: BTreeMap<(String, u32), Vec<IpAddr>> = BTreeMap::new();
        for q in qps {
            let key = q.key();
            if !self.known.contains(&key) && !now.contains(&key) {
                let known_addrs = match q.port {
                    Some(port) => addrs
                        .entry((q.device.clone(), port))
                        .or_insert_with(|| {
                            read_gid_table(&self.sysfs_root, &q.device, port)
                                .map(|g| port_addrs(&g))
                                .unwrap_or_default()
                        })
                        .as_slice(),
                    None => &[],
                };
                events.push(q.event(ts_ns, known_addrs));
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

        let e = perftest.event(42, &[]);
        assert_eq!(
            (e.ts_ns, e.pid, e.comm.as_str()),
            (42, 30488, "ib_write_bw")
        );
        assert_eq!(e.tracepoint, "rdma_res:qp");
        assert_eq!(e.fields["lqpn"], 1722);
        assert_eq!(e.fields["rqpn"], 1723);
        assert_eq!(e.fields["type"], "RC");
        let k = nvmet.event(42, &[]);
        assert_eq!(k.pid, 0);
        assert!(!k.fields.contains_key("pid"));
        assert_eq!(k.fields["rqpn"], 17);
        assert_eq!(k.fields["comm"], "nvmet_rdma");
        assert!(!k.fields.contains_key("addrs"), "no addresses, no field");
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
            sysfs_root: PathBuf::from("/nonexistent"),
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

    /// What `port_addrs` makes of [`gid_fixture`]'s mlx5_0 port 1, as text.
    const MLX5_0_ADDRS: [&str; 4] = ["fe80::a00:ff:fe00:1", "10.0.0.1", "2001:db8::1", "10.0.0.9"];

    /// Under `root`, the GID tables of two ports laid out as a kernel shows them. mlx5_0 port 1 is a RoCE
    /// port with a link-local GID, an IPv4 address (each as a v1 and a v2 entry), a global IPv6 GID and a
    /// second IPv4 address at index 10 (after index 2 in number order, before it in name order), free
    /// entries between them, and a file that is not a GID. mlx5_1 port 1 has one IPv4 GID and no
    /// `gid_attrs` (an older kernel); mlx5_2 has no `gids` directory.
    fn gid_fixture(root: &Path) {
        let port = root.join("class/infiniband/mlx5_0/ports/1");
        let put = |rel: &Path, v: &str| {
            std::fs::create_dir_all(rel.parent().unwrap()).unwrap();
            std::fs::write(rel, format!("{v}\n")).unwrap();
        };
        let zero = "0000:0000:0000:0000:0000:0000:0000:0000";
        let link_local = "fe80:0000:0000:0000:0a00:00ff:fe00:0001";
        let ipv4 = "0000:0000:0000:0000:0000:ffff:0a00:0001";
        let (v1, v2) = (Some("IB/RoCE v1"), Some("RoCE v2"));
        let table = [
            ("0", link_local, v1),
            ("1", link_local, v2),
            ("2", ipv4, v1),
            ("3", ipv4, v2),
            ("4", "2001:0db8:0000:0000:0000:0000:0000:0001", v2),
            ("5", zero, None),
            ("6", zero, None),
            ("10", "0000:0000:0000:0000:0000:ffff:0a00:0009", v2),
            ("11", "not a gid", v2),
            ("12", zero, None),
        ];
        for (index, gid, kind) in table {
            put(&port.join("gids").join(index), gid);
            if let Some(k) = kind {
                put(&port.join("gid_attrs/types").join(index), k);
                put(&port.join("gid_attrs/ndevs").join(index), "eth0");
            }
        }
        let other = root.join("class/infiniband/mlx5_1/ports/1/gids");
        put(&other.join("0"), "0000:0000:0000:0000:0000:ffff:0a00:0101");
        put(&other.join("1"), zero);
        std::fs::create_dir_all(root.join("class/infiniband/mlx5_2/ports/1")).unwrap();
    }

    #[test]
    fn gid_tables_from_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        gid_fixture(dir.path());
        let gids = read_gid_table(dir.path(), "mlx5_0", 1).unwrap();
        let got: Vec<(u32, String, Option<&str>, Option<&str>)> = gids
            .iter()
            .map(|g| {
                (
                    g.index,
                    g.addr.to_string(),
                    g.kind.as_deref(),
                    g.ndev.as_deref(),
                )
            })
            .collect();
        let v1 = Some("IB/RoCE v1");
        let v2 = Some("RoCE v2");
        let eth0 = Some("eth0");
        let row = |i: u32, a: &str, k| (i, a.to_string(), k, eth0);
        assert_eq!(
            got,
            [
                row(0, "fe80::a00:ff:fe00:1", v1),
                row(1, "fe80::a00:ff:fe00:1", v2),
                row(2, "10.0.0.1", v1),
                row(3, "10.0.0.1", v2),
                row(4, "2001:db8::1", v2),
                row(10, "10.0.0.9", v2),
            ]
        );
        // IPv4-mapped GIDs are IPv4 addresses, the others IPv6 ones.
        assert!(gids[2].addr.is_ipv4() && gids[4].addr.is_ipv6());
        let addrs: Vec<String> = port_addrs(&gids).iter().map(|a| a.to_string()).collect();
        assert_eq!(addrs, MLX5_0_ADDRS);

        // No gid_attrs: the addresses without their type.
        let old = read_gid_table(dir.path(), "mlx5_1", 1).unwrap();
        assert_eq!(old.len(), 1);
        assert_eq!(
            (
                old[0].addr.to_string(),
                old[0].kind.as_deref(),
                old[0].ndev.as_deref()
            ),
            ("10.0.1.1".to_string(), None, None)
        );
        // No table, no port, no device, or a name that is not one: errors, never a panic.
        assert!(read_gid_table(dir.path(), "mlx5_2", 1).is_err());
        assert!(read_gid_table(dir.path(), "mlx5_0", 2).is_err());
        assert!(read_gid_table(dir.path(), "mlx5_9", 1).is_err());
        for bad in ["", ".", "..", "../mlx5_0", "mlx5_0/ports"] {
            assert!(read_gid_table(dir.path(), bad, 1).is_err(), "{bad:?}");
        }

        assert_eq!(
            parse_gid("0000:0000:0000:0000:0000:ffff:c0a8:0102\n").map(|g| g.to_canonical()),
            Some(IpAddr::from([192, 168, 1, 2]))
        );
        assert_eq!(parse_gid(""), None);
        assert_eq!(parse_gid("10.0.0.1"), None);
    }

    #[test]
    fn snapshot_events_carry_their_ports_addresses() {
        let dir = tempfile::tempdir().unwrap();
        gid_fixture(dir.path());
        let mut s = QpSnapshots {
            program: PathBuf::from("/nonexistent"),
            sysfs_root: dir.path().to_path_buf(),
            known: BTreeSet::new(),
            disabled: false,
        };
        let mut qps = parse(FIXTURE).unwrap();
        // The same QP number on a device without a GID table.
        qps.push(QpOwner {
            device: "mlx5_2".into(),
            ..qps.iter().find(|q| q.lqpn == 1722).unwrap().clone()
        });
        let events = s.update(qps, 7);
        let addrs: Vec<(String, u64, Option<Vec<String>>)> = events
            .iter()
            .map(|e| {
                (
                    e.fields["device"].as_str().unwrap().to_string(),
                    e.fields["lqpn"].as_u64().unwrap(),
                    e.fields.get("addrs").map(|a| {
                        a.as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_str().unwrap().to_string())
                            .collect()
                    }),
                )
            })
            .collect();
        let mlx5_0 = || Some(MLX5_0_ADDRS.iter().map(|a| a.to_string()).collect());
        let mlx5_1 = || Some(vec!["10.0.1.1".to_string()]);
        let row = |d: &str, q: u64, a| (d.to_string(), q, a);
        assert_eq!(
            addrs,
            [
                row("mlx5_0", 0, mlx5_0()),
                row("mlx5_0", 1, mlx5_0()),
                row("mlx5_0", 1722, mlx5_0()),
                row("mlx5_0", 1724, mlx5_0()),
                row("mlx5_1", 1, mlx5_1()),
                row("mlx5_1", 203, mlx5_1()),
                // Not bound to a port: no table to read.
                row("mlx5_1", 210, None),
                // No GID table: no addresses, rather than an empty list.
                row("mlx5_2", 1722, None),
            ]
        );
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
        let sysfs = dir.path().join("sys");
        gid_fixture(&sysfs);
        let (mut s, events, warning) = QpSnapshots::start(rdma, sysfs, 10);
        assert_eq!(warning, None);
        assert_eq!(events.len(), 7);
        let addrs = |lqpn: u32, device: &str| {
            events
                .iter()
                .find(|e| e.fields["lqpn"] == lqpn && e.fields["device"] == device)
                .unwrap()
                .fields
                .get("addrs")
                .cloned()
        };
        assert_eq!(
            addrs(1722, "mlx5_0").unwrap(),
            serde_json::json!(MLX5_0_ADDRS)
        );
        assert_eq!(addrs(1, "mlx5_1").unwrap(), serde_json::json!(["10.0.1.1"]));
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
            let (mut s, events, warning) =
                QpSnapshots::start(program.clone(), dir.path().to_path_buf(), 1);
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
