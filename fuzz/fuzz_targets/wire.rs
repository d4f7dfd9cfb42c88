//! Every roce-wire parser on arbitrary bytes: none may panic, and what strict parsing accepts must
//! re-emit to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_wire::pfc::MacControlRepr;
use roce_wire::{BthRepr, RocePacket};

fuzz_target!(|data: &[u8]| {
    // Any claimed wire length must be survivable (a lying UDP length).
    let claimed = data.first().map_or(0, |&b| usize::from(b) * 8);
    let _ = RocePacket::parse_lax(data, claimed);
    let lax = RocePacket::parse_lax(data, data.len());
    if let Ok(p) = RocePacket::parse(data) {
        // Strict success implies lax, told the true length, sees the same headers.
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
