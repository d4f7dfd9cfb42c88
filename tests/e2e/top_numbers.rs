//! `roce-tracer top` shows, for each bin of capture time, the numbers `roce-analyzer` gives for that window of
//! the file: the view's state machine (no terminal) runs over a teaching sample through the replay reader,
//! and each bin is held against `stats --from +a --to +b` (per-flow packets, bytes and so Gb/s, CE marks,
//! CNPs, paused time) and `dcqcn --to +b` (the pairing, and the model's rate at the window's last frame).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use tracer::top::replay::{self, Clock};
use tracer::top::state::{Bin, Config, PairingNote, State};
use tracer::watch::Watch;

use crate::common::{analyzer, run, workspace};

/// Every bin of `sample` as the view makes them, and the first frame's time.
fn bins_of(sample: &Path, bin_ns: u64) -> (Vec<Bin>, u64) {
    let mut state = State::new(Config {
        bin_ns,
        history: 1 << 20,
        dcqcn: Default::default(),
    });
    let (watch, mut rx) = Watch::channel();
    let (_, reader) = replay::start(&[sample.to_path_buf()], Clock::new(f64::INFINITY), watch)
        .expect("the sample opens");
    while let Some(m) = rx.blocking_recv() {
        tracer::top::apply(&mut state, m);
    }
    reader.join().expect("the reader ends");
    assert!(state.ended.is_some(), "the replay said it ended");
    let first = state.first_ns().expect("frames");
    (state.bins().iter().cloned().collect(), first)
}

fn offset(ns: u64) -> String {
    format!("+{}.{:09}s", ns / 1_000_000_000, ns % 1_000_000_000)
}

fn json(args: &[&str], sample: &Path) -> Value {
    let out = run(analyzer().args(args).arg(sample));
    assert!(
        out.status.success(),
        "roce-analyzer {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn key(v: &Value, a: &str, b: &str, q: &str) -> (String, String, u64) {
    (
        v[a].as_str().unwrap_or_default().to_string(),
        v[b].as_str().unwrap_or_default().to_string(),
        v[q].as_u64().unwrap_or(u64::MAX),
    )
}

/// What was compared, so that the test fails if a sample stops exercising a column.
#[derive(Debug, Default)]
struct Compared {
    flows: usize,
    cnp_counts: usize,
    pauses: usize,
    models: usize,
}

fn compare(sample: &str, bin_ns: u64, at_most: usize) -> Compared {
    let path = workspace().join("samples/captures").join(sample);
    let (bins, first) = bins_of(&path, bin_ns);
    assert!(bins.len() > 1, "{sample}: {} bins", bins.len());
    let mut c = Compared::default();
    for bin in bins.iter().filter(|b| b.interval.frames > 0).take(at_most) {
        let (from, to) = (offset(bin.start_ns - first), offset(bin.end_ns - first));
        let what = format!("{sample} [{from}, {to})");
        let stats = json(&["stats", "--json", "--from", &from, "--to", &to], &path);
        // Per flow, the tap that saw most of it, as the view takes it.
        let mut flows: BTreeMap<(String, String, u64), &Value> = BTreeMap::new();
        for f in stats["flows"].as_array().expect("flows") {
            let k = key(f, "src", "dst", "dest_qp");
            let more = flows
                .get(&k)
                .is_none_or(|g| f["packets"].as_u64() > g["packets"].as_u64());
            if more {
                flows.insert(k, f);
            }
        }
        assert_eq!(flows.len(), bin.flows.len(), "{what}: flows");
        let secs = bin.secs();
        for fb in &bin.flows {
            let k = (
                fb.key.src.to_string(),
                fb.key.dst.to_string(),
                u64::from(fb.key.dest_qp),
            );
            let row = flows
                .get(&k)
                .unwrap_or_else(|| panic!("{what}: {k:?} not in stats"));
            assert_eq!(
                row["packets"].as_u64(),
                Some(fb.packets),
                "{what} {k:?} packets"
            );
            assert_eq!(row["bytes"].as_u64(), Some(fb.bytes), "{what} {k:?} bytes");
            assert_eq!(
                row["ce_packets"].as_u64(),
                Some(fb.ce_packets),
                "{what} {k:?} CE"
            );
            let gbps = row["bytes"].as_f64().unwrap_or_default() * 8.0 / secs / 1e9;
            let shown = fb.bytes as f64 * 8.0 / secs / 1e9;
            assert!(
                (gbps - shown).abs() < 1e-9,
                "{what} {k:?}: {gbps} vs {shown}"
            );
            c.flows += 1;
            if let PairingNote::Paired { stream, .. } = &fb.pairing {
                let count = stats["cnps"]
                    .as_array()
                    .expect("cnps")
                    .iter()
                    .filter(|r| {
                        key(r, "src", "dst", "dest_qp")
                            == (
                                stream.src.to_string(),
                                stream.dst.to_string(),
                                u64::from(stream.dest_qp),
                            )
                    })
                    .filter_map(|r| r["count"].as_u64())
                    .max()
                    .unwrap_or(0);
                assert_eq!(count, fb.cnps, "{what} {k:?}: CNPs");
                c.cnp_counts += usize::from(count > 0);
            }
        }
        let pfc = stats["pfc"].as_array().expect("pfc");
        assert_eq!(pfc.len(), bin.pauses.len(), "{what}: pause rows");
        for p in &bin.pauses {
            let row = pfc
                .iter()
                .find(|r| {
                    r["src_mac"].as_str() == Some(p.src_mac.as_str())
                        && r["priority"].as_u64() == p.priority.map(u64::from)
                        && r["iface"].as_u64() == Some(u64::from(p.iface))
                })
                .unwrap_or_else(|| panic!("{what}: {p:?} not in stats"));
            assert_eq!(
                row["paused_ns"].as_u64(),
                Some(p.paused_ns),
                "{what}: {p:?}"
            );
            c.pauses += usize::from(p.paused_ns > 0);
        }
        // The model and the pairing as they stand at the bin's last frame: the analyzer from the first
        // frame to the bin's end.
        let dcqcn = json(&["dcqcn", "--json", "--no-fit", "--to", &to], &path);
        for f in dcqcn["flows"].as_array().expect("dcqcn flows") {
            let k = key(f, "sender", "receiver", "receiver_qp");
            let Some(fb) = bin.flows.iter().find(|fb| {
                (
                    fb.key.src.to_string(),
                    fb.key.dst.to_string(),
                    u64::from(fb.key.dest_qp),
                ) == k
            }) else {
                continue;
            };
            let last = f["model"].as_array().and_then(|m| m.last());
            match (&fb.pairing, f["pairing"].as_str()) {
                (PairingNote::Paired { stream, method, .. }, Some(m)) => {
                    assert_eq!(method.key(), m, "{what} {k:?}: pairing");
                    assert_eq!(Some(u64::from(stream.dest_qp)), f["sender_qp"].as_u64());
                }
                (note, m) => assert!(
                    !matches!(note, PairingNote::Paired { .. }) && m.is_none(),
                    "{what} {k:?}: the view says {note:?}, the analyzer {m:?}"
                ),
            }
            if let Some(last) = last {
                let rc = last["rc_gbps"].as_f64().expect("rc_gbps") * 1000.0;
                let shown = fb
                    .model_mbps
                    .unwrap_or_else(|| panic!("{what} {k:?}: no model"));
                assert!(
                    (rc - shown).abs() <= 1e-6 * rc.max(1.0),
                    "{what} {k:?}: model {shown} Mb/s, the analyzer {rc} Mb/s"
                );
                c.models += 1;
            }
        }
    }
    c
}

#[test]
fn top_bins_equal_the_analyzer_windows() {
    // 4:1 incast with DCQCN: flows, CE, CNPs, pairing and the model falling and recovering (3 ms).
    let c = compare("incast_dcqcn.pcapng", 250_000, 12);
    assert!(
        c.flows >= 8 && c.cnp_counts >= 4 && c.models >= 8,
        "incast_dcqcn compared too little: {c:?}"
    );
    // A PFC storm: the paused time per priority.
    let c = compare("pfc_storm_hol.pcapng", 250_000, 10);
    assert!(
        c.pauses >= 2 && c.flows >= 2,
        "pfc_storm_hol compared too little: {c:?}"
    );
}
