//! Issue 30's accounts on a loopback device, with each engine: a loopback device receives every frame it
//! sends, and both engines used to see each frame twice (libpcap's kernel socket counted 130 frames for 65
//! written; the eBPF probe, on egress and ingress of the one device, wrote each twice). In a fresh network
//! namespace, RoCEv2 frames sent to a UDP socket's port 4791 on `lo` must be written once each, and the
//! statistics must say received = written + dropped.

mod common;

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

use common::*;
use roce_core::decode::Decoder;
use roce_wire::{BthRepr, ExtHeaders, Opcode};

/// Frames sent.
const FRAMES: u32 = 65;

/// Runs `f` on a thread inside the namespace `ns` (setns(2) moves only the calling thread).
fn in_netns<T: Send + 'static>(ns: &Netns, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{}", ns.name);
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("the namespace's file");
        // SAFETY: setns with a namespace descriptor that stays open for the call; it changes this thread's
        // network namespace only, and the thread ends with `f`.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("the thread in the namespace")
}

/// The UDP payload of a RoCEv2 SEND ONLY to QP 0x42 with PSN `psn`: the BTH and what follows it, as a
/// RoCE NIC would put it after the UDP header.
fn roce_payload(psn: u32) -> Vec<u8> {
    let frame = testkit::frames::v4_frame(
        1,
        2,
        2,
        BthRepr::new(Opcode::RC_SEND_ONLY, 0x42, psn),
        ExtHeaders::default(),
        &[0xa5; 32],
    );
    // Ethernet 14, IPv4 20, UDP 8.
    frame[42..].to_vec()
}

fn loopback_capture(engine: &str) {
    let what = format!("a_loopback_frame_is_written_and_counted_once_{engine}");
    if !require_netns(&what) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ns = netns(&format!("l{}", &engine[..1]));
    let out = dir.path().join("lo.pcapng");
    let child = ns.start_tracer(
        dir.path(),
        &["-i", "lo", "-w", out.to_str().unwrap(), "--engine", engine],
    );
    in_netns(&ns, || {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        for psn in 0..FRAMES {
            socket
                .send_to(&roce_payload(psn), "127.0.0.1:4791")
                .unwrap();
        }
    });
    let result = stop(child, 30);
    let decoder = Decoder::default();
    let mut psns: BTreeMap<u32, u32> = BTreeMap::new();
    let mut n = 0;
    let reader = testkit::frames::for_each_frame(&out, |rec| {
        n += 1;
        let f = decoder.decode(n, rec);
        let bth = f
            .bth()
            .unwrap_or_else(|| panic!("{engine}: frame {n} is not RoCE"));
        assert_eq!(bth.dest_qp, 0x42, "{engine}: frame {n}");
        *psns.entry(bth.psn).or_insert(0) += 1;
    });
    let want: BTreeMap<u32, u32> = (0..FRAMES).map(|p| (p, 1)).collect();
    assert_eq!(psns, want, "{engine}: each frame once");
    let st = reader.if_stats().first().copied().unwrap_or_default();
    let dropped = st.dropped_iface.unwrap_or(0) + st.dropped_os.unwrap_or(0);
    assert_eq!(
        (st.received, dropped),
        (Some(u64::from(FRAMES)), 0),
        "{engine}: received and dropped"
    );
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        stderr.contains(&format!("{FRAMES} frames written")) && stderr.contains(", 0 dropped"),
        "{engine}: {stderr}"
    );
}

#[test]
fn a_loopback_frame_is_written_and_counted_once_pcap() {
    loopback_capture("pcap");
}

#[test]
fn a_loopback_frame_is_written_and_counted_once_ebpf() {
    loopback_capture("ebpf");
}
