//! docs/tables.md lists every table file `stats` and `report` write, with its columns in order. A column added,
//! renamed or moved in a row type changes what users' scripts read, so the page must change with it: this
//! writes every table through the binary (on a capture with kernel events, so that the tables only those
//! bring are written too) and holds each CSV header against the page. Likewise every finding code has its line
//! in docs/report.md.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::{analyzer, run, workspace};
use crate::tracer_blocks::traced_incast;

/// Tables written only as Parquet: their columns are read from the Parquet file (`model_events` only with
/// `--model-table`, which this test does not ask for).
const PARQUET_ONLY: [&str; 3] = ["model_events", "model", "cuts"];

#[test]
fn every_table_is_documented_with_its_columns() {
    let page = std::fs::read_to_string(workspace().join("docs/tables.md")).expect("docs/tables.md");
    let documented = documented_tables(&page);
    assert!(
        documented.len() > 10,
        "docs/tables.md lists too few tables: {documented:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (capture, _) = traced_incast(dir.path());
    let stats = dir.path().join("stats");
    let report = dir.path().join("report");
    let ok = |cmd: &mut std::process::Command| {
        let out = run(cmd);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ok(analyzer()
        .arg("stats")
        .arg("--csv")
        .arg(&stats)
        .arg(&capture));
    ok(analyzer()
        .args(["report", "--link-speed", "25G"])
        .arg(&capture)
        .arg("-o")
        .arg(&report));

    let mut seen = Vec::new();
    let mut wrong = Vec::new();
    for dir in [&stats, &report] {
        for (table, header) in csv_headers(dir) {
            match documented.get(&table) {
                None => wrong.push(format!("{table} is written but not in docs/tables.md")),
                Some(columns) if !matches(columns, &header) => wrong.push(format!(
                    "{table}: docs/tables.md says {columns:?}, the file has {header:?}"
                )),
                Some(_) => {}
            }
            seen.push(table);
        }
    }
    for table in documented.keys() {
        if !seen.contains(table) && !PARQUET_ONLY.contains(&table.as_str()) {
            wrong.push(format!(
                "docs/tables.md lists {table}, which neither command wrote"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/tables.md is out of date:\n  {}",
        wrong.join("\n  ")
    );
}

/// Table name → documented columns, from the page's table rows (`| \`name\` ... | \`col\`, \`col\` ... |`).
/// Parenthesised remarks and the prose after a cell's first `: ` are not columns.
fn documented_tables(page: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for line in page.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, name, columns, _] = cells[..] else {
            continue;
        };
        let Some(name) = code_spans(name).into_iter().next() else {
            continue;
        };
        let columns = without_remarks(columns);
        let columns = columns.split(": ").next().unwrap_or_default();
        out.insert(name, code_spans(columns));
    }
    out
}

fn code_spans(s: &str) -> Vec<String> {
    s.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn without_remarks(s: &str) -> String {
    let mut depth = 0u32;
    s.chars()
        .filter(|&c| {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth = depth.saturating_sub(1);
                    return false;
                }
                _ => {}
            }
            depth == 0
        })
        .collect()
}

/// Whether a header is the documented columns in order, where `prefix.*` stands for any number of columns
/// named `prefix.KEY` (a map's keys, which come from the data).
fn matches(documented: &[String], header: &[String]) -> bool {
    let mut h = header.iter().peekable();
    for col in documented {
        if let Some(prefix) = col.strip_suffix('*') {
            while h.next_if(|c| c.starts_with(prefix)).is_some() {}
        } else if h.next() != Some(col) {
            return false;
        }
    }
    h.next().is_none()
}

/// Each table's columns: from its CSV header, or from its Parquet file for a table written only so.
fn csv_headers(dir: &Path) -> Vec<(String, Vec<String>)> {
    use polars::prelude::{ParquetReader, SerReader};

    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.extension().is_some_and(|e| e == "parquet") && PARQUET_ONLY.contains(&stem.as_str())
        {
            let table = ParquetReader::new(std::fs::File::open(&path).unwrap())
                .finish()
                .unwrap();
            let columns = table
                .get_column_names()
                .into_iter()
                .map(|c| c.to_string())
                .collect();
            out.push((stem, columns));
        } else if path.extension().is_some_and(|e| e == "csv") {
            let text = std::fs::read_to_string(&path).unwrap();
            let header = text.lines().next().unwrap_or_default();
            let columns = header.split(',').map(str::to_string).collect();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            out.push((name, columns));
        }
    }
    out.sort();
    out
}

#[test]
fn map_columns_match_any_keys() {
    let doc: Vec<String> = ["a", "m.*", "b"].map(String::from).to_vec();
    let h = |cols: &[&str]| cols.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    assert!(matches(&doc, &h(&["a", "b"])));
    assert!(matches(&doc, &h(&["a", "m.x", "m.y", "b"])));
    assert!(!matches(&doc, &h(&["a", "b", "c"])));
    assert!(!matches(&doc, &h(&["b", "a"])));
}

/// Every finding the analysis can raise has its line in docs/report.md: a user who meets `code` in
/// findings.csv must be able to look it up. The codes are read from the analyses' source, where each is
/// a literal.
#[test]
fn every_finding_code_is_documented() {
    let page = std::fs::read_to_string(workspace().join("docs/report.md")).unwrap();
    let mut source = String::new();
    let mut dirs = vec![workspace().join("analyzer/src/analysis")];
    while let Some(dir) = dirs.pop() {
        for path in std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()) {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                source += &std::fs::read_to_string(path).unwrap();
            }
        }
    }
    let codes: Vec<&str> = source
        .lines()
        .filter(|l| l.trim_start().starts_with("code:"))
        .flat_map(|l| l.split('"').skip(1).step_by(2))
        .filter(|c| !c.is_empty())
        .collect();
    assert!(codes.len() >= 10, "found too few finding codes: {codes:?}");
    let missing: Vec<&&str> = codes
        .iter()
        .filter(|c| !page.contains(&format!("`{c}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "finding codes not in docs/report.md: {missing:?}"
    );
}
