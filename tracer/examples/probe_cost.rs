//! The eBPF probe's own cost per frame, measured by the kernel: `BPF_PROG_TEST_RUN` runs the ingress program
//! over one 1 KiB RoCEv2 RDMA WRITE FIRST frame many times and reports the average. `cargo xtask bench
//! --tracer` runs it (release build, as root) and records the result in BENCHMARKS.md. One line per case on
//! stdout: `key=value` pairs, the case's name last (`case=` to the end of the line).
//!
//! Each case is the best and the median of `BATCHES` kernel averages over `REPEAT` runs, the ring buffer
//! emptied between batches. The probe is configured as the capture configures it (default ring, wakeup
//! threshold), so the numbers include the ring-buffer bookkeeping a capture pays.

use aya::TestRunOptions;
use aya::programs::{SchedClassifier, TestRun as _};
use roce_wire::build::{IpSpec, RoceFrame};
use roce_wire::ext::RethRepr;
use roce_wire::{BthRepr, ExtHeaders, Opcode};
use tracer::engine::ebpf;
use tracer_common::Config;

const REPEAT: u32 = 10_000;
const BATCHES: usize = 20;
/// Offset of `tstamp` in `struct __sk_buff`, and the struct's size.
const SKB_TSTAMP: usize = 152;
const SKB_LEN: usize = 192;

fn frame() -> Vec<u8> {
    let payload = vec![0xa5u8; 1024];
    let f = RoceFrame {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        vlan: None,
        ip: IpSpec::V4 {
            src: [192, 168, 1, 1],
            dst: [192, 168, 1, 2],
            dscp: 26,
            ecn: 2,
            ttl: 64,
            ident: 3,
        },
        sport: 49999,
        bth: BthRepr::new(Opcode::RC_RDMA_WRITE_FIRST, 0x10, 1),
        ext: ExtHeaders {
            reth: Some(RethRepr {
                va: 0x1000,
                rkey: 0x42,
                dma_len: 8192,
            }),
            ..ExtHeaders::default()
        },
        payload: &payload,
    };
    let mut buf = vec![0u8; 2048];
    let n = f.emit(&mut buf).expect("frame fits");
    buf.truncate(n);
    buf
}

fn main() -> anyhow::Result<()> {
    // `--ring-bytes N`: a ring other than the capture's default, to see what the ring's memory costs (a
    // ring that fits in the caches is cheaper to write than a 64 MiB one).
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ring_bytes = match args.as_slice() {
        [] => None,
        [flag, n] if flag == "--ring-bytes" => Some(n.parse::<u32>()?),
        _ => anyhow::bail!("usage: probe_cost [--ring-bytes N]"),
    };
    let frame = frame();
    let mut stamped = [0u8; SKB_LEN];
    stamped[SKB_TSTAMP..SKB_TSTAMP + 8]
        .copy_from_slice(&1_700_000_000_000_000_000u64.to_ne_bytes());
    let cases: [(&str, u32, Option<&[u8]>); 3] = [
        ("classify and count (snap length 0)", 0, None),
        ("+ 256-byte copy, probe reads the clock", 256, None),
        (
            "+ 256-byte copy, stack's receive stamp",
            256,
            Some(&stamped),
        ),
    ];
    for (what, snaplen, ctx) in cases {
        let mut bpf = ebpf::load_probe(
            Config {
                snaplen,
                all_frames: 0,
                wakeup_bytes: ebpf::wakeup_bytes(ring_bytes.unwrap_or(ebpf::DEFAULT_RING_BYTES)),
                _pad: 0,
            },
            ring_bytes,
        )?;
        let mut ring = ebpf::take_ring(&mut bpf)?;
        let prog: &mut SchedClassifier = bpf
            .program_mut(ebpf::INGRESS)
            .ok_or_else(|| anyhow::anyhow!("no ingress program"))?
            .try_into()?;
        let mut runs = Vec::with_capacity(BATCHES);
        for _ in 0..BATCHES {
            let r = prog.test_run(TestRunOptions {
                data_in: Some(&frame),
                ctx_in: ctx,
                repeat: REPEAT,
                ..TestRunOptions::default()
            })?;
            while ring.next().is_some() {}
            runs.push(r.duration.as_nanos() as u64);
        }
        runs.sort_unstable();
        println!(
            "best_ns={} median_ns={} worst_ns={} snaplen={snaplen} ring_bytes={} case={what}",
            runs[0],
            runs[BATCHES / 2],
            runs[BATCHES - 1],
            ring_bytes.unwrap_or(ebpf::DEFAULT_RING_BYTES),
        );
    }
    Ok(())
}
