//! `roce-tracer list`: what this host can capture, with which engine, and what each engine would see.
//!
//! Everything comes from sysfs, as [`crate::ports`] reads it under a root that the tests point at a recorded
//! tree. The point of the table is the one fact that surprises people: on a NIC that offloads RoCE, the
//! netdev carries only the kernel's traffic, so `--engine pcap|ebpf` there see no RDMA at all, and only the
//! NIC's sniffer (`--engine rdma`) or a mirror port sees it.

use std::fmt::Write as _;
use std::path::Path;

use crate::counters::Sampler;
use crate::ports::{Netdev, RdmaPort, netdevs, rdma_ports};
use crate::qp_owners::Gid;
use crate::sys::{Cap, missing_caps};
use roce_core::nic_counters::{self, Meaning, Place, Vendor};

/// What each engine would see on a netdev.
fn netdev_view(n: &Netdev, ports: &[RdmaPort]) -> String {
    let of: Vec<&RdmaPort> = ports
        .iter()
        .filter(|p| p.netdev.as_deref() == Some(n.name.as_str()))
        .collect();
    match of.first() {
        None => "pcap, ebpf: all its traffic".into(),
        Some(p) if p.software => format!(
            "pcap, ebpf: all its traffic, Soft-RoCE ({}) included",
            p.device
        ),
        Some(p) => format!(
            "pcap, ebpf: kernel traffic only, not the NIC's RoCE; for RoCE: --engine rdma -i {}:{}",
            p.device, p.port
        ),
    }
}

/// What `--engine rdma` would see on a port.
fn port_view(p: &RdmaPort) -> String {
    if p.software {
        return format!(
            "rdma: no (software RDMA has no sniffer; capture {} with pcap or ebpf)",
            p.netdev.as_deref().unwrap_or("its netdev")
        );
    }
    match p.link_layer.as_deref() {
        Some("Ethernet") => format!(
            "rdma (-i {}:{}): every frame of the port in both directions, RoCE included",
            p.device, p.port
        ),
        other => format!(
            "rdma: no ({} link layer; use ibdump)",
            other.unwrap_or("unknown")
        ),
    }
}

/// Whose counter names a port has, and how that is known: its driver, its device name, or its counters' names.
fn vendor_of(p: &RdmaPort, hw: &[String]) -> (Option<Vendor>, String) {
    if let Some(v) = p.driver.as_deref().and_then(Vendor::of_driver) {
        return (
            Some(v),
            format!("driver {}", p.driver.as_deref().unwrap_or("")),
        );
    }
    if let Some(v) = Vendor::of_device_name(&p.device) {
        return (Some(v), "device name".into());
    }
    if let Some(v) = Vendor::of_counter_names(hw.iter().map(String::as_str)) {
        return (Some(v), "counter names".into());
    }
    (
        None,
        p.driver
            .as_deref()
            .map_or("no driver link".into(), |d| format!("driver {d}")),
    )
}

/// The names in a port's `hw_counters` directory.
fn hw_counter_names(root: &Path, p: &RdmaPort) -> Vec<String> {
    crate::ports::names_in(
        &root
            .join("class/infiniband")
            .join(&p.device)
            .join("ports")
            .join(p.port.to_string())
            .join("hw_counters"),
    )
}

/// `pause_frames_rx[0-7]`, `pause_frames_tx[3,4]`: each meaning with the priorities it is counted for, runs of
/// three or more as ranges.
fn meanings_text(readable: &[(Meaning, Option<u8>)]) -> String {
    let mut out: Vec<String> = Vec::new();
    for m in Meaning::ALL {
        let of: Vec<Option<u8>> = readable
            .iter()
            .filter(|(r, _)| *r == m)
            .map(|(_, p)| *p)
            .collect();
        let prios: Vec<u8> = of.iter().flatten().copied().collect();
        if of.contains(&None) {
            out.push(m.key().to_string());
        } else if !prios.is_empty() {
            out.push(format!("{}[{}]", m.key(), ranges(&prios)));
        }
    }
    out.join(", ")
}

/// `0-7`, `3,4`, `0,2-5`: sorted numbers with their runs of three or more as ranges.
fn ranges(sorted: &[u8]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        if j >= i + 2 {
            parts.push(format!("{}-{}", sorted[i], sorted[j]));
        } else {
            parts.extend(sorted[i..=j].iter().map(u8::to_string));
        }
        i = j + 1;
    }
    parts.join(",")
}

/// What `--counters` reads of a port by meaning: whose names, which meanings its counters and its netdev's
/// ethtool statistics hold here, which its vendor has no counter for, and which it has but are missing here.
fn counters_view(root: &Path, p: &RdmaPort, counters: &mut Sampler) -> String {
    let hw = hw_counter_names(root, p);
    let (vendor, from) = vendor_of(p, &hw);
    let Some(v) = vendor else {
        return format!(
            "counters: whose names these are is not known ({from}); roce-analyzer shows them by their own names only"
        );
    };
    let eth = p
        .netdev
        .as_deref()
        .map(|n| counters.ethtool_names(n))
        .unwrap_or_default();
    let readable = nic_counters::readable(v, |place, name| match place {
        Place::HwCounters => hw.iter().any(|h| h == name),
        Place::Ethtool => eth.iter().any(|e| e == name),
    });
    let mut line = format!("counters ({}, by its {from}): ", v.name());
    if readable.is_empty() {
        line.push_str("no meaning readable here");
    } else {
        line.push_str(&meanings_text(&readable));
    }
    let missing: Vec<&str> = Meaning::ALL
        .into_iter()
        .filter(|m| nic_counters::source(v, *m).is_some() && !readable.iter().any(|(r, _)| r == m))
        .map(Meaning::key)
        .collect();
    if !missing.is_empty() {
        let _ = write!(line, "; not found here: {}", missing.join(", "));
    }
    let lacks: Vec<&str> = nic_counters::not_counted(v)
        .into_iter()
        .map(Meaning::key)
        .collect();
    if !lacks.is_empty() {
        let _ = write!(line, "; not counted by {}: {}", v.name(), lacks.join(", "));
    }
    line
}

fn gid_summary(gids: &[Gid]) -> String {
    if gids.is_empty() {
        return "-".into();
    }
    gids.iter()
        .map(|g| {
            let kind = match g.kind.as_deref() {
                Some("RoCE v2") => "v2",
                Some(k) if k.contains("v1") => "v1",
                Some(k) => k,
                None => "?",
            };
            format!("{}:{kind}:{}", g.index, g.addr)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether libibverbs loads here and which devices it lists, for the rdma engine's line.
pub fn libibverbs_status() -> String {
    use crate::engine::rdma::ffi::{Verbs, listing_failure};
    match Verbs::load() {
        Ok(v) => match v.device_names() {
            Ok(names) if names.is_empty() => {
                format!("{} loads and lists no device", Verbs::library_name())
            }
            Ok(names) => format!(
                "{} loads and lists {}",
                Verbs::library_name(),
                names.join(", ")
            ),
            Err(errno) => format!(
                "{} loads; {}",
                Verbs::library_name(),
                listing_failure(errno)
            ),
        },
        Err(e) => format!("{e} (sudo apt-get install libibverbs1 ibverbs-providers)"),
    }
}

/// What this process is allowed, for the last part of the report.
#[derive(Debug, Clone)]
pub struct Host {
    /// The effective capability set.
    pub caps: u64,
    /// The locked-memory limit in bytes; `None` when unlimited.
    pub memlock: Option<u64>,
    /// [`libibverbs_status`].
    pub libibverbs: String,
}

impl Host {
    /// This process.
    pub fn this() -> Host {
        Host {
            caps: crate::sys::effective_caps(),
            memlock: crate::sys::memlock_limit(),
            libibverbs: libibverbs_status(),
        }
    }
}

/// Whether this process may run each engine, and the fix when not. `pinned` is what the rdma engine pins
/// per port on this host's largest MTU.
fn permissions(host: &Host, pinned: u64) -> Vec<String> {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "roce-tracer".into());
    let mut out = Vec::new();
    for (engine, caps) in [
        ("pcap", &[Cap::NetRaw][..]),
        ("ebpf", &[Cap::Bpf, Cap::NetAdmin, Cap::Perfmon][..]),
        ("rdma", &[Cap::NetRaw][..]),
    ] {
        let missing = missing_caps(host.caps, caps);
        let mut line = if missing.is_empty() {
            format!("{engine}: may capture")
        } else {
            let names: Vec<&str> = missing.iter().map(|c| c.name()).collect();
            let all: Vec<&str> = caps.iter().map(|c| c.name()).collect();
            format!(
                "{engine}: may not (missing {}); run as root or: sudo setcap {}+ep {exe}",
                names.join(", "),
                all.join(",")
            )
        };
        if engine == "rdma" {
            let lifted = missing_caps(host.caps, &[Cap::IpcLock]).is_empty();
            if let Some(limit) = host.memlock.filter(|&l| !lifted && l < pinned) {
                let _ = write!(
                    line,
                    "; the locked-memory limit ({} KiB) is below the {} MiB a port's receive buffers pin: \
                     ulimit -l unlimited (LimitMEMLOCK=infinity for a service) or run as root",
                    limit >> 10,
                    pinned >> 20
                );
            }
            let _ = write!(line, "; libibverbs: {}", host.libibverbs);
        }
        out.push(line);
    }
    out
}

/// Lays the lists out as columns.
fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let last = cells.len().saturating_sub(1);
        let mut s = String::from(" ");
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            s.push(' ');
            if i == last {
                s.push_str(c);
            } else {
                let _ = write!(s, "{c:<w$}");
            }
        }
        s.trim_end().to_owned()
    };
    out.push_str(&line(header.to_vec()));
    out.push('\n');
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
        out.push('\n');
    }
}

/// The whole report: netdevs, RDMA ports (with what their counters mean), permissions. `counters` reads the
/// ports' netdevs' ethtool statistic names (by ioctl, or from a fixture tree's files).
pub fn render(root: &Path, host: &Host, counters: &mut Sampler) -> String {
    let nets = netdevs(root);
    let ports = rdma_ports(root);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Network interfaces ({}):",
        root.join("class/net").display()
    );
    if nets.is_empty() {
        out.push_str("  none\n");
    } else {
        let rows: Vec<Vec<String>> = nets
            .iter()
            .map(|n| {
                let rdma = ports
                    .iter()
                    .find(|p| p.netdev.as_deref() == Some(n.name.as_str()))
                    .map_or("-".into(), |p| format!("{}:{}", p.device, p.port));
                vec![
                    n.name.clone(),
                    n.state.clone().unwrap_or_else(|| "?".into()),
                    n.mtu.map_or("?".into(), |m| m.to_string()),
                    rdma,
                    netdev_view(n, &ports),
                ]
            })
            .collect();
        table(
            &mut out,
            &["NAME", "STATE", "MTU", "RDMA", "CAPTURE"],
            &rows,
        );
    }
    let _ = writeln!(
        out,
        "\nRDMA devices ({}):",
        root.join("class/infiniband").display()
    );
    if ports.is_empty() {
        out.push_str(
            "  none: no RDMA driver has registered a device here (on a ConnectX host: modprobe mlx5_ib; \
             `rdma link` lists them)\n",
        );
    } else {
        let rows: Vec<Vec<String>> = ports
            .iter()
            .map(|p| {
                let hw = hw_counter_names(root, p);
                vec![
                    format!("{}:{}", p.device, p.port),
                    vendor_of(p, &hw).0.map_or("?", Vendor::name).to_string(),
                    p.link_layer.clone().unwrap_or_else(|| "?".into()),
                    p.state.clone().unwrap_or_else(|| "?".into()),
                    p.netdev.clone().unwrap_or_else(|| "-".into()),
                    gid_summary(&p.gids),
                ]
            })
            .collect();
        table(
            &mut out,
            &[
                "DEVICE:PORT",
                "VENDOR",
                "LINK",
                "STATE",
                "NETDEV",
                "GIDS (index:type:address)",
            ],
            &rows,
        );
        for p in &ports {
            let _ = writeln!(out, "  {}:{}  {}", p.device, p.port, port_view(p));
            let _ = writeln!(
                out,
                "  {}:{}  {}",
                p.device,
                p.port,
                counters_view(root, p, counters)
            );
        }
    }
    out.push_str("\nThis process:\n");
    let pinned = ports
        .iter()
        .filter(|p| !p.software)
        .map(|p| {
            let mtu = p
                .netdev
                .as_ref()
                .and_then(|n| nets.iter().find(|d| &d.name == n))
                .and_then(|d| d.mtu);
            crate::engine::rdma::device::pinned_bytes(mtu.map(|m| m as usize)) as u64
        })
        .max()
        .unwrap_or_else(|| crate::engine::rdma::device::pinned_bytes(None) as u64);
    for l in permissions(host, pinned) {
        let _ = writeln!(out, "  {l}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::tests::{fake_host, put};

    #[test]
    fn a_recorded_host_lists_every_interface_and_what_sees_it() {
        let dir = tempfile::tempdir().unwrap();
        fake_host(dir.path());
        let root_caps = u64::MAX;
        let root_host = Host {
            caps: root_caps,
            memlock: None,
            libibverbs: "libibverbs.so.1 loads and lists no device".into(),
        };
        let text = render(
            dir.path(),
            &root_host,
            &mut Sampler::fixture(dir.path(), &[]),
        );
        println!("{text}");
        let line = |start: &str| -> String {
            text.lines()
                .find(|l| l.trim_start().starts_with(start))
                .unwrap_or_else(|| panic!("no line for {start} in\n{text}"))
                .to_owned()
        };
        assert!(line("eth0").ends_with("pcap, ebpf: all its traffic"));
        let ens = line("ens1f0np0");
        assert!(ens.contains("mlx5_0:1"), "{ens}");
        assert!(
            ens.contains(
                "kernel traffic only, not the NIC's RoCE; for RoCE: --engine rdma -i mlx5_0:1"
            ),
            "{ens}"
        );
        assert!(line("veth1").contains("Soft-RoCE (rxe0) included"));
        let port = text
            .lines()
            .find(|l| l.trim_start().starts_with("mlx5_0:1") && l.contains("Ethernet"))
            .unwrap()
            .to_owned();
        assert!(
            port.contains("ACTIVE") && port.contains("ens1f0np0"),
            "{port}"
        );
        assert!(port.contains("0:v1:fe80::a00:27ff:fe00:1"), "{port}");
        assert!(port.contains("3:v2:10.0.0.1"), "{port}");
        assert!(line("mlx5_0:1  rdma").contains("every frame of the port in both directions"));
        assert!(line("ibp0:1  rdma").contains("InfiniBand link layer; use ibdump"));
        assert!(line("rxe0:1  rdma").contains("software RDMA has no sniffer; capture veth1"));
        assert_eq!(line("pcap:"), "  pcap: may capture");
        assert!(line("rdma:").contains("libibverbs: libibverbs.so.1 loads and lists no device"));

        // Without privileges: the missing capabilities and the fix, per engine.
        let user = Host {
            caps: 0,
            memlock: Some(8 << 20),
            libibverbs:
                "cannot load libibverbs.so.1 (sudo apt-get install libibverbs1 ibverbs-providers)"
                    .into(),
        };
        let text = render(dir.path(), &user, &mut Sampler::fixture(dir.path(), &[]));
        // 4096 buffers of 9000 + 64 bytes rounded to 9088 on ens1f0np0's MTU: 35 MiB.
        assert!(
            text.contains("the locked-memory limit (8192 KiB) is below the 35 MiB a port's receive buffers pin"),
            "{text}"
        );
        assert!(text.contains("ebpf: may not (missing cap_bpf, cap_net_admin, cap_perfmon); run as root or: sudo setcap cap_bpf,cap_net_admin,cap_perfmon+ep"), "{text}");
        assert!(
            text.contains("rdma: may not (missing cap_net_raw)"),
            "{text}"
        );
        assert!(
            text.contains("apt-get install libibverbs1 ibverbs-providers"),
            "{text}"
        );
    }

    #[test]
    fn priorities_read_as_runs() {
        assert_eq!(ranges(&[0, 1, 2, 3, 4, 5, 6, 7]), "0-7");
        assert_eq!(ranges(&[3, 4]), "3,4");
        assert_eq!(ranges(&[0, 2, 3, 4, 5, 7]), "0,2-5,7");
    }

    #[test]
    fn no_rdma_device_is_said_plainly() {
        let dir = tempfile::tempdir().unwrap();
        put(dir.path(), "class/net/lo/operstate", "unknown");
        let text = render(
            dir.path(),
            &Host {
                caps: u64::MAX,
                memlock: Some(64 << 10),
                libibverbs: "-".into(),
            },
            &mut Sampler::fixture(dir.path(), &[]),
        );
        assert!(
            !text.contains("locked-memory"),
            "root's CAP_IPC_LOCK lifts the limit: {text}"
        );
        assert!(text.contains("RDMA devices"), "{text}");
        assert!(
            text.contains("  none: no RDMA driver has registered a device here"),
            "{text}"
        );
        assert!(text.contains("lo "), "{text}");
    }
}
