use std::collections::BTreeMap;

use serde_json::json;

use super::records::*;
use super::*;

/// Writes `record`, pads it as pcapng does, reads it back through a capture's block list.
fn round_trip<R: Record + PartialEq + std::fmt::Debug>(record: R) {
    let mut data = encode_record(&record).unwrap();
    data.extend_from_slice(&[0, 0, 0]);
    let blocks = [
        CustomBlock {
            pen: 1,
            data: data.clone(),
        },
        CustomBlock { pen: PEN, data },
    ];
    let back: Vec<R> = read(&blocks).collect();
    assert_eq!(back, [record]);
}

fn map<V: Clone>(pairs: &[(&str, V)]) -> BTreeMap<String, V> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

#[test]
fn knobs_round_trip() {
    round_trip(Knobs {
        version: VERSION,
        ts_ns: 5,
        knobs: map(&[("eth0/roce_rp/rpg_gd", "11".to_string())]),
        captured: vec!["eth0".into()],
        addrs: [("eth0".to_string(), vec!["10.0.0.1".to_string()])].into(),
        host: "node7".into(),
        ports: vec![RdmaPortRecord {
            device: "bnxt_re0".into(),
            port: 1,
            driver: Some("bnxt_en".into()),
            netdev: Some("eth0".into()),
            mac: Some("02:00:00:00:00:01".into()),
            addrs: vec!["10.0.0.1".into()],
        }],
    });
}

#[test]
fn counters_round_trip() {
    round_trip(Counters {
        version: VERSION,
        ts_ns: 7,
        counters: map(&[("ethtool/eth0/rx_prio3_pause", u64::MAX), ("a/b", 0)]),
        host: "node7".into(),
    });
}

#[test]
fn probe_round_trip() {
    round_trip(Probe {
        version: VERSION,
        ts_ns: 9,
        seen: 10,
        matched: 8,
        emitted: 7,
        ring_full: 1,
        qps: vec![ProbeQp {
            dest_qp: 0x12,
            packets: 3,
            bytes: 300,
            ce: 1,
            cnps: 2,
        }],
        prios: vec![
            ProbePrio {
                priority: Some(3),
                roce_packets: 3,
                ..ProbePrio::default()
            },
            ProbePrio {
                priority: None,
                pause_frames: 4,
                ..ProbePrio::default()
            },
        ],
        rings: vec![ProbeRing {
            ring: 1,
            cpus: vec![1, 3],
            bytes: 1 << 20,
            emitted: 5,
            lost: 2,
            read: 5,
            late: 1,
        }],
    });
}

#[test]
fn drops_round_trip() {
    for ip in [Some(IpDrops::Rocev2), Some(IpDrops::Any), None] {
        round_trip(Drops {
            version: VERSION,
            ts_ns: 11,
            ip,
            drops: vec![DropRow {
                protocol: "ipv4".into(),
                reason: "NO_SOCKET".into(),
                count: 3,
            }],
        });
    }
}

#[test]
fn events_round_trip() {
    let event = Event {
        ts_ns: 20,
        tracepoint: "rdma_cma:cm_qp_create".into(),
        pid: 4242,
        tid: 4243,
        comm: "ib_write_bw".into(),
        fields: json!({"qp_num": 7, "qp_type_name": "RC", "rc": -12, "srcaddr": "10.0.0.1:4791"})
            .as_object()
            .cloned()
            .unwrap(),
    };
    let mut tracepoints = Tracepoints {
        attached: vec!["skb:kfree_skb".into()],
        unavailable: vec!["ib_mad:ib_mad_error_handler".into()],
        incomplete: BTreeMap::new(),
    };
    tracepoints.incomplete.insert(
        "ib_mad:ib_mad_ib_send_mad".into(),
        vec!["rqpn (not in this kernel's record)".into()],
    );
    round_trip(Events {
        version: VERSION,
        ts_ns: 30,
        from_ns: 10,
        to_ns: 30,
        tracepoints: Some(tracepoints),
        events: vec![event],
        drops: vec![DropRow {
            protocol: "mac_control".into(),
            reason: "NOT_SPECIFIED".into(),
            count: 1,
        }],
        ip: Some(IpDrops::Rocev2),
        counts: vec![CountRow {
            tracepoint: "rdma_core:cq_poll".into(),
            key: map(&[("cq_id", 3)]),
            events: 100,
            sum: map(&[("rc", 80)]),
        }],
        lost: 2,
    });
    // A continuation record: no tracepoint list, which is not written at all.
    let more = Events {
        version: VERSION,
        ..Events::default()
    };
    let data = encode_record(&more).unwrap();
    assert!(!String::from_utf8_lossy(&data).contains("tracepoints"));
    round_trip(more);
}

/// Blocks as tracers wrote them before records had a version: they read as version 0, with what they have.
#[test]
fn records_of_an_older_writer_still_read() {
    let old = |kind, v: serde_json::Value| CustomBlock {
        pen: PEN,
        data: encode(kind, &v).unwrap(),
    };
    let blocks = [
        old(
            KNOBS,
            json!({"ts_ns": 1, "knobs": {"eth0/roce_rp/rpg_gd": "9"}}),
        ),
        old(COUNTERS, json!({"ts_ns": 2, "counters": {"a": 1}})),
        old(
            DROPS,
            json!({"ts_ns": 3, "drops": [{"protocol": "ipv4", "reason": "NO_SOCKET", "count": 4}]}),
        ),
        old(
            EVENTS,
            json!({"ts_ns": 4, "from_ns": 0, "to_ns": 4, "events": [
                {"ts_ns": 3, "tracepoint": "rdma_cma:cm_send_req", "pid": 1, "tid": 1, "comm": "x",
                 "fields": {"qp_num": 5}}],
                "drops": [], "counts": [], "lost": 0}),
        ),
    ];
    let knobs: Vec<Knobs> = read(&blocks).collect();
    assert_eq!(knobs.len(), 1);
    assert_eq!((knobs[0].version, knobs[0].captured.len()), (0, 0));
    assert_eq!(knobs[0].knobs["eth0/roce_rp/rpg_gd"], "9");
    let counters: Vec<Counters> = read(&blocks).collect();
    assert_eq!((counters[0].version, counters[0].counters["a"]), (0, 1));
    let drops: Vec<Drops> = read(&blocks).collect();
    assert_eq!((drops[0].version, drops[0].ip), (0, None));
    assert_eq!(drops[0].drops[0].count, 4);
    let events: Vec<Events> = read(&blocks).collect();
    assert_eq!(events[0].version, 0);
    assert_eq!(events[0].events[0].fields["qp_num"], 5);
    assert!(events[0].tracepoints.is_none());
}

/// A newer writer's additions are ignored, a malformed row costs only itself, nulls read as empty.
#[test]
fn reading_is_forgiving() {
    let data = encode(
        EVENTS,
        &json!({"version": 99, "future": {"x": 1}, "from_ns": 1, "to_ns": 2,
            "events": [{"ts_ns": 1, "tracepoint": "a:b"}, {"tracepoint": "no time"}, 7,
                       {"ts_ns": 2, "tracepoint": "c:d", "fields": [1, 2]}],
            "drops": null, "counts": [{"tracepoint": "t", "key": {"cq_id": "x", "other": 2}}]}),
    )
    .unwrap();
    let e: Events = decode(&data).unwrap();
    assert_eq!(e.version, 99);
    assert_eq!(e.events.len(), 2);
    assert_eq!((e.events[0].pid, e.events[0].comm.as_str()), (0, ""));
    assert!(e.events[1].fields.is_empty());
    assert!(e.drops.is_empty());
    assert_eq!(e.counts[0].key, map(&[("other", 2)]));
    let d: Drops = decode(&encode(DROPS, &json!({"ip": "somewhere"})).unwrap()).unwrap();
    assert_eq!(d.ip, Some(IpDrops::Unknown));
    // Not ours, or not JSON: nothing, never a panic.
    assert!(decode::<Knobs>(b"KNO").is_none());
    assert!(decode::<Knobs>(b"KNOBnot json").is_none());
    assert!(decode::<Knobs>(&data).is_none());
    assert!(decode::<Counters>(b"CTRS\"text\"").is_none());
}
