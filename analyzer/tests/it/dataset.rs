//! `decode --parquet` holds what `decode --json` prints, field by field, frame by frame: the dataset is the same
//! decoder's output in columns, and the Spark job's numbers rest on that.

use std::path::Path;

use serde_json::{Map, Value};

use crate::common::{analyzer, analyzer_json, parquet_rows, run, workspace};

/// JSON fields of `decode --json` and the dataset column holding each (the nested ones by their path).
const COLUMNS: &[(&str, &str)] = &[
    ("frame", "frame"),
    ("ts_ns", "time_ns"),
    ("caplen", "caplen"),
    ("len", "len"),
    ("kind", "kind"),
    ("vlan", "vlan"),
    ("pcp", "pcp"),
    ("inner_vlan", "inner_vlan"),
    ("src", "src"),
    ("dst", "dst"),
    ("dscp", "dscp"),
    ("ecn", "ecn"),
    ("sport", "sport"),
    ("opcode", "opcode"),
    ("dest_qp", "dest_qp"),
    ("psn", "psn"),
    ("ack_req", "ack_req"),
    ("fecn", "fecn"),
    ("becn", "becn"),
    ("se", "se"),
    ("pkey", "pkey"),
    ("pad", "pad"),
    ("payload_len", "payload_len"),
    ("icrc_ok", "icrc_ok"),
    ("reth.va", "reth_va"),
    ("reth.rkey", "reth_rkey"),
    ("reth.len", "reth_len"),
    ("aeth.syndrome", "aeth_syndrome"),
    ("aeth.msn", "aeth_msn"),
    ("deth.src_qp", "deth_src_qp"),
    ("src_mac", "src_mac"),
    ("pfc_enable", "pfc_enable"),
    ("pause_quanta", "pause_quanta"),
];

/// JSON fields the dataset leaves out on purpose: names and kinds derived from a number it holds
/// (opcode_name from opcode, the AETH's kind and NAK code from its syndrome), and headers no analysis reads.
const NOT_COLUMNS: &[&str] = &[
    "opcode_name",
    "aeth.kind",
    "aeth.nak_code",
    "deth.qkey",
    "rdeth.ee_context",
    "xrceth.srq",
    "imm",
    "ieth",
    "atomic.va",
    "atomic.rkey",
    "atomic.swap_add",
    "atomic.compare",
    "atomic_ack",
];

/// Columns that only RoCE frames fill: for them, a field `decode --json` leaves out must be null here.
const ROCE_COLUMNS: &[&str] = &[
    "sport",
    "opcode",
    "dest_qp",
    "psn",
    "payload_len",
    "icrc_ok",
    "reth_va",
    "aeth_syndrome",
    "deth_src_qp",
];

fn flatten(prefix: &str, v: &Value, out: &mut Map<String, Value>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&name, v, out);
            }
        }
        _ => {
            out.insert(prefix.to_string(), v.clone());
        }
    }
}

/// Writes `file` as a dataset with small row groups (so several groups and files are read back) and checks
/// every frame against `decode --json`.
fn dataset_equals_json(file: &Path) {
    let json = analyzer_json(file);
    let dir = tempfile::tempdir().unwrap();
    let out = run(analyzer()
        .args(["decode", "--row-group-rows", "1000", "--parquet"])
        .arg(dir.path())
        .arg(file));
    assert!(
        out.status.success(),
        "decode --parquet {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = parquet_rows(dir.path());
    assert_eq!(rows.len(), json.len(), "{}: frames", file.display());
    let columns: Map<String, Value> = COLUMNS
        .iter()
        .map(|(j, c)| ((*j).to_string(), Value::from(*c)))
        .collect();
    for (j, row) in json.iter().zip(&rows) {
        let mut fields = Map::new();
        flatten("", j, &mut fields);
        let at = format!("{}: frame {}", file.display(), j["frame"]);
        assert_eq!(row["schema_version"], Value::from(1), "{at}");
        for (name, want) in &fields {
            if let Some(q) = name.strip_prefix("pfc_quanta") {
                assert!(q.is_empty(), "{at}: {name}");
                for (prio, want) in want.as_array().unwrap().iter().enumerate() {
                    assert_eq!(
                        &row[&format!("pfc_quanta_{prio}")],
                        want,
                        "{at}: priority {prio}"
                    );
                }
                continue;
            }
            if name == "roce_version" {
                assert_eq!(&row["roce_version"], want, "{at}");
                continue;
            }
            match columns.get(name) {
                Some(c) => assert_eq!(&row[c.as_str().unwrap()], want, "{at}: {name}"),
                None => assert!(
                    NOT_COLUMNS.contains(&name.as_str()),
                    "{at}: decode --json has {name}, which the dataset neither holds nor lists as left out"
                ),
            }
        }
        if matches!(j["kind"].as_str(), Some("roce" | "cnp")) {
            if j.get("roce_version").is_none() && j.get("sport").is_some() {
                assert_eq!(row["roce_version"], Value::from(2), "{at}");
            }
            for c in ROCE_COLUMNS {
                let json_name = COLUMNS
                    .iter()
                    .find(|(_, col)| col == c)
                    .map(|(j, _)| *j)
                    .unwrap_or(c);
                if !fields.contains_key(json_name) {
                    assert_eq!(
                        row[*c],
                        Value::Null,
                        "{at}: {c} without {json_name} in JSON"
                    );
                }
            }
        }
    }
}

#[test]
fn the_dataset_holds_what_decode_json_prints_on_samples() {
    for name in ["pfc_storm_hol", "lossy_gbn", "read_incast"] {
        dataset_equals_json(&workspace().join(format!("samples/captures/{name}.pcapng")));
    }
}

#[test]
fn the_dataset_holds_what_decode_json_prints_on_the_public_captures() {
    let Some(dir) = testkit::shared_captures() else {
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap" || x == "pcapng"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} has no captures", dir.display());
    for f in files {
        dataset_equals_json(&f);
    }
}

/// Each collector gets its own `collector=NAME/` directory, and a directory already holding a dataset is
/// refused rather than added to (which would count its frames twice).
#[test]
fn collectors_sit_side_by_side_and_a_dataset_is_never_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let sample = workspace().join("samples/captures/pfc_only.pcapng");
    for name in ["leaf01", "leaf02"] {
        let out = run(analyzer()
            .args(["decode", "--collector", name, "--parquet"])
            .arg(dir.path())
            .arg(&sample));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            dir.path()
                .join(format!("collector={name}/part-00000.parquet"))
                .is_file()
        );
    }
    let again = run(analyzer()
        .args(["decode", "--collector", "leaf01", "--parquet"])
        .arg(dir.path())
        .arg(&sample));
    assert_eq!(again.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already holds part files"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let bad = run(analyzer()
        .args(["decode", "--collector", "../x", "--parquet"])
        .arg(dir.path())
        .arg(&sample));
    assert!(!bad.status.success());
}
