//! The benchmark floor: read every record of a capture and touch its bytes, nothing else.
//! `cargo run --release -p analyzer --example bare_pass -- FILE` prints records and captured bytes.

use std::path::PathBuf;
use std::process::ExitCode;

use roce_capture::CaptureReader;

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: bare_pass FILE");
        return ExitCode::from(2);
    };
    let mut reader = match CaptureReader::open(&path) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bare_pass: {e}");
            return ExitCode::from(2);
        }
    };
    let (mut records, mut bytes, mut check) = (0u64, 0u64, 0u64);
    loop {
        match reader.next_record() {
            Ok(Some(rec)) => {
                records += 1;
                bytes += rec.data.len() as u64;
                // Touch the first byte so the loop cannot be reduced to pointer arithmetic.
                check = check.wrapping_add(u64::from(rec.data.first().copied().unwrap_or(0)));
            }
            Ok(None) => break,
            Err(e) => {
                eprintln!("bare_pass: {e}");
                return ExitCode::from(2);
            }
        }
    }
    println!("records {records} bytes {bytes} check {check}");
    ExitCode::SUCCESS
}
