//! The eBPF probe's own cost per frame, measured by the kernel: `BPF_PROG_TEST_RUN` runs the ingress program
//! over one 1 KiB RoCEv2 RDMA WRITE FIRST frame many times and reports the average. `cargo xtask bench
//! --tracer` runs it (release build, as root) and records the result in BENCHMARKS.md. One line per case on
//! stdout: `key=value` pairs, the case's name last (`case=` to the end of the line).
//!
//! Each case is the best and the median of `BATCHES` kernel averages over `REPEAT` runs, the ring buffer
//! emptied between batches. The probe is configured as the capture configures it (default ring, wakeup
//! threshold), so the numbers include the ring-buffer bookkeeping a capture pays. The last case is the
//! object's empty program, what a test run costs when the program does nothing.
//!
//! `probe_cost --baseline IFACE` instead attaches that empty program to IFACE's ingress and keeps it there
//! until its standard input closes: the benchmark runs it beside a live capture so that the kernel's
//! run-time count of a program that does nothing can be read next to the probe's.

use aya::TestRunOptions;
use aya::programs::{SchedClassifier, TcAttachType, TestRun as _};
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

/// The probe's object for its empty program: loading it creates every map, so the ring is made small.
fn empty_object() -> anyhow::Result<aya::Ebpf> {
    Ok(aya::EbpfLoader::new()
        .map_max_entries(tracer_common::maps::EVENTS, 4096)
        .load(ebpf::probe_object()?)?)
}

/// Attaches the empty program to `iface`'s ingress until standard input closes.
fn baseline(iface: &str) -> anyhow::Result<()> {
    let mut bpf = empty_object()?;
    let prog: &mut SchedClassifier = bpf
        .program_mut(ebpf::BASELINE)
        .ok_or_else(|| anyhow::anyhow!("no {} program", ebpf::BASELINE))?
        .try_into()?;
    prog.load()?;
    prog.attach(iface, TcAttachType::Ingress)?;
    println!("attached");
    std::io::Write::flush(&mut std::io::stdout())?;
    let mut sink = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink)?;
    Ok(())
}

/// Best, median and worst of `BATCHES` kernel averages of `prog` over `frame`.
fn time_runs(
    prog: &mut SchedClassifier,
    frame: &[u8],
    ctx: Option<&[u8]>,
    mut between: impl FnMut(),
) -> anyhow::Result<(u64, u64, u64)> {
    let mut runs = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let r = prog.test_run(TestRunOptions {
            data_in: Some(frame),
            ctx_in: ctx,
            repeat: REPEAT,
            ..TestRunOptions::default()
        })?;
        between();
        runs.push(r.duration.as_nanos() as u64);
    }
    runs.sort_unstable();
    Ok((runs[0], runs[BATCHES / 2], runs[BATCHES - 1]))
}

fn main() -> anyhow::Result<()> {
    // `--ring-bytes N`: a ring other than the capture's default, to see what the ring's memory costs (a
    // ring that fits in the caches is cheaper to write than a 64 MiB one).
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ring_bytes = match args.as_slice() {
        [] => None,
        [flag, n] if flag == "--ring-bytes" => Some(n.parse::<u32>()?),
        [flag, iface] if flag == "--baseline" => return baseline(iface),
        _ => anyhow::bail!("usage: probe_cost [--ring-bytes N | --baseline IFACE]"),
    };
    let ring = ring_bytes.unwrap_or(ebpf::DEFAULT_RING_BYTES);
    let frame = frame();
    let mut stamped = [0u8; SKB_LEN];
    stamped[SKB_TSTAMP..SKB_TSTAMP + 8]
        .copy_from_slice(&1_700_000_000_000_000_000u64.to_ne_bytes());
    let headers = tracer_common::header_len(&tracer_common::classify(&frame[..], None));
    let copied = tracer_common::copy_len(
        &tracer_common::classify(&frame[..], None),
        frame.len() as u32,
        &Config {
            snaplen: 256,
            headers_only: 1,
            ..Config::default()
        },
    );
    let header_case = format!("+ header copy ({headers} bytes of headers: {copied} copied)");
    let cases: [(String, u32, bool, Option<&[u8]>); 5] = [
        ("classify and count (snap length 0)".into(), 0, false, None),
        (
            "+ 256-byte copy (the former default), probe reads the clock".into(),
            256,
            false,
            None,
        ),
        (
            "+ 256-byte copy (the former default), stack's receive stamp".into(),
            256,
            false,
            Some(&stamped),
        ),
        (
            format!("{header_case}, probe reads the clock"),
            256,
            true,
            None,
        ),
        (
            format!("{header_case}, stack's receive stamp"),
            256,
            true,
            Some(&stamped),
        ),
    ];
    for (what, snaplen, headers_only, ctx) in cases {
        let mut bpf = ebpf::load_probe(
            Config {
                snaplen,
                all_frames: 0,
                wakeup_bytes: ebpf::wakeup_bytes(ring),
                headers_only: u32::from(headers_only),
            },
            ring_bytes,
        )?;
        let mut events = ebpf::take_ring(&mut bpf)?;
        let prog: &mut SchedClassifier = bpf
            .program_mut(ebpf::INGRESS)
            .ok_or_else(|| anyhow::anyhow!("no ingress program"))?
            .try_into()?;
        let (best, median, worst) =
            time_runs(prog, &frame, ctx, || while events.next().is_some() {})?;
        println!(
            "best_ns={best} median_ns={median} worst_ns={worst} snaplen={snaplen} ring_bytes={ring} \
             case={what}"
        );
    }
    let mut bpf = empty_object()?;
    let prog: &mut SchedClassifier = bpf
        .program_mut(ebpf::BASELINE)
        .ok_or_else(|| anyhow::anyhow!("no {} program", ebpf::BASELINE))?
        .try_into()?;
    prog.load()?;
    let (best, median, worst) = time_runs(prog, &frame, None, || {})?;
    println!(
        "best_ns={best} median_ns={median} worst_ns={worst} snaplen=0 ring_bytes={ring} \
         case=empty program (what a test run itself costs)"
    );
    Ok(())
}
