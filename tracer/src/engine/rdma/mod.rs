//! The RDMA engine: the NIC's own copy of a port's traffic, through libibverbs.
//!
//! On a host whose NIC offloads RoCE (ConnectX), RDMA traffic never crosses the kernel's network stack, so
//! libpcap and the TC probe on the NIC's netdev do not see it. The NIC can hand a copy of everything its
//! port sends and receives to a raw-packet QP through a *sniffer* flow rule: that is what ibdump and
//! libpcap's `rdma` capture do, and what this engine does ([`device`]). Each completion carries the frame
//! and the NIC clock's count when it passed; [`clock`] turns that into wall time.
//!
//! The receive path sits behind [`CompletionSource`], so the same loop ([`read_loop`]) runs on a device or
//! on recorded completions ([`replay`]): the tests drive frames, a wrap of the NIC clock and exhausted
//! receive buffers through the real writer that way. Frames pass the user's `--filter` (by default the pcap
//! engine's RoCE/CNP/PFC selection, or everything with `--all-frames`) in userspace; losses are what the
//! source reports, and land in each interface's statistics block.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use roce_capture::LinkType;

use super::{Captured, Engine, EngineConfig, Event, IfaceStats, Plumbing, ReaderThreads};

pub mod clock;
pub mod device;
pub(crate) mod ffi;
pub mod replay;

use clock::{Anchor, NicClock};

/// Names a file of recorded completions to read instead of opening the device (see [`replay`]): how the
/// tests run the whole capture path on a machine without an RDMA NIC.
pub const REPLAY_ENV: &str = "ROCETRACE_RDMA_REPLAY";

/// Whether [`REPLAY_ENV`] names a recording to read instead of a device.
pub fn replaying() -> bool {
    std::env::var_os(REPLAY_ENV).is_some_and(|v| !v.is_empty())
}

/// How a completion is stamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// The NIC clock's count, converted with the latest [`Anchor`].
    Nic(u64),
    /// Already wall time (ns since the epoch): a NIC clock in real-time mode, or a CQ without timestamps
    /// stamped by the host when polled.
    Wall(u64),
}

/// What a source hands the read loop, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item<'a> {
    /// One received frame: its bytes (at most the snap length the source was asked for), its length on the
    /// wire, and its stamp.
    Frame {
        /// The bytes kept.
        data: &'a [u8],
        /// The frame's length on the wire.
        len: u32,
        /// When the NIC received it.
        stamp: Stamp,
    },
    /// A new pairing of the NIC clock with the wall clock, for the frames after it.
    Anchor(Anchor),
    /// Frames lost since the last report: receive buffers exhausted (the NIC's out-of-buffer counter),
    /// completions in error.
    Lost(u64),
}

/// A source of receive completions.
pub trait CompletionSource: Send {
    /// The NIC clock that [`Stamp::Nic`] counts in; `None` when the source stamps wall time itself.
    fn clock(&self) -> Option<NicClock>;
    /// Waits up to `wait` for completions and hands each to `each`, which returns false to stop taking
    /// them. `Ok(false)` once the source has nothing more, ever (the end of a recording).
    fn poll(
        &mut self,
        wait: Duration,
        each: &mut dyn FnMut(Item<'_>) -> bool,
    ) -> Result<bool, SourceError>;
    /// For the interface description: what the source is and how it stamps.
    fn describe(&self) -> String;
    /// For the start line: where the frames' times come from, in words, and why not from a better source
    /// when the device refused one.
    fn timestamps(&self) -> String;
}

/// A source that stopped working mid-capture.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A verbs call failed while receiving. The errno is part of the message, not a source: the capture
    /// loop passes the message on as the interface's reason for ending.
    #[error("{what} failed: {errno}")]
    Verb {
        /// The call, as the message names it.
        what: &'static str,
        /// The errno it returned.
        errno: std::io::Error,
    },
    /// Polling the CQ failed partway through a batch. What was taken before is written; the completion
    /// that failed is lost, and so may be those queued behind it, so the port's capture ends here.
    #[error(
        "{what} on {spec} failed ({errno}) after {taken} completions of a batch, which are kept: the \
         completion it could not read is lost, and the capture of this port stops rather than go on \
         missing frames unseen; `dmesg` may say why"
    )]
    Poll {
        /// The call.
        what: &'static str,
        /// `DEVICE:PORT`.
        spec: String,
        /// Completions taken in the batch before the failure.
        taken: usize,
        /// The errno it returned.
        errno: std::io::Error,
    },
    /// Anything else that ends a source, already worded for the user.
    #[error("{0}")]
    Other(String),
}

/// `DEVICE[:PORT]` of `-i`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// The RDMA device (`mlx5_0`), not its netdev.
    pub device: String,
    /// The port, 1 unless given.
    pub port: u8,
}

impl PortSpec {
    /// Reads `-i`'s `DEVICE[:PORT]`.
    pub fn parse(s: &str) -> Result<PortSpec, RdmaError> {
        let bad = || RdmaError::BadSpec(s.to_owned());
        let (device, port) = match s.rsplit_once(':') {
            Some((d, p)) => (d, p.parse::<u8>().map_err(|_| bad())?),
            None => (s, 1),
        };
        if device.is_empty() || device.contains('/') || device.starts_with('.') || port == 0 {
            return Err(bad());
        }
        Ok(PortSpec {
            device: device.to_owned(),
            port,
        })
    }
}

impl std::fmt::Display for PortSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.device, self.port)
    }
}

const CAP_FIX: &str =
    "run as root, or grant it with: sudo setcap cap_net_raw+ep $(command -v roce-tracer)";

/// Why the RDMA engine could not start. Each says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    #[error(
        "-i {0}: the rdma engine takes an RDMA device and port, DEVICE or DEVICE:PORT (e.g. mlx5_0 or mlx5_0:1)"
    )]
    /// `-i` is not `DEVICE[:PORT]`.
    BadSpec(String),
    #[error(
        "no RDMA device named {name}: {known}{hint}. `roce-tracer list` shows the RDMA devices and their netdevs"
    )]
    /// No RDMA device has that name.
    NoSuchDevice {
        /// What was asked for.
        name: String,
        /// The devices there are.
        known: String,
        /// The device to use when a netdev was named instead.
        hint: String,
    },
    #[error("{device} has no port {port} (its ports: {ports})")]
    /// The device has no such port.
    NoSuchPort {
        /// The device.
        device: String,
        /// The port asked for.
        port: u8,
        /// The ports it has.
        ports: String,
    },
    #[error(
        "{spec} is an {link_layer} port, not Ethernet: the rdma engine captures RoCE. For InfiniBand use \
         ibdump (NVIDIA's firmware tools)"
    )]
    /// The port runs InfiniBand, which carries no RoCE.
    NotEthernet {
        /// `DEVICE:PORT`.
        spec: String,
        /// What the port runs.
        link_layer: String,
    },
    #[error(
        "libibverbs is not available ({0}). Install rdma-core's library and providers: `sudo apt-get install \
         libibverbs1 ibverbs-providers` (Debian, Ubuntu) or `sudo dnf install libibverbs` (Fedora, RHEL)"
    )]
    /// libibverbs cannot be loaded. The loader's error sits inside the advice, so it is said there and not
    /// chained again as a source (as for the errnos of the variants below).
    Library(ffi::LoadError),
    #[error(
        "the kernel has {name} but libibverbs does not list it ({listed}): install the user-space provider \
         of its driver (Debian: ibverbs-providers; mlx5 needs libmlx5) and check that /dev/infiniband/uverbs* \
         exist and this user may open them"
    )]
    /// The kernel has the device but user space has no provider for it.
    NotInVerbs {
        /// The device.
        name: String,
        /// The devices libibverbs does list.
        listed: String,
    },
    #[error("{what} on {spec} is not permitted ({errno}): it needs CAP_NET_RAW; {CAP_FIX}")]
    /// A step needs CAP_NET_RAW.
    NotPermitted {
        /// The step.
        what: &'static str,
        /// `DEVICE:PORT`.
        spec: String,
        /// The errno (EPERM or EACCES).
        errno: std::io::Error,
    },
    #[error(
        "the NIC refused the sniffer flow rule on {spec} ({errno}). The sniffer needs a physical function \
         (not a VF) of a NIC whose driver and firmware support it (mlx5: ConnectX-4 or later); check that \
         the firmware is current (`mlxfwmanager --query`), that `devlink dev eswitch show` does not put the \
         port in switchdev mode, and what `dmesg` says. Meanwhile capture a mirror port, or use ibdump"
    )]
    /// The NIC refused the sniffer flow rule.
    FlowRefused {
        /// `DEVICE:PORT`.
        spec: String,
        /// The errno the driver gave.
        errno: std::io::Error,
    },
    #[error(
        "pinning {mib} MiB of receive buffers on {spec} failed ({errno}) under a locked-memory limit of \
         {limit_kib} KiB: raise the limit (`ulimit -l unlimited`, LimitMEMLOCK=infinity for a service) or run \
         as root"
    )]
    /// Pinning the receive buffers hit the locked-memory limit.
    MemLock {
        /// `DEVICE:PORT`.
        spec: String,
        /// The buffers' size.
        mib: usize,
        /// The limit in force.
        limit_kib: u64,
        /// The errno.
        errno: std::io::Error,
    },
    #[error("pinning {mib} MiB of receive buffers on {spec} failed: {errno}{why}")]
    /// Pinning the receive buffers failed for a reason other than the locked-memory limit.
    Pin {
        /// `DEVICE:PORT`.
        spec: String,
        /// The buffers' size.
        mib: usize,
        /// The errno.
        errno: std::io::Error,
        /// What the errno does not say, or nothing.
        why: &'static str,
    },
    /// Any other verbs call failed while setting up.
    #[error("{what} on {spec} failed")]
    Verb {
        /// The call.
        what: &'static str,
        /// `DEVICE:PORT`.
        spec: String,
        /// The errno.
        #[source]
        source: std::io::Error,
    },
    /// The user's filter does not compile (the eBPF engine compiles it the same way, for the same use).
    #[error(transparent)]
    Filter(#[from] super::ebpf::EbpfStartError),
    #[error("cannot read the recorded completions in {path}")]
    /// A recording of completions (the tests' stand-in for a NIC) cannot be read.
    Replay {
        /// The recording.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the capture thread")]
    /// The reader thread could not be started.
    Thread(#[from] std::io::Error),
}

/// The error for a verb that failed with `errno`: refusals of permission and of the sniffer rule get their
/// own advice, everything else says which verb failed.
pub fn verb_error(what: &'static str, spec: &PortSpec, errno: i32) -> RdmaError {
    let error = std::io::Error::from_raw_os_error(errno);
    let spec = spec.to_string();
    match (what, errno) {
        (_, libc::EPERM | libc::EACCES) => RdmaError::NotPermitted {
            what,
            spec,
            errno: error,
        },
        ("ibv_create_flow", _) => RdmaError::FlowRefused { spec, errno: error },
        _ => RdmaError::Verb {
            what,
            spec,
            source: error,
        },
    }
}

/// The error for `ibv_reg_mr` failing with `errno` on `bytes` of receive buffers, given the locked-memory
/// limit (`None`: unlimited) and the effective capabilities. The kernel answers ENOMEM when the pages would
/// pass the limit and EPERM when the limit is zero, but ENOMEM is also plain shortage; so the limit gets the
/// blame, and its advice, only when it binds this process (finite, and no CAP_IPC_LOCK to lift it), and any
/// other failure is reported with its own errno.
pub fn pin_error(
    spec: &PortSpec,
    bytes: usize,
    errno: i32,
    memlock: Option<u64>,
    caps: u64,
) -> RdmaError {
    let lifted = crate::sys::missing_caps(caps, &[crate::sys::Cap::IpcLock]).is_empty();
    let (spec, mib, error) = (
        spec.to_string(),
        bytes >> 20,
        std::io::Error::from_raw_os_error(errno),
    );
    let limit_refusal = matches!(errno, libc::ENOMEM | libc::EPERM);
    match memlock.filter(|_| !lifted) {
        Some(limit) if limit_refusal => RdmaError::MemLock {
            spec,
            mib,
            limit_kib: limit >> 10,
            errno: error,
        },
        _ => RdmaError::Pin {
            spec,
            mib,
            errno: error,
            why: if limit_refusal {
                " (not the locked-memory limit, which does not bind this process: the host may be short of \
                 memory)"
            } else {
                ""
            },
        },
    }
}

/// The netdev of each `-i DEVICE[:PORT]` (for `--counters`' ethtool statistics); a name that is not an RDMA
/// port of this host, or a port without a netdev, stays as given.
pub fn netdevs_of(sysfs_root: &Path, interfaces: &[String]) -> Vec<String> {
    let ports = crate::ports::rdma_ports(sysfs_root);
    interfaces
        .iter()
        .map(|i| {
            PortSpec::parse(i)
                .ok()
                .and_then(|s| {
                    ports
                        .iter()
                        .find(|p| p.device == s.device && p.port == u32::from(s.port))
                })
                .and_then(|p| p.netdev.clone())
                .unwrap_or_else(|| i.clone())
        })
        .collect()
}

/// What the kernel's sysfs says about the devices (`class/infiniband`), checked before libibverbs is even
/// loaded: a wrong name or an InfiniBand port gets its answer on any machine.
pub fn check_port(sysfs_root: &Path, spec: &PortSpec) -> Result<(), RdmaError> {
    let devices = crate::ports::rdma_ports(sysfs_root);
    let here: Vec<&crate::ports::RdmaPort> =
        devices.iter().filter(|p| p.device == spec.device).collect();
    if here.is_empty() {
        let mut names: Vec<&str> = devices.iter().map(|p| p.device.as_str()).collect();
        names.dedup();
        let known = if names.is_empty() {
            "this machine has none (no class/infiniband in sysfs: no RDMA driver is loaded; on a ConnectX \
             host `modprobe mlx5_ib`)"
                .to_owned()
        } else {
            format!("the RDMA devices are {}", names.join(", "))
        };
        // A netdev name given where the device is wanted: name the device behind it.
        let hint = devices
            .iter()
            .find(|p| p.netdev.as_deref() == Some(spec.device.as_str()))
            .map(|p| {
                format!(
                    "; {} is the netdev of {}:{}, so try -i {}:{}",
                    spec.device, p.device, p.port, p.device, p.port
                )
            })
            .unwrap_or_default();
        return Err(RdmaError::NoSuchDevice {
            name: spec.device.clone(),
            known,
            hint,
        });
    }
    let Some(port) = here.iter().find(|p| p.port == u32::from(spec.port)) else {
        return Err(RdmaError::NoSuchPort {
            device: spec.device.clone(),
            port: spec.port,
            ports: here
                .iter()
                .map(|p| p.port.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    match port.link_layer.as_deref() {
        Some("Ethernet") => Ok(()),
        other => Err(RdmaError::NotEthernet {
            spec: spec.to_string(),
            link_layer: other.unwrap_or("unknown").to_owned(),
        }),
    }
}

/// Opens a source for every `-i`, then starts one reader thread per source.
pub fn start(
    config: &EngineConfig,
    plumbing: &Plumbing,
    sysfs_root: Option<&Path>,
) -> Result<RdmaEngine, RdmaError> {
    let specs = config
        .interfaces
        .iter()
        .map(|s| PortSpec::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut sources: Vec<Box<dyn CompletionSource>> = Vec::new();
    if let Some(path) = std::env::var_os(REPLAY_ENV).filter(|_| replaying()) {
        for _ in &specs {
            sources.push(Box::new(replay::Replay::open(
                Path::new(&path),
                config.snaplen,
            )?));
        }
    } else {
        let root = sysfs_root.unwrap_or(Path::new("/sys"));
        for spec in &specs {
            check_port(root, spec)?;
        }
        let verbs = Arc::new(ffi::Verbs::load().map_err(RdmaError::Library)?);
        for spec in &specs {
            sources.push(Box::new(device::Sniffer::open(
                Arc::clone(&verbs),
                spec,
                config.snaplen,
                root,
            )?));
        }
    }
    start_with(sources, config, plumbing)
}

/// Starts the engine on sources already open (the tests' way in).
pub fn start_with(
    sources: Vec<Box<dyn CompletionSource>>,
    config: &EngineConfig,
    plumbing: &Plumbing,
) -> Result<RdmaEngine, RdmaError> {
    let filter_text = match (&config.filter, config.all_frames) {
        (Some(f), _) => Some(f.clone()),
        (None, false) => Some(super::pcap::DEFAULT_FILTER.to_owned()),
        (None, true) => None,
    };
    let descriptions: Vec<String> = sources
        .iter()
        .map(|s| {
            let mut d = format!("roce-tracer engine=rdma {}", s.describe());
            if let Some(f) = &config.filter {
                d.push_str(" filter=");
                d.push_str(f);
            } else if config.all_frames {
                d.push_str(" all-frames");
            }
            d
        })
        .collect();
    for (source, name) in sources.iter().zip(&config.interfaces) {
        crate::term::say(&format!(
            "roce-tracer: {name}: timestamps from {}",
            source.timestamps()
        ));
    }
    let mut readers = ReaderThreads::new(sources.len());
    for (i, source) in sources.into_iter().enumerate() {
        let filter = filter_text
            .as_deref()
            .map(super::ebpf::compile_filter)
            .transpose()?;
        let plumbing = plumbing.clone();
        let name = config.interfaces.get(i).cloned().unwrap_or_default();
        let iface = i as u32;
        readers.spawn(format!("rdma-{name}"), move |dropped| {
            read_loop(source, iface, filter, &plumbing, dropped, &name)
        })?;
    }
    Ok(RdmaEngine {
        readers,
        descriptions,
    })
}

/// The running capture: one reader thread per port, and the drops each has counted.
#[derive(Debug)]
pub struct RdmaEngine {
    readers: ReaderThreads,
    descriptions: Vec<String>,
}

/// How long a stopping capture keeps taking completions already in the queue.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);
const WAIT: Duration = Duration::from_millis(100);

/// What one reader thread keeps between completions.
struct Reader<'a> {
    iface: u32,
    clock: Option<NicClock>,
    anchor: Option<Anchor>,
    filter: Option<pcap::BpfProgram>,
    p: &'a Plumbing,
    dropped: &'a [AtomicU64],
    received: u64,
    /// Frames the filter passed, handed to the writer.
    passed: u64,
    lost: u64,
    writer_gone: bool,
}

impl Reader<'_> {
    fn take(&mut self, item: Item<'_>) -> bool {
        match item {
            Item::Anchor(a) => self.anchor = Some(a),
            Item::Lost(n) => {
                self.lost += n;
                if let Some(d) = self.dropped.get(self.iface as usize) {
                    d.store(self.lost, Ordering::Relaxed);
                }
            }
            Item::Frame { data, len, stamp } => {
                self.received += 1;
                if self.filter.as_ref().is_some_and(|f| !f.filter(data)) {
                    return true;
                }
                self.passed += 1;
                let ts_ns = match (stamp, self.clock, self.anchor) {
                    (Stamp::Wall(ns), _, _) => ns,
                    (Stamp::Nic(t), Some(c), Some(a)) => c.wall_ns(a, t),
                    // Sources send an anchor before their first frame; the host clock is the fallback.
                    (Stamp::Nic(_), _, _) => crate::sys::now_ns(),
                };
                let frame = Captured {
                    iface: self.iface,
                    ts_ns,
                    len,
                    data: data.to_vec(),
                };
                if self.p.tx.send(Event::Frame(frame)).is_err() {
                    self.writer_gone = true;
                    return false;
                }
            }
        }
        true
    }
}

/// Reads one source until the stop flag, the end of the source, or a failure; returns the interface's
/// counters: the frames the filter passed plus those the source lost, as received, and the lost ones (lost
/// before any filter could look, so with a filter an upper bound, as with the eBPF engine).
fn read_loop(
    mut source: Box<dyn CompletionSource>,
    iface: u32,
    filter: Option<pcap::BpfProgram>,
    p: &Plumbing,
    dropped: &[AtomicU64],
    name: &str,
) -> IfaceStats {
    let mut r = Reader {
        iface,
        clock: source.clock(),
        anchor: None,
        filter,
        p,
        dropped,
        received: 0,
        passed: 0,
        lost: 0,
        writer_gone: false,
    };
    let mut ended: Option<String> = None;
    while !p.stop.load(Ordering::Relaxed) && !r.writer_gone {
        match source.poll(WAIT, &mut |item| r.take(item)) {
            Ok(true) => {}
            Ok(false) => {
                ended = Some(format!("{name}: the recorded completions are all read"));
                break;
            }
            Err(e) => {
                ended = Some(format!("{name}: {e}"));
                break;
            }
        }
    }
    // Completions already queued arrived before the stop and count as received: write them too.
    if ended.is_none() {
        let deadline = Instant::now() + DRAIN_LIMIT;
        while Instant::now() < deadline && !r.writer_gone {
            let before = r.received;
            match source.poll(Duration::ZERO, &mut |item| r.take(item)) {
                Ok(true) if r.received > before => {}
                _ => break,
            }
        }
    }
    if let Some(reason) = ended {
        let _ = p.tx.send(Event::Ended { iface, reason });
    }
    IfaceStats {
        received: Some(r.passed + r.lost),
        dropped: Some(r.lost),
    }
}

impl Engine for RdmaEngine {
    fn link_types(&self) -> Vec<LinkType> {
        vec![LinkType::ETHERNET; self.descriptions.len()]
    }

    fn describe(&self, iface: u32) -> String {
        self.descriptions
            .get(iface as usize)
            .cloned()
            .unwrap_or_default()
    }

    fn dropped_so_far(&self) -> Vec<u64> {
        self.readers.dropped_so_far()
    }

    fn finish(self: Box<Self>, _late: &[u64]) -> (Vec<IfaceStats>, Option<Vec<u8>>) {
        (self.readers.join(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_specs() {
        assert_eq!(
            PortSpec::parse("mlx5_0").unwrap(),
            PortSpec {
                device: "mlx5_0".into(),
                port: 1
            }
        );
        assert_eq!(PortSpec::parse("mlx5_1:2").unwrap().port, 2);
        for bad in [
            "",
            ":1",
            "mlx5_0:0",
            "mlx5_0:x",
            "mlx5_0:300",
            "../x",
            "a/b",
        ] {
            let e = PortSpec::parse(bad).unwrap_err();
            assert!(e.to_string().contains("DEVICE:PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn refusals_get_their_advice() {
        let spec = PortSpec::parse("mlx5_0").unwrap();
        let e = verb_error("ibv_create_qp", &spec, libc::EPERM).to_string();
        assert!(e.contains("CAP_NET_RAW") && e.contains("setcap"), "{e}");
        let e = verb_error("ibv_create_flow", &spec, libc::EACCES).to_string();
        assert!(e.contains("CAP_NET_RAW"), "{e}");
        for errno in [libc::EINVAL, libc::EOPNOTSUPP, libc::ENOTSUP] {
            let e = verb_error("ibv_create_flow", &spec, errno).to_string();
            assert!(
                e.contains("refused the sniffer") && e.contains("mlxfwmanager"),
                "{e}"
            );
        }
        let e = verb_error("ibv_alloc_pd", &spec, libc::ENOMEM).to_string();
        assert!(e.contains("ibv_alloc_pd on mlx5_0:1 failed"), "{e}");
    }

    #[test]
    fn only_a_binding_locked_memory_limit_is_blamed_for_a_failed_pin() {
        let spec = PortSpec::parse("mlx5_0").unwrap();
        let ipc_lock = 1u64 << crate::sys::Cap::IpcLock as u32;
        let pin = |errno, limit, caps| pin_error(&spec, 36 << 20, errno, limit, caps).to_string();
        let advice = "raise the limit (`ulimit -l unlimited`";
        // Past a finite limit (ENOMEM), or a limit of zero (EPERM), without CAP_IPC_LOCK: the limit.
        for errno in [libc::ENOMEM, libc::EPERM] {
            let e = pin(errno, Some(8 << 20), 0);
            assert!(e.contains(advice) && e.contains("8192 KiB"), "{e}");
            assert!(
                e.starts_with("pinning 36 MiB of receive buffers on mlx5_0:1"),
                "{e}"
            );
        }
        // ENOMEM when no limit binds: memory is short, and the message says the limit is not it.
        for (limit, caps) in [(None, 0), (Some(8 << 20), ipc_lock)] {
            let e = pin(libc::ENOMEM, limit, caps);
            assert!(!e.contains(advice), "{e}");
            assert!(
                e.contains("Cannot allocate memory") && e.contains("not the locked-memory limit"),
                "{e}"
            );
        }
        // Any other errno is said as it is, under a limit or not.
        for limit in [None, Some(8 << 20)] {
            let e = pin(libc::EFAULT, limit, 0);
            assert!(!e.contains("locked-memory"), "{e}");
            assert!(e.ends_with("failed: Bad address (os error 14)"), "{e}");
        }
    }
}
