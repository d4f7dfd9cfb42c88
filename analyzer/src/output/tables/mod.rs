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

pub mod examples;

/// A type whose values are the rows of a table. A table with no rows keeps its columns, which serde can only
/// learn from a row: [`TableRow::example`] gives one, never written, only read for its column names and types
/// (see [`examples`]).
pub trait TableRow: Serialize {
    /// A row with every field present, for the columns of an empty table.
    fn example() -> Self;

    /// The columns of `rows` built straight from their fields, for the tables of millions of rows where
    /// going through serde's values shows (the report's model and cuts): the same names, types and nulls
    /// as the serde path would give. `None`, the default, takes the serde path.
    fn columns(rows: &[Self]) -> Option<Vec<(&'static str, Typed)>>
    where
        Self: Sized,
    {
        let _ = rows;
        None
    }
}

/// A column's values as [`TableRow::columns`] gives them: the kinds the serde path makes.
#[derive(Debug)]
pub enum Typed {
    /// Unsigned integers (serde's unsigned numbers).
    U64(Vec<Option<u64>>),
    /// Floats; a NaN or an infinity is null, as serde_json writes it.
    F64(Vec<Option<f64>>),
    /// Text (addresses, enum names).
    Text(Vec<Option<String>>),
}

impl Typed {
    /// Floats as the serde path keeps them: non-finite ones null.
    pub fn floats(values: impl Iterator<Item = f64>) -> Typed {
        Typed::F64(values.map(|v| v.is_finite().then_some(v)).collect())
    }

    fn into_column(self, name: &str) -> Column {
        match self {
            Typed::U64(v) => Column::new(name.into(), v),
            Typed::F64(v) => Column::new(name.into(), v),
            Typed::Text(v) => Column::new(name.into(), v),
        }
    }
}

/// The table of a chunk of rows: from their typed columns when the row type gives them, else through serde.
fn chunk_frame<T: TableRow>(table: &str, rows: &[T]) -> Result<DataFrame, TableError> {
    let Some(columns) = T::columns(rows) else {
        return dataframe(table, rows);
    };
    let columns: Vec<Column> = columns
        .into_iter()
        .map(|(name, cells)| cells.into_column(name))
        .collect();
    DataFrame::new(rows.len(), columns).map_err(|e| TableError::Shape {
        table: table.to_string(),
        source: Box::new(e),
    })
}

/// Why a table could not be written, with the file or table concerned.
#[derive(Debug, Error)]
pub enum TableError {
    /// The file could not be created or written.
    #[error("{path}")]
    Io {
        /// The table's file, so the user knows where to look.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A path where a directory should be, or one above it, is something else (a file).
    #[error("{path} is not a directory")]
    NotADirectory {
        /// The path that is in the way.
        path: PathBuf,
    },
    /// polars could not build or write the table.
    #[error("{path}")]
    Polars {
        /// The table's file.
        path: PathBuf,
        /// What polars said.
        source: PolarsError,
    },
    /// The rows do not make one table (a row that does not serialize, chunks whose columns differ): a bug
    /// in the caller, not in the input.
    #[error("table {table}")]
    Shape {
        /// The table's name.
        table: String,
        /// What did not fit.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// File formats a table can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFormat {
    /// Plain text that any spreadsheet or script reads.
    Csv,
    /// Typed and compressed, for notebooks and Spark.
    Parquet,
}

impl TableFormat {
    fn extension(self) -> &'static str {
        match self {
            TableFormat::Csv => "csv",
            TableFormat::Parquet => "parquet",
        }
    }

    /// The file a table called `name` is written to in this format.
    pub fn file_name(self, name: &str) -> String {
        format!("{name}.{}", self.extension())
    }
}

/// Adds the cells of one row to `columns`, naming nested fields `outer.inner`: a new name becomes a new
/// column, empty in the rows before.
fn flatten(prefix: &str, v: Value, row: usize, columns: &mut Columns) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let name = if prefix.is_empty() {
                    k
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&name, v, row, columns);
            }
        }
        // Lists (interfaces, eight pause times) have no column shape; keep them as JSON text.
        Value::Array(_) => columns.set(prefix, row, Some(Cell::Text(v.to_string()))),
        // A null still names its column: a field that is null in every row is an empty column, not none.
        Value::Null => columns.set(prefix, row, None),
        Value::Number(n) => columns.set(prefix, row, Some(Cell::Number(n))),
        Value::Bool(b) => columns.set(prefix, row, Some(Cell::Bool(b))),
        Value::String(s) => columns.set(prefix, row, Some(Cell::Text(s))),
    }
}

/// One non-null value of a flattened row.
enum Cell {
    Number(serde_json::Number),
    Bool(bool),
    Text(String),
}

impl Cell {
    /// How the value reads in a text column: JSON's spelling of numbers and booleans.
    fn into_text(self) -> String {
        match self {
            Cell::Number(n) => n.to_string(),
            Cell::Bool(b) => b.to_string(),
            Cell::Text(s) => s,
        }
    }
}

/// A column's cells as they arrive, held as compactly as their kind allows: a model table of millions of
/// rows (every event of thousands of flows) would otherwise hold a JSON value, or a map per row.
enum Cells {
    Numbers(Vec<Option<serde_json::Number>>),
    Bools(Vec<Option<bool>>),
    Texts(Vec<Option<String>>),
}

impl Cells {
    fn len(&self) -> usize {
        match self {
            Cells::Numbers(v) => v.len(),
            Cells::Bools(v) => v.len(),
            Cells::Texts(v) => v.len(),
        }
    }

    fn has_values(&self) -> bool {
        match self {
            Cells::Numbers(v) => v.iter().any(Option::is_some),
            Cells::Bools(v) => v.iter().any(Option::is_some),
            Cells::Texts(v) => v.iter().any(Option::is_some),
        }
    }

    /// Fills the rows up to `row` with nulls and puts `cell` in it. A cell of another kind than the column's
    /// turns the column into text, as a mixed column always was; a column of nulls only takes the cell's kind.
    fn push_at(&mut self, row: usize, cell: Cell) {
        let same = matches!(
            (&*self, &cell),
            (Cells::Numbers(_), Cell::Number(_))
                | (Cells::Bools(_), Cell::Bool(_))
                | (Cells::Texts(_), _)
        );
        if !same {
            let len = self.len();
            *self = if self.has_values() {
                Cells::Texts(self.take_texts())
            } else {
                match cell {
                    Cell::Number(_) => Cells::Numbers(vec![None; len]),
                    Cell::Bool(_) => Cells::Bools(vec![None; len]),
                    Cell::Text(_) => Cells::Texts(vec![None; len]),
                }
            };
        }
        match (self, cell) {
            (Cells::Numbers(v), Cell::Number(n)) => {
                v.resize(row, None);
                v.push(Some(n));
            }
            (Cells::Bools(v), Cell::Bool(b)) => {
                v.resize(row, None);
                v.push(Some(b));
            }
            (Cells::Texts(v), cell) => {
                v.resize(row, None);
                v.push(Some(cell.into_text()));
            }
            // Not reached: the column was given the cell's kind above.
            _ => {}
        }
    }

    fn take_texts(&mut self) -> Vec<Option<String>> {
        match self {
            Cells::Numbers(v) => v.drain(..).map(|c| c.map(|n| n.to_string())).collect(),
            Cells::Bools(v) => v.drain(..).map(|c| c.map(|b| b.to_string())).collect(),
            Cells::Texts(v) => std::mem::take(v),
        }
    }

    /// The polars column: numbers as unsigned, signed or float, whichever holds them all.
    fn into_column(self, name: &str, rows: usize) -> Column {
        match self {
            Cells::Numbers(mut v) => {
                v.resize(rows, None);
                let present = || v.iter().flatten();
                if present().all(serde_json::Number::is_u64) {
                    let v: Vec<Option<u64>> = v.iter().map(|c| c.as_ref()?.as_u64()).collect();
                    Column::new(name.into(), v)
                } else if present().all(|n| n.is_i64() || n.is_u64()) {
                    let v: Vec<Option<i64>> = v.iter().map(|c| c.as_ref()?.as_i64()).collect();
                    Column::new(name.into(), v)
                } else {
                    let v: Vec<Option<f64>> = v.iter().map(|c| c.as_ref()?.as_f64()).collect();
                    Column::new(name.into(), v)
                }
            }
            Cells::Bools(mut v) => {
                v.resize(rows, None);
                Column::new(name.into(), v)
            }
            Cells::Texts(mut v) => {
                v.resize(rows, None);
                Column::new(name.into(), v)
            }
        }
    }
}

/// The columns of a table, filled row by row.
#[derive(Default)]
struct Columns {
    names: Vec<String>,
    cells: Vec<Cells>,
}

impl Columns {
    /// Sets the cell of `row` (the rows come in order) in column `name`, unless this row already set it.
    fn set(&mut self, name: &str, row: usize, cell: Option<Cell>) {
        let at = match self.names.iter().position(|n| n == name) {
            Some(at) => at,
            None => {
                self.names.push(name.to_string());
                // Numbers until a cell says otherwise; a column of nulls only is typed as before, unsigned.
                self.cells.push(Cells::Numbers(Vec::new()));
                self.cells.len() - 1
            }
        };
        if let (Some(col), Some(cell)) = (self.cells.get_mut(at), cell)
            && col.len() <= row
        {
            col.push_at(row, cell);
        }
    }
}

/// Builds a DataFrame from serializable rows. Column order: the fields' order, with the keys of a map field
/// (such as the opcode names under `opcodes`) kept together where that field first appeared, in the order
/// the keys first appear. Without the grouping, a key first seen in a later row went to the end of the table,
/// away from its siblings.
pub fn dataframe<T: Serialize>(table: &str, rows: &[T]) -> Result<DataFrame, TableError> {
    let shape = |e: Box<dyn std::error::Error + Send + Sync>| TableError::Shape {
        table: table.to_string(),
        source: e,
    };
    let mut columns = Columns::default();
    for (i, row) in rows.iter().enumerate() {
        let v = serde_json::to_value(row).map_err(|e| shape(Box::new(e)))?;
        flatten("", v, i, &mut columns);
    }
    let mut named: Vec<(String, Cells)> = columns.names.into_iter().zip(columns.cells).collect();
    let mut groups: Vec<String> = Vec::new();
    let mut group_of = |name: &str| {
        let top = name.split('.').next().unwrap_or(name);
        groups.iter().position(|g| g == top).unwrap_or_else(|| {
            groups.push(top.to_string());
            groups.len() - 1
        })
    };
    let keys: Vec<usize> = named.iter().map(|(n, _)| group_of(n)).collect();
    let mut order: Vec<usize> = (0..named.len()).collect();
    // Stable: within a group, columns keep the order in which they first appeared.
    order.sort_by_key(|&i| keys[i]);
    let mut slots: Vec<Option<(String, Cells)>> = named.drain(..).map(Some).collect();
    let columns: Vec<Column> = order
        .into_iter()
        .filter_map(|i| slots.get_mut(i).and_then(Option::take))
        .map(|(name, cells)| cells.into_column(&name, rows.len()))
        .collect();
    DataFrame::new(rows.len(), columns).map_err(|e| shape(Box::new(e)))
}

/// A JSON row per row of every Parquet file at `path` (a file, or a directory searched below it, the files in
/// path order: a dataset's parts, or a table Spark wrote as a directory), the way a test or a script compares
/// a table with another tool's. Integers, floats, booleans, strings and nulls are the types our tables and
/// Spark's write; another type is a [`TableError::Shape`].
pub fn read_rows(path: &Path) -> Result<Vec<serde_json::Map<String, Value>>, TableError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TableError::Io { path, source }
    };
    let mut files = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p).map_err(io(&p))? {
                stack.push(e.map_err(io(&p))?.path());
            }
        } else if p.extension().is_some_and(|x| x == "parquet") {
            files.push(p);
        }
    }
    files.sort();
    let mut rows = Vec::new();
    for f in files {
        let df = ParquetReader::new(File::open(&f).map_err(io(&f))?)
            .finish()
            .map_err(|source| TableError::Polars {
                path: f.clone(),
                source,
            })?;
        for i in 0..df.height() {
            let mut row = serde_json::Map::new();
            for c in df.columns() {
                let cell = c.get(i).map_err(|source| TableError::Polars {
                    path: f.clone(),
                    source,
                })?;
                let v = match cell {
                    AnyValue::Null => Value::Null,
                    AnyValue::Boolean(b) => Value::from(b),
                    AnyValue::Int32(x) => Value::from(x),
                    AnyValue::Int64(x) => Value::from(x),
                    AnyValue::UInt32(x) => Value::from(x),
                    AnyValue::UInt64(x) => Value::from(x),
                    AnyValue::Float64(x) => Value::from(x),
                    AnyValue::String(s) => Value::from(s),
                    AnyValue::StringOwned(s) => Value::from(s.as_str()),
                    other => {
                        return Err(TableError::Shape {
                            table: f.display().to_string(),
                            source: format!(
                                "column {} has a value of type {}",
                                c.name(),
                                other.dtype()
                            )
                            .into(),
                        });
                    }
                };
                row.insert(c.name().to_string(), v);
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Writes `rows` as `DIR/NAME.csv` or `DIR/NAME.parquet`, creating DIR. Returns the path written.
pub fn write<T: TableRow>(
    dir: &Path,
    name: &str,
    rows: &[T],
    format: TableFormat,
) -> Result<PathBuf, TableError> {
    create_dir(dir)?;
    write_frame(&mut table(name, rows)?, dir, name, format)
}

/// [`write`] for a table of one row (the capture's summary), which never lacks its columns.
pub fn write_row<T: Serialize>(
    dir: &Path,
    name: &str,
    row: &T,
    format: TableFormat,
) -> Result<PathBuf, TableError> {
    create_dir(dir)?;
    write_frame(
        &mut dataframe(name, std::slice::from_ref(row))?,
        dir,
        name,
        format,
    )
}

/// The table of `rows`; without rows, the columns of [`TableRow::example`] and no rows.
fn table<T: TableRow>(name: &str, rows: &[T]) -> Result<DataFrame, TableError> {
    if rows.is_empty() {
        Ok(dataframe(name, &[T::example()])?.clear())
    } else {
        dataframe(name, rows)
    }
}

/// [`write`] in several formats from one table: building it is most of the cost for a large one.
/// Returns the paths written, in the order of `formats`.
pub fn write_formats<T: TableRow>(
    dir: &Path,
    name: &str,
    rows: &[T],
    formats: &[TableFormat],
) -> Result<Vec<PathBuf>, TableError> {
    create_dir(dir)?;
    let mut df = table(name, rows)?;
    formats
        .iter()
        .map(|&format| write_frame(&mut df, dir, name, format))
        .collect()
}

/// [`write_formats`] for a table that comes in chunks of rows, so that it is never held whole: the report's
/// model table has a row per model event of every flow, millions for a large capture. Every chunk must give
/// the same columns with the same types (a chunk that does not is an error, never a mixed file); an empty
/// sequence writes the empty table [`write_formats`] would.
pub fn write_formats_chunked<T: TableRow>(
    dir: &Path,
    name: &str,
    chunks: impl IntoIterator<Item = Vec<T>>,
    formats: &[TableFormat],
) -> Result<Vec<PathBuf>, TableError> {
    create_dir(dir)?;
    let mut writers: Option<(Schema, Vec<Batched>)> = None;
    let paths: Vec<PathBuf> = formats
        .iter()
        .map(|f| dir.join(f.file_name(name)))
        .collect();
    let polars_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TableError::Polars { path, source }
    };
    for chunk in chunks {
        if chunk.is_empty() {
            continue;
        }
        let mut df = chunk_frame(name, &chunk)?;
        df.align_chunks();
        let (schema, batched) = match &mut writers {
            Some(w) => w,
            None => {
                let schema = df.schema().as_ref().clone();
                let mut batched = Vec::new();
                for (format, path) in formats.iter().zip(&paths) {
                    let file = File::create(path).map_err(|source| TableError::Io {
                        path: path.clone(),
                        source,
                    })?;
                    batched.push(match format {
                        // One thread per table, as in `write_frame`.
                        TableFormat::Csv => Batched::Csv(
                            CsvWriter::new(file)
                                .n_threads(1)
                                .batched(&schema)
                                .map_err(polars_err(path))?,
                        ),
                        TableFormat::Parquet => Batched::Parquet(Box::new(
                            ParquetWriter::new(file)
                                .set_parallel(false)
                                .batched(&schema)
                                .map_err(polars_err(path))?,
                        )),
                    });
                }
                writers.insert((schema, batched))
            }
        };
        if df.schema().as_ref() != &*schema {
            return Err(TableError::Shape {
                table: name.to_string(),
                source: format!(
                    "a chunk's columns {:?} differ from the first chunk's {:?}",
                    df.schema(),
                    schema
                )
                .into(),
            });
        }
        for (w, path) in batched.iter_mut().zip(&paths) {
            match w {
                Batched::Csv(w) => w.write_batch(&df),
                Batched::Parquet(w) => w.write_batch(&df),
            }
            .map_err(polars_err(path))?;
        }
    }
    let Some((_, batched)) = writers else {
        return write_formats::<T>(dir, name, &[], formats);
    };
    for (w, path) in batched.into_iter().zip(&paths) {
        match w {
            Batched::Csv(mut w) => w.finish(),
            Batched::Parquet(w) => w.finish().map(|_| ()),
        }
        .map_err(polars_err(path))?;
    }
    Ok(paths)
}

/// A file being written a chunk at a time.
enum Batched {
    Csv(polars::io::csv::write::BatchedWriter<File>),
    Parquet(Box<polars::io::parquet::write::BatchedWriter<File>>),
}

/// Creates `dir` and its parents, for every output that writes into a directory. Where a file stands in
/// the way (the directory itself, or one above it), the error names it: the system's "File exists" or
/// "Not a directory" does not say which path is the file.
pub fn create_dir(dir: &Path) -> Result<(), TableError> {
    std::fs::create_dir_all(dir).map_err(|source| match dir.ancestors().find(|p| p.exists()) {
        Some(p) if !p.is_dir() => TableError::NotADirectory {
            path: p.to_path_buf(),
        },
        _ => TableError::Io {
            path: dir.to_path_buf(),
            source,
        },
    })
}

/// Each table is written by the one thread that makes it: the callers run tables side by side on their own
/// threads. Left to itself, polars encodes a file's columns on its own thread pool, and a thread of the
/// caller's rayon pool that waits for that pool takes other tasks of its own meanwhile, so a table it had
/// begun could finish only after those: the report's tables took 222 to 286 ms on two threads against
/// 214 on one (saturation set), and take 186 ms with one thread per table.
fn write_frame(
    df: &mut DataFrame,
    dir: &Path,
    name: &str,
    format: TableFormat,
) -> Result<PathBuf, TableError> {
    let path = dir.join(format.file_name(name));
    let file = File::create(&path).map_err(|source| TableError::Io {
        path: path.clone(),
        source,
    })?;
    let res = match format {
        TableFormat::Csv => CsvWriter::new(file).n_threads(1).finish(df),
        TableFormat::Parquet => ParquetWriter::new(file)
            .set_parallel(false)
            .finish(df)
            .map(|_| ()),
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

    impl TableRow for Row {
        fn example() -> Self {
            Row {
                name: String::new(),
                n: 0,
                rate: Some(0.0),
                nested: BTreeMap::new(),
            }
        }
    }

    impl TableRow for Value {
        fn example() -> Self {
            serde_json::json!({"t": 0, "v": 0.0})
        }
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

    /// A map's keys stay together where the map first appeared, whichever row brings them.
    #[test]
    fn the_keys_of_a_map_stay_beside_each_other() {
        #[derive(Serialize)]
        struct Mixed {
            first: u64,
            ops: BTreeMap<&'static str, u64>,
            last: u64,
        }
        let rows = [
            Mixed {
                first: 1,
                ops: [("b", 1)].into_iter().collect(),
                last: 2,
            },
            Mixed {
                first: 3,
                ops: [("a", 1), ("c", 2)].into_iter().collect(),
                last: 4,
            },
        ];
        let df = dataframe("t", &rows).unwrap();
        let names: Vec<&str> = df.get_column_names().iter().map(|n| n.as_str()).collect();
        assert_eq!(names, ["first", "ops.b", "ops.a", "ops.c", "last"]);
        assert_eq!(df.column("ops.a").unwrap().null_count(), 1);
    }

    /// Cells are typed as the whole column allows: a number next to a string makes the column text, a
    /// null-only field still makes a column, a field first seen in a later row leaves the earlier ones empty.
    #[test]
    fn columns_are_typed_by_all_their_cells() {
        let rows: Vec<Value> = vec![
            serde_json::json!({"mixed": 1, "signed": 3, "flag": null, "never": null}),
            serde_json::json!({"mixed": "x", "signed": -2, "flag": true, "never": null, "late": 1.5}),
            serde_json::json!({"mixed": 2.5, "signed": 4, "flag": false, "never": null}),
        ];
        let df = dataframe("t", &rows).unwrap();
        let names: Vec<&str> = df.get_column_names().iter().map(|n| n.as_str()).collect();
        assert_eq!(names, ["mixed", "signed", "flag", "never", "late"]);
        let mixed = df.column("mixed").unwrap();
        assert_eq!(mixed.dtype(), &DataType::String);
        let text: Vec<Option<&str>> = mixed.str().unwrap().iter().collect();
        assert_eq!(text, [Some("1"), Some("x"), Some("2.5")]);
        assert_eq!(df.column("signed").unwrap().dtype(), &DataType::Int64);
        assert_eq!(df.column("flag").unwrap().dtype(), &DataType::Boolean);
        assert_eq!(df.column("flag").unwrap().null_count(), 1);
        assert_eq!(df.column("never").unwrap().null_count(), 3);
        let late = df.column("late").unwrap();
        assert_eq!(late.dtype(), &DataType::Float64);
        assert_eq!(late.null_count(), 2);
    }

    #[derive(Serialize, Clone)]
    struct Point {
        host: &'static str,
        t: u64,
        v: f64,
    }

    impl TableRow for Point {
        fn example() -> Self {
            Point {
                host: "",
                t: 0,
                v: 0.0,
            }
        }
    }

    fn points(n: u64) -> Vec<Point> {
        (0..n)
            .map(|t| Point {
                host: if t % 3 == 0 { "a" } else { "b" },
                t,
                v: t as f64 / 7.0,
            })
            .collect()
    }

    /// A table written in chunks reads back as the same table written at once; the CSV is the same bytes.
    #[test]
    fn chunked_tables_match_whole_ones() {
        let rows = points(1000);
        let formats = [TableFormat::Csv, TableFormat::Parquet];
        let whole = tempfile::tempdir().unwrap();
        let parts = tempfile::tempdir().unwrap();
        write_formats(whole.path(), "t", &rows, &formats).unwrap();
        let chunks: Vec<Vec<Point>> = rows.chunks(333).map(<[Point]>::to_vec).collect();
        let written = write_formats_chunked(parts.path(), "t", chunks, &formats).unwrap();
        assert_eq!(written.len(), 2);
        let csv = |d: &tempfile::TempDir| std::fs::read(d.path().join("t.csv")).unwrap();
        assert_eq!(csv(&parts), csv(&whole));
        let parquet = |d: &tempfile::TempDir| {
            let file = File::open(d.path().join("t.parquet")).unwrap();
            ParquetReader::new(file).finish().unwrap()
        };
        let (a, b) = (parquet(&parts), parquet(&whole));
        assert_eq!(a.height(), 1000);
        assert!(a.equals(&b), "{a:?} vs {b:?}");
    }

    #[test]
    fn chunks_of_another_shape_are_refused_and_no_chunks_is_an_empty_table() {
        let dir = tempfile::tempdir().unwrap();
        let chunks = vec![
            vec![serde_json::json!({"t": 1, "v": 1.5})],
            vec![serde_json::json!({"t": 2, "v": "text"})],
        ];
        let err = write_formats_chunked(dir.path(), "t", chunks, &[TableFormat::Csv]).unwrap_err();
        assert!(matches!(err, TableError::Shape { .. }), "{err}");
        let none: Vec<Vec<Point>> = vec![Vec::new()];
        write_formats_chunked(dir.path(), "e", none, &[TableFormat::Csv]).unwrap();
        let empty = std::fs::read_to_string(dir.path().join("e.csv")).unwrap();
        write_formats::<Point>(dir.path(), "w", &[], &[TableFormat::Csv]).unwrap();
        assert_eq!(
            empty,
            std::fs::read_to_string(dir.path().join("w.csv")).unwrap()
        );
    }

    /// A table without rows still names its columns, in both formats.
    #[test]
    fn an_empty_table_keeps_its_columns() {
        let dir = tempfile::tempdir().unwrap();
        let formats = [TableFormat::Csv, TableFormat::Parquet];
        write_formats::<Row>(dir.path(), "e", &[], &formats).unwrap();
        let csv = std::fs::read_to_string(dir.path().join("e.csv")).unwrap();
        assert_eq!(csv.trim_end(), "name,n,rate");
        let file = File::open(dir.path().join("e.parquet")).unwrap();
        let df = ParquetReader::new(file).finish().unwrap();
        assert_eq!(df.height(), 0);
        let names: Vec<&str> = df.get_column_names().iter().map(|n| n.as_str()).collect();
        assert_eq!(names, ["name", "n", "rate"]);
        assert_eq!(df.column("rate").unwrap().dtype(), &DataType::Float64);
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
