//! This host's ports as sysfs lists them (`class/net`, `class/infiniband`): its network interfaces and its
//! RDMA ports, with the netdev each port belongs to.
//!
//! Read under a root that the tests point at a recorded tree. Several parts of the tracer need these facts:
//! `roce-tracer list` shows them; the rdma engine finds its port, the port's netdev and that netdev's MTU; the
//! writer loop an interface's speed; the counters the GIDs of a knob's netdev. They live here, below all of
//! them, so that `list` can ask the rdma engine what it needs (libibverbs, the memory it pins) without the
//! engine asking `list` back.

use std::path::Path;

use crate::qp_owners::{Gid, read_gid_table};

/// One port of an RDMA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaPort {
    /// The RDMA device (`mlx5_0`).
    pub device: String,
    /// The port number.
    pub port: u32,
    /// `Ethernet` or `InfiniBand`.
    pub link_layer: Option<String>,
    /// `ACTIVE`, `DOWN`...
    pub state: Option<String>,
    /// The netdev on this port: what `--engine pcap|ebpf` would capture.
    pub netdev: Option<String>,
    /// Soft-RoCE (rxe) and the like: RDMA done by the kernel on top of an ordinary netdev, so the netdev's
    /// capture sees its packets.
    pub software: bool,
    /// Its GIDs: RoCE v1 or v2 and the address each stands for.
    pub gids: Vec<Gid>,
    /// The device's driver (the name of `class/infiniband/DEV/device/driver`'s link: `mlx5_core`, `bnxt_en`,
    /// `ice`, `ionic`): it says whose names the device's counters have.
    pub driver: Option<String>,
}

/// One network interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netdev {
    /// The interface name.
    pub name: String,
    /// Its operational state (`up`, `down`).
    pub state: Option<String>,
    /// Its MTU, which sizes the rdma engine's receive buffers.
    pub mtu: Option<u32>,
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

/// The names in a directory, sorted; none when it cannot be read.
pub(crate) fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Every network interface under `root/class/net`.
pub fn netdevs(root: &Path) -> Vec<Netdev> {
    names_in(&root.join("class/net"))
        .into_iter()
        .filter(|n| n != "bonding_masters")
        .map(|name| {
            let dir = root.join("class/net").join(&name);
            Netdev {
                state: read(&dir.join("operstate")),
                mtu: netdev_mtu(root, &name),
                name,
            }
        })
        .collect()
}

/// An interface's MTU from sysfs (`class/net/NAME/mtu`): it sizes the rdma engine's receive buffers.
pub fn netdev_mtu(root: &Path, name: &str) -> Option<u32> {
    read(&root.join("class/net").join(name).join("mtu")).and_then(|m| m.parse().ok())
}

/// An interface's line rate from sysfs (`class/net/NAME/speed`), bit/s, for its interface block's
/// `if_speed`; `None` when unknown. Never a made-up one: the analyzer would take it as the line.
pub fn netdev_speed_bps(root: &Path, name: &str) -> Option<u64> {
    sysfs_speed_bps(&read(&root.join("class/net").join(name).join("speed"))?)
}

/// The text of a sysfs `speed` file as bit/s. The kernel writes Mb/s; a link that is down, or a virtual
/// interface (veth, bridge, tun) that has no speed, reads `-1` (or `4294967295`, `SPEED_UNKNOWN` printed
/// unsigned by older kernels) or fails to read at all: unknown.
pub fn sysfs_speed_bps(text: &str) -> Option<u64> {
    let mbps: u64 = text.trim().parse().ok()?;
    (mbps > 0 && mbps < u64::from(u32::MAX)).then(|| mbps * 1_000_000)
}

/// A netdev's MAC address from sysfs (`class/net/NAME/address`), which its PFC frames carry.
pub fn netdev_mac(root: &Path, name: &str) -> Option<String> {
    read(&root.join("class/net").join(name).join("address"))
}

/// The driver bound to an RDMA device: its `device/driver` link's last part.
pub fn device_driver(root: &Path, device: &str) -> Option<String> {
    let link = std::fs::read_link(
        root.join("class/infiniband")
            .join(device)
            .join("device/driver"),
    )
    .ok()?;
    link.file_name()?.to_str().map(str::to_owned)
}

/// Which netdev a port belongs to: the one its GIDs name; else Soft-RoCE's `parent`; else the PCI
/// function's netdev whose `dev_port` is this port (0-based), or its only one.
fn netdev_of(root: &Path, device: &str, port: u32, gids: &[Gid]) -> Option<String> {
    if let Some(n) = gids.iter().find_map(|g| g.ndev.clone()) {
        return Some(n);
    }
    let dev_dir = root.join("class/infiniband").join(device);
    if let Some(parent) = read(&dev_dir.join("parent")) {
        return Some(parent);
    }
    let nets = names_in(&dev_dir.join("device/net"));
    let by_port = nets.iter().find(|n| {
        read(&root.join("class/net").join(n).join("dev_port"))
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|p| p + 1 == port)
    });
    by_port
        .cloned()
        .or_else(|| (nets.len() == 1).then(|| nets[0].clone()))
}

/// Every port of every RDMA device under `root/class/infiniband`.
pub fn rdma_ports(root: &Path) -> Vec<RdmaPort> {
    let mut out = Vec::new();
    for device in names_in(&root.join("class/infiniband")) {
        let dev_dir = root.join("class/infiniband").join(&device);
        let software = dev_dir.join("parent").exists()
            || read(&dev_dir.join("node_desc")).is_some_and(|d| d.contains("rxe"))
            || device.starts_with("rxe")
            || device.starts_with("siw");
        let mut ports: Vec<u32> = names_in(&dev_dir.join("ports"))
            .iter()
            .filter_map(|p| p.parse().ok())
            .collect();
        ports.sort_unstable();
        let driver = device_driver(root, &device);
        for port in ports {
            let pdir = dev_dir.join("ports").join(port.to_string());
            let gids = read_gid_table(root, &device, port).unwrap_or_default();
            out.push(RdmaPort {
                link_layer: read(&pdir.join("link_layer")),
                // `4: ACTIVE` in sysfs.
                state: read(&pdir.join("state"))
                    .map(|s| s.split_once(": ").map_or(s.clone(), |(_, t)| t.to_owned())),
                netdev: netdev_of(root, &device, port, &gids),
                software,
                gids,
                device: device.clone(),
                port,
                driver: driver.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) use testkit::put_file as put;

    #[test]
    fn a_speed_comes_from_sysfs_or_not_at_all() {
        assert_eq!(sysfs_speed_bps("25000\n"), Some(25_000_000_000));
        assert_eq!(sysfs_speed_bps("100000"), Some(100_000_000_000));
        for unknown in ["-1", "4294967295", "0", "", "fast"] {
            assert_eq!(sysfs_speed_bps(unknown), None, "{unknown:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        put(dir.path(), "class/net/ens1f0np0/speed", "25000\n");
        put(dir.path(), "class/net/veth0/speed", "-1\n");
        put(dir.path(), "class/net/lo/operstate", "unknown");
        assert_eq!(
            netdev_speed_bps(dir.path(), "ens1f0np0"),
            Some(25_000_000_000)
        );
        assert_eq!(netdev_speed_bps(dir.path(), "veth0"), None);
        // lo has no speed file at all; a name sysfs does not know has nothing.
        assert_eq!(netdev_speed_bps(dir.path(), "lo"), None);
        assert_eq!(netdev_speed_bps(dir.path(), "mlx5_0"), None);
    }

    /// A host with an ordinary NIC, a ConnectX whose port 1 has a RoCE v2 and a v1 GID, an InfiniBand HCA
    /// and Soft-RoCE on a veth.
    pub(crate) fn fake_host(root: &Path) {
        for (n, state, mtu) in [
            ("eth0", "up", "1500"),
            ("ens1f0np0", "up", "9000"),
            ("veth1", "up", "1500"),
        ] {
            put(root, &format!("class/net/{n}/operstate"), state);
            put(root, &format!("class/net/{n}/mtu"), mtu);
        }
        put(root, "class/net/ens1f0np0/dev_port", "0");
        let mlx = "class/infiniband/mlx5_0";
        put(root, &format!("{mlx}/ports/1/link_layer"), "Ethernet\n");
        put(root, &format!("{mlx}/ports/1/state"), "4: ACTIVE\n");
        put(
            root,
            &format!("{mlx}/ports/1/gids/0"),
            "fe80:0000:0000:0000:0a00:27ff:fe00:0001\n",
        );
        put(
            root,
            &format!("{mlx}/ports/1/gid_attrs/types/0"),
            "IB/RoCE v1\n",
        );
        put(
            root,
            &format!("{mlx}/ports/1/gids/3"),
            "0000:0000:0000:0000:0000:ffff:0a00:0001\n",
        );
        put(
            root,
            &format!("{mlx}/ports/1/gid_attrs/types/3"),
            "RoCE v2\n",
        );
        put(
            root,
            &format!("{mlx}/ports/1/gid_attrs/ndevs/3"),
            "ens1f0np0\n",
        );
        put(
            root,
            &format!("{mlx}/ports/1/gids/1"),
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        );
        std::fs::create_dir_all(root.join(format!("{mlx}/device/net/ens1f0np0"))).unwrap();
        put(root, "class/net/ens1f0np0/address", "0c:42:a1:00:00:01\n");
        std::fs::create_dir_all(root.join("bus/pci/drivers/mlx5_core")).unwrap();
        std::os::unix::fs::symlink(
            "../../../../bus/pci/drivers/mlx5_core",
            root.join(format!("{mlx}/device/driver")),
        )
        .unwrap();
        put(
            root,
            "class/infiniband/ibp0/ports/1/link_layer",
            "InfiniBand\n",
        );
        put(root, "class/infiniband/ibp0/ports/1/state", "1: DOWN\n");
        put(root, "class/infiniband/rxe0/parent", "veth1\n");
        put(
            root,
            "class/infiniband/rxe0/ports/1/link_layer",
            "Ethernet\n",
        );
        put(root, "class/infiniband/rxe0/ports/1/state", "4: ACTIVE\n");
    }

    #[test]
    fn a_recorded_host_has_its_ports_and_their_netdevs() {
        let dir = tempfile::tempdir().unwrap();
        fake_host(dir.path());
        let ports = rdma_ports(dir.path());
        assert_eq!(ports.len(), 3);
        let mlx = &ports[1];
        assert_eq!(mlx.device, "mlx5_0");
        assert_eq!(mlx.netdev.as_deref(), Some("ens1f0np0"));
        assert_eq!(mlx.state.as_deref(), Some("ACTIVE"));
        assert!(!mlx.software);
        assert_eq!(mlx.gids.len(), 2, "the all-zero slot is free");
        assert_eq!(mlx.driver.as_deref(), Some("mlx5_core"));
        assert_eq!(ports[0].driver, None);
        assert_eq!(
            netdev_mac(dir.path(), "ens1f0np0").as_deref(),
            Some("0c:42:a1:00:00:01")
        );
        assert!(ports[2].software);
        assert_eq!(ports[2].netdev.as_deref(), Some("veth1"));
        let nets = netdevs(dir.path());
        let ens = nets.iter().find(|n| n.name == "ens1f0np0").unwrap();
        assert_eq!((ens.state.as_deref(), ens.mtu), (Some("up"), Some(9000)));
    }
}
