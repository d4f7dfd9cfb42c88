//! Tables out as CSV and Parquet, through polars. The only module that speaks polars: its API moves between
//! releases, and keeping it here means an upgrade touches one file.
//!
//! Rows arrive as any `Serialize` type; nested objects flatten into dotted column names (`naks.rnr`,
//! `opcodes.RC_SEND_FIRST`), so the CSV and Parquet columns are the JSON field names, one schema to document.

use std::fs::File;
use std::path::{Path, PathBuf};

use polars::prelude::*;
use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TableError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Polars { path: PathBuf, source: PolarsError },
    #[error("table {table}: {source}")]
    Shape {
        table: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// File formats a table can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFormat {
    Csv,
    Parquet,
}

impl TableFormat {
    fn extension(self) -> &'static str {
        match self {
            TableFormat::Csv => "csv",
            TableFormat::Parquet => "parquet",
        }
    }
}

fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&name, v, out);
            }
        }
        // Lists (interfaces, eight pause times) have no column shape; keep them as JSON text.
        Value::Array(_) => {
            out.push((prefix.to_string(), Value::String(v.to_string())));
        }
        _ => {
            out.push((prefix.to_string(), v.clone()));
        }
    }
}

/// Builds a DataFrame from serializable rows. Column order: the fields' order, new keys (such as opcode
/// names) appended as they first appear.
pub fn dataframe<T: Serialize>(table: &str, rows: &[T]) -> Result<DataFrame, TableError> {
    let shape = |e: Box<dyn std::error::Error + Send + Sync>| TableError::Shape {
        table: table.to_string(),
        source: e,
    };
    let mut flat: Vec<Vec<(String, Value)>> = Vec::with_capacity(rows.len());
    let mut order: Vec<String> = Vec::new();
    for row in rows {
        let v = serde_json::to_value(row).map_err(|e| shape(Box::new(e)))?;
        let mut m = Vec::new();
        flatten("", &v, &mut m);
        for (k, _) in &m {
            if !order.contains(k) {
                order.push(k.clone());
            }
        }
        flat.push(m);
    }
    let columns: Vec<Column> = order
        .iter()
        .map(|name| {
            let cells: Vec<Option<&Value>> = flat
                .iter()
                .map(|m| {
                    m.iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v)
                        .filter(|v| !v.is_null())
                })
                .collect();
            column(name, &cells)
        })
        .collect();
    DataFrame::new(rows.len(), columns).map_err(|e| shape(Box::new(e)))
}

/// One column, typed by what its cells hold: unsigned, signed, float, bool, else text.
fn column(name: &str, cells: &[Option<&Value>]) -> Column {
    let present = || cells.iter().flatten();
    if present().all(|v| v.is_u64()) {
        let v: Vec<Option<u64>> = cells.iter().map(|c| c.and_then(Value::as_u64)).collect();
        Column::new(name.into(), v)
    } else if present().all(|v| v.is_i64() || v.is_u64()) {
        let v: Vec<Option<i64>> = cells.iter().map(|c| c.and_then(Value::as_i64)).collect();
        Column::new(name.into(), v)
    } else if present().all(|v| v.is_number()) {
        let v: Vec<Option<f64>> = cells.iter().map(|c| c.and_then(Value::as_f64)).collect();
        Column::new(name.into(), v)
    } else if present().all(|v| v.is_boolean()) {
        let v: Vec<Option<bool>> = cells.iter().map(|c| c.and_then(Value::as_bool)).collect();
        Column::new(name.into(), v)
    } else {
        let v: Vec<Option<String>> = cells
            .iter()
            .map(|c| {
                c.map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
            })
            .collect();
        Column::new(name.into(), v)
    }
}

/// Writes `rows` as `DIR/NAME.csv` or `DIR/NAME.parquet`, creating DIR. Returns the path written.
pub fn write<T: Serialize>(
    dir: &Path,
    name: &str,
    rows: &[T],
    format: TableFormat,
) -> Result<PathBuf, TableError> {
    std::fs::create_dir_all(dir).map_err(|source| TableError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let path = dir.join(format!("{name}.{}", format.extension()));
    let mut df = dataframe(name, rows)?;
    let file = File::create(&path).map_err(|source| TableError::Io {
        path: path.clone(),
        source,
    })?;
    let res = match format {
        TableFormat::Csv => CsvWriter::new(file).finish(&mut df),
        TableFormat::Parquet => ParquetWriter::new(file).finish(&mut df).map(|_| ()),
    };
    res.map_err(|source| TableError::Polars {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[derive(Serialize)]
    struct Row {
        name: String,
        n: u64,
        rate: Option<f64>,
        nested: BTreeMap<&'static str, u64>,
    }

    #[test]
    fn flattens_and_types_columns() {
        let rows = vec![
            Row {
                name: "a".into(),
                n: 1,
                rate: Some(1.5),
                nested: [("x", 3)].into_iter().collect(),
            },
            Row {
                name: "b".into(),
                n: 2,
                rate: None,
                nested: [("y", 4)].into_iter().collect(),
            },
        ];
        let df = dataframe("t", &rows).unwrap();
        assert_eq!(df.height(), 2);
        assert_eq!(df.column("n").unwrap().dtype(), &DataType::UInt64);
        assert_eq!(df.column("rate").unwrap().dtype(), &DataType::Float64);
        assert_eq!(df.column("nested.x").unwrap().null_count(), 1);
        assert_eq!(df.column("name").unwrap().dtype(), &DataType::String);
    }

    #[test]
    fn writes_csv_and_parquet() {
        let dir = tempfile::tempdir().unwrap();
        let rows = vec![Row {
            name: "q".into(),
            n: 7,
            rate: None,
            nested: BTreeMap::new(),
        }];
        let csv = write(dir.path(), "t", &rows, TableFormat::Csv).unwrap();
        let text = std::fs::read_to_string(csv).unwrap();
        assert!(text.starts_with("name,n,rate"), "{text}");
        assert!(text.contains("q,7,"));
        let pq = write(dir.path(), "t", &rows, TableFormat::Parquet).unwrap();
        let bytes = std::fs::read(pq).unwrap();
        assert_eq!(&bytes[..4], b"PAR1");
    }
}
