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
//! `--reader record|batch` drains the ring from a thread on core 1 while the test runs go on, the way a
//! capture's reader does: `record` with aya's `RingBuf`, which hands each record's space back to the kernel
//! as soon as it is read, `batch` with the tracer's own reader (once per batch, napping between batches).
//! Without it the ring is drained between batches of runs, while nothing runs.
//!
//! `probe_cost --verifier` loads the probe with each configuration the captures and the tests use and
//! prints, per program, how many instructions the verifier processed, how long the load took and the JIT
//! code's size: the configuration is a load-time constant, so each one is verified (and pruned) on its own.
//!
//! `probe_cost --baseline IFACE` instead attaches that empty program to IFACE's ingress and keeps it there
//! until its standard input closes: the benchmark runs it beside a live capture so that the kernel's
//! run-time count of a program that does nothing can be read next to the probe's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use aya::TestRunOptions;
use aya::programs::{SchedClassifier, TcAttachType, TestRun as _};
use roce_wire::build::{IpSpec, RoceFrame};
use roce_wire::ext::RethRepr;
use roce_wire::{BthRepr, ExtHeaders, Opcode};
use tracer::engine::rings::RingPlan;
use tracer::engine::{consumer, ebpf};
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

/// The probe's object for its empty program (loaded this way, no ring is made for the probe).
fn empty_object() -> anyhow::Result<aya::Ebpf> {
    Ok(aya::EbpfLoader::new().load(ebpf::probe_object()?)?)
}

/// One ring of `bytes` for every CPU: the test runs happen on core 0, whose ring the reader on core 1 reads.
fn one_ring(bytes: u32) -> anyhow::Result<RingPlan> {
    let cpus = aya::util::nr_cpus().map_err(|(path, e)| anyhow::anyhow!("{path}: {e}"))?;
    Ok(RingPlan::shared(bytes, cpus))
}

/// The empty program of `bpf`, loaded into the kernel.
fn load_baseline(bpf: &mut aya::Ebpf) -> anyhow::Result<&mut SchedClassifier> {
    let prog: &mut SchedClassifier = bpf
        .program_mut(ebpf::BASELINE)
        .ok_or_else(|| anyhow::anyhow!("no {} program", ebpf::BASELINE))?
        .try_into()?;
    prog.load()?;
    Ok(prog)
}

/// Attaches the empty program to `iface`'s ingress until standard input closes.
fn baseline(iface: &str) -> anyhow::Result<()> {
    let mut bpf = empty_object()?;
    let prog = load_baseline(&mut bpf)?;
    prog.attach(iface, TcAttachType::Ingress)?;
    println!("attached");
    std::io::Write::flush(&mut std::io::stdout())?;
    let mut sink = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink)?;
    Ok(())
}

/// Loads the probe with the configurations in use and prints what verifying each program cost.
fn verifier() -> anyhow::Result<()> {
    for (snaplen, headers_only) in [
        (0, false),
        (60, true),
        (256, true),
        (256, false),
        (2048, false),
    ] {
        let config = Config {
            snaplen,
            all_frames: 0,
            wakeup_bytes: ebpf::wakeup_bytes(ebpf::DEFAULT_RING_BYTES),
            headers_only: u32::from(headers_only),
        };
        let started = std::time::Instant::now();
        // A small ring: only the programs matter here.
        let bpf = ebpf::load_probe(config, one_ring(1 << 16)?)?;
        let elapsed = started.elapsed();
        for name in [ebpf::INGRESS, ebpf::EGRESS] {
            let prog: &SchedClassifier = bpf
                .ebpf
                .program(name)
                .ok_or_else(|| anyhow::anyhow!("no {name} program"))?
                .try_into()?;
            let info = prog.info()?;
            println!(
                "snaplen={snaplen} headers_only={} program={name} verified_insns={} jited_bytes={} \
                 xlated_bytes={} load_ms_both={}",
                u8::from(headers_only),
                info.verified_instruction_count().unwrap_or(0),
                info.size_jitted(),
                info.size_translated().unwrap_or(0),
                elapsed.as_millis()
            );
        }
    }
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

/// Who empties the ring while the test runs go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// Nobody: the ring is drained between batches.
    Between,
    /// aya's `RingBuf` on core 1, spinning.
    Record,
    /// The tracer's `RingReader` on core 1, as the capture runs it.
    Batch,
}

/// Pins the calling thread to `cpu` (best effort: on a machine with one core the reader shares it).
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Starts the reader thread of `mode`, which runs until `stop` is set.
fn spawn_reader(
    mode: Reader,
    bpf: &mut ebpf::LoadedProbe,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Option<std::thread::JoinHandle<u64>>> {
    let stop = Arc::clone(stop);
    Ok(match mode {
        Reader::Between => None,
        Reader::Record => {
            let mut ring = bpf.take_ring(0)?;
            Some(std::thread::spawn(move || {
                pin_to(1);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    while ring.next().is_some() {
                        n += 1;
                    }
                }
                n
            }))
        }
        Reader::Batch => {
            let mut ring = bpf.take_reader(0)?;
            let batch = consumer::ring_batch(ring.size());
            Some(std::thread::spawn(move || {
                pin_to(1);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut read = 0;
                    while let Ok(w) = ring.drain(batch, |_| std::ops::ControlFlow::Continue(())) {
                        read += w.records;
                        if w.stop != tracer::engine::ring::Stop::Limit {
                            break;
                        }
                    }
                    n += read as u64;
                    std::thread::sleep(consumer::NAP);
                }
                n
            }))
        }
    })
}

fn main() -> anyhow::Result<()> {
    // `--ring-bytes N`: a ring other than the capture's default, to see what the ring's memory costs (a
    // ring that fits in the caches is cheaper to write than a 64 MiB one).
    let usage = "usage: probe_cost [--ring-bytes N] [--reader record|batch] | --verifier | --baseline IFACE";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut ring_bytes = None;
    let mut reader = Reader::Between;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--verifier" {
            return verifier();
        }
        let value = it.next().ok_or_else(|| anyhow::anyhow!("{usage}"))?;
        match flag.as_str() {
            "--ring-bytes" => ring_bytes = Some(value.parse::<u32>()?),
            "--reader" => {
                reader = match value.as_str() {
                    "record" => Reader::Record,
                    "batch" => Reader::Batch,
                    _ => anyhow::bail!("{usage}"),
                }
            }
            "--baseline" => return baseline(value),
            _ => anyhow::bail!("{usage}"),
        }
    }
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
            one_ring(ring)?,
        )?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = spawn_reader(reader, &mut bpf, &stop)?;
        let mut events = match thread {
            None => Some(bpf.take_reader(0)?),
            Some(_) => None,
        };
        let prog: &mut SchedClassifier = bpf
            .ebpf
            .program_mut(ebpf::INGRESS)
            .ok_or_else(|| anyhow::anyhow!("no ingress program"))?
            .try_into()?;
        let (best, median, worst) = time_runs(prog, &frame, ctx, || {
            if let Some(ring) = events.as_mut() {
                let _ = ring.drain(usize::MAX, |_| std::ops::ControlFlow::Continue(()));
            }
        })?;
        stop.store(true, Ordering::Relaxed);
        let read = thread.map(|t| t.join().unwrap_or(0));
        let lost = ebpf::ring_full(&bpf.ebpf).unwrap_or(0);
        let reader_note = match (reader, read) {
            (Reader::Between, _) => String::new(),
            (mode, n) => format!(
                "reader={} read={} lost={lost} ",
                if mode == Reader::Record {
                    "record"
                } else {
                    "batch"
                },
                n.unwrap_or(0)
            ),
        };
        println!(
            "best_ns={best} median_ns={median} worst_ns={worst} snaplen={snaplen} ring_bytes={ring} \
             {reader_note}case={what}"
        );
    }
    let mut bpf = empty_object()?;
    let prog = load_baseline(&mut bpf)?;
    let (best, median, worst) = time_runs(prog, &frame, None, || {})?;
    println!(
        "best_ns={best} median_ns={median} worst_ns={worst} snaplen=0 ring_bytes={ring} \
         case=empty program (what a test run itself costs)"
    );
    Ok(())
}
