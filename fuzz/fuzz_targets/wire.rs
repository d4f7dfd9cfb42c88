//! Every roce-wire parser on arbitrary bytes: none may panic, and what strict parsing accepts must
//! re-emit to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_wire::pfc::MacControlRepr;
use roce_wire::{BthRepr, RocePacket};

fuzz_target!(|data: &[u8]| {
    let wire_len = data.first().map_or(0, |&b| usize::from(b) * 8);
    let lax = RocePacket::parse_lax(data, wire_len);
    if let Ok(p) = RocePacket::parse(data) {
        // Strict success implies lax sees the same headers.
        assert_eq!(lax.bth, Some(p.bth));
        let mut buf = [0u8; 12];
        p.bth.emit(&mut buf).expect("BTH fits 12 bytes");
        assert_eq!(BthRepr::parse(&buf), Ok(p.bth));
    }
    if let Ok(ctl) = MacControlRepr::parse(data) {
        let mut buf = [0u8; 64];
        if let Ok(n) = ctl.emit(&mut buf) {
            assert_eq!(MacControlRepr::parse(&buf[..n]), Ok(ctl));
        }
    }
    let _ = roce_wire::grh::GrhRepr::parse(data);
    let _ = roce_wire::mad::parse_cm(data);
    if data.len() > 20 {
        let _ = roce_wire::icrc::icrc(&data[..20], &data[20..]);
    }
});
