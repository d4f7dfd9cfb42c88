//! Shared helpers of the end-to-end tests: where things are, and how to run the binary and tshark.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

use roce_wire::build::Vlan;
use roce_wire::{BthRepr, ExtHeaders, IpSpec, RoceFrame};
use serde_json::Value;

pub use testkit::{shared_capture, workspace};

pub fn analyzer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce-analyzer"))
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("the command starts")
}

/// `decode --json` of a file, one JSON value per frame.
pub fn analyzer_json(file: &Path) -> Vec<Value> {
    let out = run(analyzer().arg("decode").arg("--json").arg(file));
    assert!(
        out.status.success(),
        "roce-analyzer decode {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

fn require_tshark() {
    let ok = Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "tshark is not installed: run the README's test command (`cargo xtask test`), which installs it"
    );
}

/// tshark's fields per frame (first occurrence of each: the outer VLAN tag of a QinQ frame).
pub fn tshark_fields(file: &Path, decode_as: &[&str], fields: &[&str]) -> Vec<Vec<String>> {
    require_tshark();
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(file)
        .args(["-T", "fields", "-E", "occurrence=f", "-E", "separator=/t"]);
    for d in decode_as {
        cmd.args(["-d", d]);
    }
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = run(&mut cmd);
    assert!(
        out.status.success(),
        "tshark failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').map(String::from).collect())
        .collect()
}

/// A RoCEv2 frame over IPv4 from 10.0.0.`src` to 10.0.0.`dst` (MACs ending in the same bytes, DSCP 26), built
/// by roce-wire as a sender puts it on the wire, ICRC included.
pub fn v4_frame(
    src: u8,
    dst: u8,
    ecn: u8,
    bth: BthRepr,
    ext: ExtHeaders,
    payload: &[u8],
) -> Vec<u8> {
    v4_frame_on(src, dst, ecn, None, bth, ext, payload)
}

/// [`v4_frame`] with an 802.1Q tag, when given.
pub fn v4_frame_on(
    src: u8,
    dst: u8,
    ecn: u8,
    vlan: Option<Vlan>,
    bth: BthRepr,
    ext: ExtHeaders,
    payload: &[u8],
) -> Vec<u8> {
    let f = RoceFrame {
        src_mac: [2, 0, 0, 0, 0, src],
        dst_mac: [2, 0, 0, 0, 0, dst],
        vlan,
        ip: IpSpec::V4 {
            src: [10, 0, 0, src],
            dst: [10, 0, 0, dst],
            dscp: 26,
            ecn,
            ttl: 64,
            ident: 0,
        },
        sport: 50000,
        bth,
        ext,
        payload,
    };
    emit(&f)
}

/// [`v4_frame`] over IPv6, from 2001:db8::`src` to 2001:db8::`dst`.
pub fn v6_frame(
    src: u8,
    dst: u8,
    ecn: u8,
    bth: BthRepr,
    ext: ExtHeaders,
    payload: &[u8],
) -> Vec<u8> {
    let addr = |host: u8| {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        a[15] = host;
        a
    };
    let f = RoceFrame {
        src_mac: [2, 0, 0, 0, 6, src],
        dst_mac: [2, 0, 0, 0, 6, dst],
        vlan: None,
        ip: IpSpec::V6 {
            src: addr(src),
            dst: addr(dst),
            dscp: 26,
            ecn,
            flow_label: 0x12345,
            hop_limit: 64,
        },
        sport: 49152,
        bth,
        ext,
        payload,
    };
    emit(&f)
}

fn emit(f: &RoceFrame<'_>) -> Vec<u8> {
    let mut buf = vec![0; f.len()];
    let n = f.emit(&mut buf).expect("a frame of its own length");
    buf.truncate(n);
    buf
}

/// The rows of every `*.parquet` file under `dir` (in path order, so part-00000 first), each row a JSON
/// object of its columns: what the dataset and Spark tests compare with `decode --json` and `stats --json`.
pub fn parquet_rows(dir: &Path) -> Vec<serde_json::Map<String, Value>> {
    use polars::prelude::{AnyValue, ParquetReader, SerReader};

    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut rows = Vec::new();
    for f in files {
        let df = ParquetReader::new(std::fs::File::open(&f).unwrap())
            .finish()
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for i in 0..df.height() {
            let mut row = serde_json::Map::new();
            for c in df.columns() {
                let v = match c.get(i).unwrap() {
                    AnyValue::Null => Value::Null,
                    AnyValue::Boolean(b) => Value::from(b),
                    AnyValue::Int32(x) => Value::from(x),
                    AnyValue::Int64(x) => Value::from(x),
                    AnyValue::UInt32(x) => Value::from(x),
                    AnyValue::UInt64(x) => Value::from(x),
                    AnyValue::Float64(x) => Value::from(x),
                    AnyValue::String(s) => Value::from(s),
                    AnyValue::StringOwned(s) => Value::from(s.as_str()),
                    other => panic!(
                        "{}: column {} has an unexpected value {other:?}",
                        f.display(),
                        c.name()
                    ),
                };
                row.insert(c.name().to_string(), v);
            }
            rows.push(row);
        }
    }
    rows
}

/// A PFC frame from `src_mac` pausing `priority` for `quanta` (0 resumes it).
pub fn pfc_frame(src_mac: [u8; 6], priority: usize, quanta: u16) -> Vec<u8> {
    let mut q = [0u16; 8];
    q[priority] = quanta;
    let mut buf = [0u8; 64];
    let n = roce_wire::build::emit_mac_control(
        src_mac,
        None,
        &roce_wire::pfc::MacControlRepr::Pfc(roce_wire::pfc::PfcRepr {
            enable: 1 << priority,
            quanta: q,
        }),
        &mut buf,
    )
    .expect("a PFC frame fits 64 bytes");
    buf[..n].to_vec()
}
