//! Tables without rows keep their columns: `pfc.csv` of a capture without PFC must still load in pandas or
//! polars with its column names, as must every other table of `report` and `stats --csv/--parquet`.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::Path;

use crate::common::{analyzer, run, workspace};
use polars::prelude::*;

/// Column names of a CSV file and of its Parquet twin, and the CSV's row count, read back with polars; for a
/// table written only as Parquet (a row per model event), the Parquet file's.
fn read_back(dir: &Path, table: &str) -> (Vec<String>, usize) {
    let names = |df: &DataFrame| -> Vec<String> {
        df.get_column_names()
            .iter()
            .map(|n| n.to_string())
            .collect()
    };
    let parquet_path = dir.join(format!("{table}.parquet"));
    let pq = parquet_path.exists().then(|| {
        ParquetReader::new(File::open(&parquet_path).unwrap())
            .finish()
            .unwrap_or_else(|e| panic!("{table}.parquet does not load: {e}"))
    });
    let csv_path = dir.join(format!("{table}.csv"));
    if !csv_path.exists() {
        let pq = pq.unwrap_or_else(|| panic!("{table}: neither CSV nor Parquet"));
        return (names(&pq), pq.height());
    }
    let csv = CsvReadOptions::default()
        .with_has_header(true)
        .try_into_reader_with_file_path(Some(csv_path))
        .unwrap()
        .finish()
        .unwrap_or_else(|e| panic!("{table}.csv does not load: {e}"));
    if let Some(pq) = pq {
        assert_eq!(names(&pq), names(&csv), "{table}: CSV and Parquet columns");
        assert_eq!(pq.height(), csv.height(), "{table}: CSV and Parquet rows");
    }
    (names(&csv), csv.height())
}

fn columns(list: &str) -> Vec<String> {
    list.split(',').map(str::to_string).collect()
}

#[test]
fn report_tables_without_rows_keep_their_columns() {
    let dir = tempfile::tempdir().unwrap();
    let capture = workspace().join("samples/captures/clean_line_rate.pcapng");
    let out = run(analyzer()
        .args(["report", "--link-speed", "100G", "-o"])
        .arg(dir.path())
        .arg(&capture));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tables: BTreeSet<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let table = p.extension()? == "csv" || p.extension()? == "parquet";
            table.then(|| p.file_stem().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    let mut empty = Vec::new();
    for t in &tables {
        let (names, rows) = read_back(dir.path(), t);
        assert!(!names.is_empty(), "{t} has no columns");
        if rows == 0 {
            empty.push(t.as_str());
        }
    }
    // A clean run at line rate: no PFC, no CNPs, no congestion control to model.
    for t in [
        "pfc",
        "cnps",
        "cuts",
        "observed_cuts",
        "model",
        "storms",
        "pause_intervals",
        "unpaired_cnps",
        "dcqcn_flows",
    ] {
        assert!(
            empty.contains(&t),
            "{t} was expected empty here; empty: {empty:?}"
        );
    }
    let expect = |t: &str, list: &str| assert_eq!(read_back(dir.path(), t).0, columns(list), "{t}");
    expect(
        "pfc",
        "iface,tap,src_mac,kind,priority,frames,xoff,xon,pauses,paused_ns",
    );
    expect(
        "cnps",
        "iface,tap,src,dst,dest_qp,count,first_ns,last_ns,pcp,dscp,priority,priority_source",
    );
    expect(
        "cuts",
        "sender,receiver,receiver_qp,t_ns,rc_before_gbps,rc_after_gbps,alpha",
    );
    expect(
        "model",
        "sender,receiver,receiver_qp,t_ns,event,rc_gbps,rt_gbps,alpha",
    );
    expect("storms", "src_mac,priority,start_ns,end_ns");
    expect("pause_intervals", "iface,src_mac,priority,start_ns,end_ns");
    expect(
        "unpaired_cnps",
        "src,dst,dest_qp,iface,tap,cnps,first_ns,last_ns,reason,basis,cnps_needed,candidates",
    );
    let dcqcn_flows = read_back(dir.path(), "dcqcn_flows").0;
    for c in [
        "sender",
        "receiver",
        "receiver_qp",
        "cnps",
        "ce_packets",
        "fit.rpg_gd",
        "cuts",
        "mean_observed_cut_ratio",
    ] {
        assert!(
            dcqcn_flows.iter().any(|n| n == c),
            "dcqcn_flows lacks {c}: {dcqcn_flows:?}"
        );
    }
}

#[test]
fn stats_tables_without_rows_keep_their_columns() {
    let dir = tempfile::tempdir().unwrap();
    let capture = workspace().join("samples/captures/clean_line_rate.pcapng");
    let out = run(analyzer()
        .arg("stats")
        .arg("--csv")
        .arg(dir.path())
        .arg("--parquet")
        .arg(dir.path())
        .arg(&capture));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (t, list) in [
        (
            "pfc",
            "iface,tap,src_mac,kind,priority,frames,xoff,xon,pauses,paused_ns",
        ),
        (
            "cnps",
            "iface,tap,src,dst,dest_qp,count,first_ns,last_ns,pcp,dscp,priority,priority_source",
        ),
        (
            "counters",
            "name,first,last,delta,reset,samples,first_ns,last_ns",
        ),
        ("kernel_drops", "protocol,reason,count,ip"),
        (
            "nic_counters",
            "host,device,port,vendor,netdev,meaning,priority,status,counters,first,last,delta,at_least,\
             wraps,samples,first_ns,last_ns,compared_with,captured,captured_edge,captured_fraction",
        ),
    ] {
        let (names, rows) = read_back(dir.path(), t);
        assert_eq!(rows, 0, "{t}");
        assert_eq!(names, columns(list), "{t}");
    }
    let (flows, rows) = read_back(dir.path(), "flows");
    assert!(rows > 0 && flows.iter().any(|c| c == "ce_packets"));
}
