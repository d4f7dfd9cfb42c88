//! The Spark job (spark/rocetrace_job.py) in Spark's local mode on five captures written as five
//! collectors' datasets, against `roce-analyzer stats --json` and `fabric --json` on the same five files
//! merged: every number of the flows (their PSN analysis too: one capture has losses and retransmissions), CNP
//! and PFC tables, and of the fabric's pairs and hosts, must agree. Two of the captures are the two taps of one
//! switch, so the hops table is checked against the simulator's truth for that hop; one is made here, three
//! hosts' links with pauses a host sent and a switch sent to a host, so that every rule of the fabric's pause
//! placement is on both sides.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::{Map, Value};

use crate::common::{analyzer, parquet_rows, run, workspace};
use testkit::frames::{Net, pfc_frame, write_taps};

/// The variable that makes a missing Java or PySpark a failure (set by `.ci/run`).
const REQUIRE_SPARK: &str = "ROCETRACE_REQUIRE_SPARK";

/// The `spark-submit` of the PySpark that the machine's Python, or the virtual environment `cargo xtask install`
/// makes when that Python lacks it, imports (pip puts it inside the package, whatever is on PATH).
fn spark_submit_of_pyspark() -> Option<PathBuf> {
    let venv = std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".cache/rocetrace/pyspark/bin/python3"));
    let find = "import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), 'bin', 'spark-submit'))";
    [Some(PathBuf::from("python3")), venv]
        .into_iter()
        .flatten()
        .find_map(|python| {
            let out = Command::new(python).args(["-c", find]).output().ok()?;
            let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            (out.status.success() && path.is_file()).then_some(path)
        })
}

/// `spark-submit`, when Java and PySpark are installed; otherwise says so, or fails under
/// ROCETRACE_REQUIRE_SPARK=1.
fn spark_submit() -> Option<PathBuf> {
    let java = Command::new("java")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    let submit = spark_submit_of_pyspark();
    match submit {
        Some(s) if java => Some(s),
        _ => {
            let why = format!(
                "the Spark job's comparison with stats: {} missing; `cargo xtask install` installs Java and \
                 PySpark",
                match (java, submit.is_some()) {
                    (false, false) => "Java and PySpark are",
                    (false, true) => "Java is",
                    _ => "PySpark is",
                }
            );
            if std::env::var(REQUIRE_SPARK).is_ok_and(|v| v == "1") {
                panic!("{why}, and {REQUIRE_SPARK}=1 requires them");
            }
            testkit::not_run_here(&why);
            None
        }
    }
}

fn sample(name: &str) -> PathBuf {
    workspace().join(format!("samples/captures/{name}.pcapng"))
}

/// Rows keyed by the named fields (rendered as text, so a JSON number and a Parquet integer compare alike).
fn keyed(
    rows: Vec<Map<String, Value>>,
    key: &[&str],
    what: &str,
) -> BTreeMap<String, Map<String, Value>> {
    let mut out = BTreeMap::new();
    for r in rows {
        let k = key
            .iter()
            .map(|f| r[*f].to_string())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            out.insert(k.clone(), r).is_none(),
            "{what}: two rows for {k}"
        );
    }
    out
}

/// Every (stats field, job column) pair agrees on every row, and both sides have the same rows.
fn same_table(
    what: &str,
    stats: &[Value],
    job: Vec<Map<String, Value>>,
    key: &[&str],
    fields: &[(&str, &str)],
) {
    let stats: Vec<Map<String, Value>> = stats
        .iter()
        .map(|v| v.as_object().unwrap().clone())
        .collect();
    let stats = keyed(stats, key, what);
    let job = keyed(job, key, what);
    assert_eq!(
        stats.keys().collect::<Vec<_>>(),
        job.keys().collect::<Vec<_>>(),
        "{what}: the rows differ"
    );
    assert!(!stats.is_empty(), "{what}: an empty table proves nothing");
    for (k, s) in &stats {
        let j = &job[k];
        for (sf, jf) in fields {
            let whole = Value::Object(s.clone());
            let want = sf
                .split('.')
                .try_fold(&whole, |v, part| v.get(part))
                .unwrap_or_else(|| panic!("{what}: stats has no {sf}"));
            // The job writes a nested object (the opcode counts) as JSON text.
            let parsed;
            let got = match (want, &j[*jf]) {
                (Value::Object(_), Value::String(text)) => {
                    parsed = serde_json::from_str::<Value>(text)
                        .unwrap_or_else(|e| panic!("{what} {k}: {jf} is not JSON ({e}): {text}"));
                    &parsed
                }
                (_, got) => got,
            };
            match (want.as_f64(), got.as_f64()) {
                (Some(a), Some(b)) if want.is_f64() || got.is_f64() => assert!(
                    (a - b).abs() <= 1e-9 * a.abs().max(1.0),
                    "{what} {k}: {sf} is {a} in stats, {b} from Spark"
                ),
                _ => assert_eq!(want, got, "{what} {k}: {sf} in stats, {jf} from Spark"),
            }
        }
    }
}

#[test]
fn the_spark_job_gives_the_numbers_of_stats_and_fabric_on_five_collectors() {
    let Some(submit) = spark_submit() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let collectors = [
        ("leaf01", sample("marking_curve")),
        ("leaf02", sample("marking_curve.rx")),
        ("spine01", sample("incast_dcqcn")),
        // Losses and go-back-N retransmissions, for the PSN analysis.
        ("spine02", sample("lossy_gbn")),
        ("fabric01", three_hosts_pausing(dir.path())),
    ];
    let dataset = dir.path().join("dataset");
    for (name, file) in &collectors {
        // One collector's dataset in many small row groups and files (dictionaries restarting with each
        // group), as a long capture's would be.
        let groups: &[&str] = if *name == "spine02" {
            &["--row-group-rows", "300"]
        } else {
            &[]
        };
        let out = run(analyzer()
            .args(["decode", "--collector", name])
            .args(groups)
            .arg("--parquet")
            .arg(&dataset)
            .arg(file));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let tables = dir.path().join("tables");
    let job = workspace().join("spark/rocetrace_job.py");
    let out = run(Command::new(&submit)
        .args([
            "--master",
            "local[2]",
            "--driver-memory",
            "512m",
            "--conf",
            "spark.sql.shuffle.partitions=4",
            "--conf",
            "spark.ui.enabled=false",
        ])
        .arg(&job)
        .arg(&dataset)
        .arg(&tables)
        .args(["--link-speed", "25G"]));
    assert!(
        out.status.success(),
        "spark-submit failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<&PathBuf> = collectors.iter().map(|(_, f)| f).collect();
    let stats = merged_json("stats", &files);
    let read = |t: &str| parquet_rows(&tables.join(t));
    let key = ["tap", "src", "dst", "dest_qp"];
    let mut flow_fields = vec![
        ("packets", "packets"),
        ("bytes", "bytes"),
        ("first_ns", "first_ns"),
        ("last_ns", "last_ns"),
        ("mean_gbps", "mean_gbps"),
        ("ect_packets", "ect_packets"),
        ("ce_packets", "ce_packets"),
        ("icrc_failures", "icrc_failures"),
        ("truncated", "truncated"),
        ("pcp", "pcp"),
        ("dscp", "dscp"),
        ("opcodes", "opcodes"),
        ("psn_gaps", "psn_gaps"),
        ("retransmissions", "retransmissions"),
        ("out_of_order", "out_of_order"),
    ];
    let naks: Vec<(String, String)> = stats["flows"][0]["naks"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| (format!("naks.{k}"), format!("naks_{k}")))
        .collect();
    flow_fields.extend(naks.iter().map(|(a, b)| (a.as_str(), b.as_str())));
    same_table(
        "flows",
        stats["flows"].as_array().unwrap(),
        read("flows"),
        &key,
        &flow_fields,
    );
    same_table(
        "cnps",
        stats["cnps"].as_array().unwrap(),
        read("cnps"),
        &key,
        &[
            ("count", "count"),
            ("first_ns", "first_ns"),
            ("last_ns", "last_ns"),
            ("pcp", "pcp"),
            ("dscp", "dscp"),
        ],
    );
    same_table(
        "pfc",
        stats["pfc"].as_array().unwrap(),
        read("pfc"),
        &["tap", "src_mac", "priority"],
        &[
            ("kind", "kind"),
            ("frames", "frames"),
            ("xoff", "xoff"),
            ("xon", "xon"),
            ("pauses", "pauses"),
            ("paused_ns", "paused_ns"),
        ],
    );
    // Each tap is one collector's: the job's collector column says whose.
    for row in read("flows") {
        let tap = row["tap"].as_str().unwrap();
        let (name, file) = collectors
            .iter()
            .find(|(n, _)| row["collector"] == *n)
            .unwrap();
        assert!(
            tap.starts_with(&file.display().to_string()),
            "{name}: {tap}"
        );
    }
    hops_match_the_truth(&read("hops"));

    let fabric = merged_json("fabric", &files);
    // Every column `fabric --json` prints, of every row.
    for (table, key) in [("pairs", &["src", "dst"][..]), ("hosts", &["host"][..])] {
        let rows = fabric[table].as_array().unwrap();
        let columns: Vec<String> = rows[0].as_object().unwrap().keys().cloned().collect();
        let fields: Vec<(&str, &str)> = columns.iter().map(|c| (c.as_str(), c.as_str())).collect();
        same_table(table, rows, read(table), key, &fields);
    }
    // The comparison reaches the pause rules: a pair stopped at its ends, a host that paused, and nulls.
    let pairs = fabric["pairs"].as_array().unwrap();
    assert!(
        pairs.iter().any(|p| p["paused_ns"].as_u64() > Some(0)),
        "{pairs:?}"
    );
    assert!(pairs.iter().any(|p| p["paused_ns"].is_null()), "{pairs:?}");
    let hosts = fabric["hosts"].as_array().unwrap();
    assert!(
        hosts.iter().any(|h| h["pauses_sent"].as_u64() > Some(0)),
        "{hosts:?}"
    );
    assert!(
        hosts.iter().any(|h| h["paused_ns"].as_u64() > Some(0)),
        "{hosts:?}"
    );
}

/// `roce-analyzer COMMAND --json` on `files` merged, at the line rate the job is given.
fn merged_json(command: &str, files: &[&PathBuf]) -> Value {
    let out = run(analyzer()
        .args([command, "--json", "--link-speed", "25G"])
        .args(files));
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Three hosts of their own addresses (10.1.0.1-3) and priority (4: DSCP 34), each host's link a tap: the
/// switch pauses host 1 on its link for 200 µs, and host 3 pauses its switch for 50 µs.
fn three_hosts_pausing(dir: &std::path::Path) -> PathBuf {
    let net = Net {
        prefix: [10, 1, 0],
        dscp: 34,
    };
    let mut frames = net.sends((1, 2), 400, 0, &[0, 1], |i| i % 4 == 0);
    frames.extend(net.sends((1, 3), 400, 100, &[0, 2], |_| false));
    frames.extend(net.sends((2, 3), 300, 200, &[1, 2], |_| false));
    let switch = [2, 0, 1, 0, 1, 1];
    frames.push((0, 100_000, pfc_frame(switch, 4, 65535)));
    frames.push((0, 300_000, pfc_frame(switch, 4, 0)));
    frames.push((2, 500_000, pfc_frame(net.mac(3), 4, 65535)));
    frames.push((2, 550_000, pfc_frame(net.mac(3), 4, 0)));
    let path = dir.join("fabric.pcapng");
    write_taps(&path, &["h1", "h2", "h3"], frames);
    path
}

/// The data of marking_curve crosses the switch from its ingress tap (leaf01) to its egress tap (leaf02):
/// every data packet is matched once, and the delay is the egress file's clock offset plus the transit
/// (first bit in to first bit out, as the truth measures it).
fn hops_match_the_truth(hops: &[Map<String, Value>]) {
    let truth: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace().join("samples/captures/marking_curve.truth.json"))
            .unwrap(),
    )
    .unwrap();
    let hop = &truth["hops"][0];
    let flow = &truth["flows"][0];
    let row = hops
        .iter()
        .find(|r| {
            r["collector_a"] == "leaf01"
                && r["collector_b"] == "leaf02"
                && r["src"] == flow["src_ip"]
                && r["dst"] == flow["dst_ip"]
        })
        .unwrap_or_else(|| panic!("no leaf01 -> leaf02 row for the data: {hops:?}"));
    assert_eq!(row["matched"], hop["packets"], "{row:?}");
    // The truth's offset is the least delay as the two clocks read it, which is the job's minimum.
    assert_eq!(row["delay_min_ns"], hop["clock_offset_ns"], "{row:?}");
    // The egress file's clock runs ahead of the ingress file's by the difference of their offsets.
    let file_offset = |name: &str| {
        truth["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .and_then(|f| f["clock_offset_ns"].as_f64())
            .unwrap()
    };
    let offset = file_offset("marking_curve.rx.pcapng") - file_offset("marking_curve.pcapng");
    let median = row["delay_median_ns"].as_f64().unwrap() - offset;
    let p50 = hop["transit_ns"]["p50"].as_f64().unwrap();
    // The truth's percentile is a nearest rank, the job's median interpolates: a packet's spacing apart at most.
    assert!(
        (median - p50).abs() < 2_000.0,
        "median transit {median} ns, truth {p50} ns"
    );
    let max = row["delay_max_ns"].as_f64().unwrap() - offset;
    assert!(
        (max - hop["transit_ns"]["max"].as_f64().unwrap()).abs() < 1.0,
        "max transit {max}"
    );
    // No packet of the spines' captures (other simulations) is also one of marking_curve's.
    let leaf = |v: &Value| v.as_str().is_some_and(|c| c.starts_with("leaf"));
    assert!(
        hops.iter()
            .all(|r| leaf(&r["collector_a"]) == leaf(&r["collector_b"])),
        "{hops:?}"
    );
}
