//! `--kernel-events` with QP owners from `rdma res show qp`: a script stands in for `rdma`
//! (`ROCE_TRACER_RDMA`), since this machine has no RDMA device. The capture's `EVNT` blocks must hold each
//! QP once, from the snapshot that first saw it, with its port's addresses from the GID table of the
//! `--sysfs-root` fixture tree, and the analyzer must read them as QP owners; a broken `rdma` must leave a
//! warning and a capture.
//!
//! One test in this file: it sets the environment variable the tracer it starts inherits.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;
use serde_json::Value;

fn events_of(path: &Path) -> Vec<Value> {
    custom_blocks(path)
        .iter()
        .filter_map(|b| raw_record(b))
        .filter(|(k, _)| *k == roce_capture::blocks::EVENTS)
        .flat_map(|(_, v)| v["events"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["tracepoint"] == "rdma_res:qp")
        .collect()
}

const TWO_QPS: &str = r#"[{"ifindex":0,"ifname":"mlx5_0","port":1,"lqpn":1,"type":"GSI","state":"RTS","sq-psn":0,"comm":"ib_core"},{"ifindex":0,"ifname":"mlx5_0","port":1,"lqpn":1722,"rqpn":1723,"type":"RC","state":"RTS","rq-psn":5,"sq-psn":9,"path-mig-state":"MIGRATED","pdn":3,"pid":30488,"comm":"ib_write_bw"}]"#;
const THREE_QPS: &str = r#"[{"ifindex":0,"ifname":"mlx5_0","port":1,"lqpn":1,"type":"GSI","state":"RTS","sq-psn":0,"comm":"ib_core"},{"ifindex":0,"ifname":"mlx5_0","port":1,"lqpn":1722,"rqpn":1723,"type":"RC","state":"RTS","rq-psn":5,"sq-psn":9,"path-mig-state":"MIGRATED","pdn":3,"pid":30488,"comm":"ib_write_bw"},{"ifindex":1,"ifname":"mlx5_1","port":1,"lqpn":300,"type":"UD","state":"RTS","sq-psn":0,"pid":4242,"comm":"python3"}]"#;

#[test]
fn snapshots_of_rdma_res_travel_in_the_capture() {
    if !require_netns("qp_owners_from_rdma_res") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fixture = dir.path().join("qps.json");
    std::fs::write(&fixture, TWO_QPS).unwrap();
    // The stand-in notes each snapshot once it has answered, so the test can wait for snapshots rather
    // than guess how long they take.
    let calls = dir.path().join("calls");
    let answered = || std::fs::read_to_string(&calls).map_or(0, |t| t.lines().count());
    let rdma = dir.path().join("rdma");
    std::fs::write(
        &rdma,
        format!(
            "#!/bin/sh\ncat {}\necho answered >> {}\n",
            fixture.display(),
            calls.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&rdma, std::fs::Permissions::from_mode(0o755)).unwrap();
    // SAFETY: the only test of this binary; nothing else reads the environment concurrently.
    unsafe { std::env::set_var(tracer::qp_owners::RDMA_ENV, &rdma) };

    // mlx5_0 port 1's GID table: a link-local GID and an IPv4 one (v1 and v2 entries each), free entries;
    // mlx5_1 has none, so its QP goes without addresses.
    let sys = dir.path().join("sys");
    let port = sys.join("class/infiniband/mlx5_0/ports/1");
    let gids = [
        ("0", "fe80:0000:0000:0000:0a00:00ff:fe00:0001", "IB/RoCE v1"),
        ("1", "fe80:0000:0000:0000:0a00:00ff:fe00:0001", "RoCE v2"),
        ("2", "0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1"),
        ("3", "0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2"),
        ("4", "0000:0000:0000:0000:0000:0000:0000:0000", ""),
    ];
    for (index, gid, kind) in gids {
        for (sub, text) in [("gids", gid), ("gid_attrs/types", kind)] {
            testkit::put_file(&port, &format!("{sub}/{index}"), &format!("{text}\n"));
        }
    }

    let ns = netns("qo");
    let out = dir.path().join("cap.pcapng");
    let args = [
        "-i",
        "vb",
        "-w",
        out.to_str().unwrap(),
        "--kernel-events",
        "--interval",
        "200ms",
        "--sysfs-root",
        sys.to_str().unwrap(),
    ];
    let child = ns.start_tracer(dir.path(), &args);
    wait_until("the start snapshot", 60, || answered() >= 1);
    // A third QP appears (renamed into place: a snapshot never reads half a file). The snapshot running
    // meanwhile may have read the old file; the one after it reads the new one.
    let next = dir.path().join("qps.json.new");
    std::fs::write(&next, THREE_QPS).unwrap();
    std::fs::rename(&next, &fixture).unwrap();
    let before = answered();
    wait_until("a snapshot after the third QP appeared", 60, || {
        answered() >= before + 2
    });
    signal(&child, "INT");
    let result = wait(child, 15);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "{stderr}");
    assert!(!stderr.contains("QP owners"), "no warning: {stderr}");

    let events = events_of(&out);
    let got: Vec<(u64, u64, String)> = events
        .iter()
        .map(|e| {
            (
                e["fields"]["lqpn"].as_u64().unwrap(),
                e["pid"].as_u64().unwrap(),
                e["comm"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (1, 0, "ib_core".to_string()),
            (1722, 30488, "ib_write_bw".to_string()),
            (300, 4242, "python3".to_string()),
        ],
        "each QP once, in the order seen"
    );
    let addrs: Vec<&Value> = events.iter().map(|e| &e["fields"]["addrs"]).collect();
    let mlx5_0 = serde_json::json!(["fe80::a00:ff:fe00:1", "10.0.0.1"]);
    assert_eq!(
        addrs,
        [&mlx5_0, &mlx5_0, &Value::Null],
        "the ports' addresses"
    );
    let ts: Vec<u64> = events
        .iter()
        .map(|e| e["ts_ns"].as_u64().unwrap())
        .collect();
    assert_eq!(ts[0], ts[1], "one start snapshot");
    assert!(ts[2] > ts[1], "the third QP from a later snapshot");
    // The analyzer takes them as QP owners.
    let blocks: Vec<roce_capture::CustomBlock> = custom_blocks(&out)
        .into_iter()
        .map(|data| roce_capture::CustomBlock {
            pen: roce_capture::blocks::PEN,
            data,
        })
        .collect();
    let recorded = roce_core::recorded::Recorded::read(&blocks);
    let owners = roce_core::recorded::qp_processes(&recorded.kernel_events);
    let owners: Vec<(u32, u32, usize)> = owners
        .iter()
        .map(|q| (q.qp_num, q.pid, q.addrs.len()))
        .collect();
    assert_eq!(owners, [(1, 0, 2), (1722, 30488, 2), (300, 4242, 0)]);

    // An rdma that cannot talk to the kernel: a warning, and the capture goes on without owners.
    std::fs::write(
        &rdma,
        "#!/bin/sh\necho 'Failed to open NETLINK_RDMA socket' >&2\nexit 1\n",
    )
    .unwrap();
    // It is asked once, at the start, before the tracer says it is ready.
    let child = ns.start_tracer(dir.path(), &args);
    signal(&child, "INT");
    let result = wait(child, 15);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("QP owners")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("NETLINK_RDMA"), "{stderr}");
    assert!(events_of(&out).is_empty());
    let evnt = custom_blocks(&out)
        .iter()
        .filter_map(|b| raw_record(b))
        .filter(|(k, _)| *k == roce_capture::blocks::EVENTS)
        .count();
    assert!(evnt >= 1, "EVNT blocks still written");
}
