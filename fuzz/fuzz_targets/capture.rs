//! The capture reader and the decoder on arbitrary files: no panic, no unbounded allocation, and every record
//! handed out is within the bytes that were read.
#![no_main]

use analyzer::decode::Decoder;
use analyzer::source::CaptureReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = CaptureReader::from_reader("fuzz", Box::new(std::io::Cursor::new(data.to_vec())))
    else {
        return;
    };
    let dec = Decoder::default();
    let mut n = 0u64;
    while let Ok(Some(rec)) = reader.next_record() {
        assert!(rec.data.len() <= data.len());
        n += 1;
        let f = dec.decode(n, &rec);
        let mut sink = Vec::new();
        analyzer::print::json_line(&mut sink, &f).expect("writing to a Vec cannot fail");
        if n > 10_000 {
            break;
        }
    }
});
