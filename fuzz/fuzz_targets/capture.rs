//! The capture reader and the decoder on arbitrary files: no panic, no unbounded allocation, every record
//! handed out is within the bytes that were read, and a stream that arrives in small pieces (a pipe) reads
//! exactly like the whole file: the same records at the same offsets, and the same error at the same place.
#![no_main]

use std::io::{self, Read};

use libfuzzer_sys::fuzz_target;
use roce_capture::CaptureReader;
use roce_core::decode::Decoder;

/// At most this many records per input: the property is about the reader, not about long files.
const MAX_RECORDS: usize = 10_000;

/// Hands out at most `chunk` bytes per read.
struct Dribble {
    inner: io::Cursor<Vec<u8>>,
    chunk: usize,
}

impl Read for Dribble {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.chunk);
        self.inner.read(&mut buf[..n])
    }
}

/// Every record as (offset, timestamp, wire length, bytes), and the error that ended the file, if any.
type Outcome = (Vec<(u64, u64, u32, Vec<u8>)>, Option<String>);

fn read_all(
    reader: Result<CaptureReader, roce_capture::SourceError>,
    limit: usize,
    decode: bool,
) -> Outcome {
    let mut reader = match reader {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Some(e.to_string())),
    };
    let dec = Decoder::default();
    let mut records = Vec::new();
    loop {
        match reader.next_record() {
            Ok(Some(rec)) => {
                assert!(rec.data.len() <= limit);
                assert_eq!(rec.data.len(), rec.caplen as usize);
                if decode {
                    let f = dec.decode(records.len() as u64 + 1, &rec);
                    let mut sink = Vec::new();
                    analyzer::output::frames::json_line(&mut sink, &f)
                        .expect("writing to a Vec cannot fail");
                }
                records.push((rec.offset, rec.ts_ns, rec.len, rec.data.to_vec()));
                if records.len() >= MAX_RECORDS {
                    return (records, None);
                }
            }
            Ok(None) => return (records, None),
            Err(e) => return (records, Some(e.to_string())),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let whole = read_all(
        CaptureReader::from_reader("fuzz", Box::new(io::Cursor::new(data.to_vec()))),
        data.len(),
        true,
    );
    let chunk = 1 + usize::from(data.last().copied().unwrap_or(0) % 23);
    let dribbled = read_all(
        CaptureReader::from_reader(
            "fuzz",
            Box::new(Dribble {
                inner: io::Cursor::new(data.to_vec()),
                chunk,
            }),
        ),
        data.len(),
        false,
    );
    assert_eq!(whole, dribbled, "read in pieces of {chunk} bytes");
});
