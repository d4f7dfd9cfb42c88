//! `roce-analyzer`: offline analysis of RoCEv2 captures.
//!
//! Exit codes: 0 success; 2 an error, including a damaged capture (whose results up to the damage are still
//! printed, followed by a warning that names the byte offset) and a window that took no frame. A closed pipe
//! (`| head`) on standard output ends quietly with 0; a closed standard error loses its notes and warnings,
//! never the results or the exit code (every line for it goes through [`say`]).

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use analyzer::analysis::dcqcn::{DcqcnPass, Options};
use analyzer::analysis::findings::Severity;
use analyzer::analysis::hops::{self as hops_analysis, HopsOptions};
use analyzer::analysis::model_log::{self, ModelLog};
use analyzer::analysis::{self as pipeline, PipelineOptions};
use analyzer::output::annotate as annotation;
use analyzer::output::dataset;
use analyzer::output::frames as print;
use analyzer::output::hops::print_hops;
use analyzer::output::report::export::{self, write_kernel_tables};
use analyzer::output::report::manifest;
use analyzer::output::report::{Progress, ReportInput, headline, write_report_with};
use analyzer::output::tables::{self, TableFormat};
use analyzer::output::text::{print_dcqcn, print_kernel_events, print_stats};
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use roce_capture::{Bound, Capture, inputs};
use roce_core::dcqcn::{EcnConfig, Profile};
use roce_core::decode::Decoder;
use roce_core::filter::Filter;
use roce_core::frames::Frames;
use roce_core::line::LineRates;
use roce_core::passes::flows::FlowKey;
use roce_core::passes::pairing::{Pairing, PairingPass};
use roce_core::passes::pfc::PfcPass;
use roce_core::passes::threads::stats_on_threads;
use roce_core::passes::{Stats, StatsReport};
use roce_core::priority::PriorityMap;
use roce_core::recorded as blocks;
use roce_core::text::escape_control as escape;
use roce_core::units;

/// Decode and analyse RoCEv2 captures: BTH and extension headers, ECN, CNPs, PFC/PAUSE, per-QP statistics.
#[derive(Debug, Parser)]
#[command(name = "roce-analyzer", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print every frame: one readable line each, or JSON lines with --json.
    Decode(DecodeArgs),
    /// Per-flow, per-CNP-stream and per-priority statistics of a capture.
    Stats(StatsArgs),
    /// What DCQCN did: CNPs paired with their flows, the reaction-point model next to the observed rate.
    Dcqcn(DcqcnArgs),
    /// Everything, explained: findings, charts and tables in DIR/index.html (self-contained).
    Report(ReportArgs),
    /// The same packets at several taps: per-hop delay, each switch queue's depth and its ECN marking curve.
    Hops(HopsArgs),
    /// The capture written back as one pcapng file with the analysis in packet comments, for Wireshark.
    Annotate(AnnotateArgs),
}

#[derive(Debug, Args)]
struct AnnotateArgs {
    #[command(flatten)]
    input: Input,
    #[command(flatten)]
    model: ModelArgs,
    /// The pcapng file to write (replaced if it exists; never one of the inputs).
    #[arg(short = 'o', long = "out", value_name = "OUT.pcapng")]
    out: PathBuf,
    /// A pause at least this long without a break is a PFC storm (as for `report`).
    #[arg(long, default_value = "500us", value_parser = units::parse_positive_ns)]
    storm_threshold: u64,
}

#[derive(Debug, Args)]
struct HopsArgs {
    #[command(flatten)]
    input: Input,
    /// Drain rate of every queue, and the rate that takes each frame's serialization out of its delay. By
    /// default each downstream tap's line rate as the capture recorded it (pcapng if_speed); where none is
    /// recorded, the drain rate is measured from back-to-back frames. A number alone is Gb/s (25).
    #[arg(long, value_name = "SPEED", value_parser = units::parse_speed)]
    link_speed: Option<u64>,
    /// Copies of one packet are matched within this time of the first: more than the largest delay between
    /// taps plus the largest clock offset between files.
    #[arg(long, default_value = "10ms", value_parser = units::parse_positive_ns)]
    match_window: u64,
    /// Each hop's least delay is taken per window this long (some packet in each should find the queue
    /// empty); the drift between two files' clocks is followed from window to window.
    #[arg(long, default_value = "10ms", value_parser = units::parse_positive_ns)]
    clock_window: u64,
    /// Largest drift between two clocks to believe, in ppm; a steeper rise of the least delay is a queue.
    #[arg(long, default_value_t = 100.0)]
    max_drift_ppm: f64,
    /// The receivers' min_time_between_cnps, for the NP check.
    #[arg(long, default_value = "4us", value_parser = units::parse_positive_ns)]
    np_min_gap: u64,
    /// Width of the queue-depth bins of the marking curve, in bytes.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(64..))]
    bin_bytes: u64,
    /// The switch's configured marking curve, KMIN,KMAX in bytes and PMAX (e.g. 40000,160000,0.5): a
    /// finding when the fitted curve disagrees.
    #[arg(long, value_name = "KMIN,KMAX,PMAX", value_parser = parse_switch_ecn)]
    switch_ecn: Option<(f64, f64, f64)>,
    /// One JSON document with the keys taps, hops, queues, np, findings (see docs/hops.md).
    #[arg(long)]
    json: bool,
}

fn parse_switch_ecn(s: &str) -> Result<(f64, f64, f64), String> {
    let v: Vec<f64> = s
        .split(',')
        .map(|x| x.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{e}: expected KMIN,KMAX,PMAX, e.g. 40000,160000,0.5"))?;
    match v[..] {
        [kmin, kmax, pmax] if kmin >= 0.0 && kmax > kmin && (0.0..=1.0).contains(&pmax) => {
            Ok((kmin, kmax, pmax))
        }
        _ => Err("expected KMIN,KMAX,PMAX with 0 <= KMIN < KMAX (bytes) and 0 <= PMAX <= 1".into()),
    }
}

#[derive(Debug, Args)]
struct DcqcnArgs {
    #[command(flatten)]
    input: Input,
    #[command(flatten)]
    model: ModelArgs,
    /// JSON with a `flows` list (fields in docs/dcqcn.md).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ReportArgs {
    #[command(flatten)]
    input: Input,
    #[command(flatten)]
    model: ModelArgs,
    /// Directory for index.html, the PNG charts, summary.json and the tables (created if missing).
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    out: PathBuf,
    /// A pause at least this long without a break is a PFC storm (PFC watchdogs act after hundreds of ms
    /// on production fabrics; the default suits captures of a few ms).
    #[arg(long, default_value = "500us", value_parser = units::parse_positive_ns)]
    storm_threshold: u64,
    /// The switches' configured marking curve, KMIN,KMAX in bytes and PMAX, for the queue section (a finding
    /// when the curve fitted from captures of both sides of a switch disagrees).
    #[arg(long, value_name = "KMIN,KMAX,PMAX", value_parser = parse_switch_ecn)]
    switch_ecn: Option<(f64, f64, f64)>,
    /// Also write model_events.parquet: every event of every flow's DCQCN model (model.parquet holds the
    /// decimated series the charts draw). Written to disk as the model runs.
    #[arg(long)]
    model_table: bool,
}

/// How the reaction-point model runs (shared by `dcqcn` and `report`).
#[derive(Debug, Args)]
struct ModelArgs {
    /// DSCP → priority entries for untagged frames (e.g. 26=3,48=6), on top of the map the tracer recorded
    /// in the capture, else of DSCP/8; they win over both. See docs/priority.md.
    #[arg(long, value_name = "DSCP=PRIO,...", value_parser = parse_dscp_map)]
    dscp_map: Option<PriorityMap>,
    /// Line rate of every tap: each flow's model starts at it and never exceeds it, and it converts pause
    /// quanta to time. By default each tap's own, as the capture recorded it (pcapng if_speed), else 100 Gb/s
    /// assumed, which the output then says. A number alone is Gb/s (25); or 25G, 400Gbps, 100000M.
    #[arg(long, value_name = "SPEED", value_parser = units::parse_speed)]
    link_speed: Option<u64>,
    /// Reaction-point model: connectx (firmware knobs), connectx-fixed (the same with the NIC's 10-bit
    /// integer alpha) or paper (SIGCOMM 2015).
    #[arg(long, default_value = "connectx")]
    dcqcn_profile: String,
    /// File of knob values (`name=value` lines: the tracer's recorded `roce_rp/NAME`, `roce_np/NAME` and
    /// `enable/N` paths, bare names, or the model's options; see docs/dcqcn.md).
    #[arg(long, value_name = "FILE")]
    knobs: Option<PathBuf>,
    /// Override one knob, e.g. `--set rpg_gd=10` or `--set roce_rp/enable/3=0` (repeatable; applied after
    /// --knobs).
    #[arg(long = "set", value_name = "KNOB=VALUE")]
    set: Vec<String>,
    /// Rate bin width (e.g. 10us); by default chosen from the capture span.
    #[arg(long, value_parser = units::parse_positive_ns)]
    bin: Option<u64>,
    /// Shift CNP times by this one-way delay before the model sees them (e.g. 2us), when the capture was
    /// not taken at the sender.
    #[arg(long, default_value = "0ns", value_parser = units::parse_duration_ns, allow_hyphen_values = true)]
    cnp_delay: i64,
    /// Skip the knob fit.
    #[arg(long)]
    no_fit: bool,
    /// Fit the knobs of this many flows, those with the most CNPs.
    #[arg(long, value_name = "N", default_value_t = analyzer::analysis::dcqcn::DEFAULT_FIT_FLOWS)]
    fit_flows: usize,
}

#[derive(Debug, Args)]
struct Input {
    /// Capture files (pcap or pcapng, plain or gzip/zstd/lz4), directories of them, quoted patterns such as
    /// 'run.*.pcapng', or `-` for standard input. Several are merged by time; each interface of each file
    /// is a tap named FILE:IFACE (a rotated set continues its first file's taps).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Only frames from this time on: `+12.5s` after the first frame, or seconds since the epoch.
    #[arg(long, value_name = "TIME", value_parser = units::parse_time, allow_hyphen_values = true)]
    from: Option<Bound>,
    /// Only frames before this time (same forms as --from).
    #[arg(long, value_name = "TIME", value_parser = units::parse_time, allow_hyphen_values = true)]
    to: Option<Bound>,
    /// Also treat this UDP destination port as RoCEv2 (besides 4791).
    #[arg(long, value_name = "PORT")]
    roce_port: Option<u16>,
    /// Skip the ICRC check (it costs a CRC over every complete frame).
    #[arg(long)]
    no_icrc: bool,
}

#[derive(Debug, Args)]
struct DecodeArgs {
    #[command(flatten)]
    input: Input,
    /// JSON lines, one object per frame, with the fields documented in docs/decode.md.
    #[arg(long)]
    json: bool,
    /// Only frames matching this expression, e.g. `cnp or (roce and ecn == ce and qp == 0x118)`.
    /// Fields: kind qp src dst ip opcode psn ecn dscp vlan pcp sport icrc; see docs/decode.md.
    #[arg(long, short = 'Y', value_name = "EXPR")]
    filter: Option<String>,
    /// Stop after this many printed frames.
    #[arg(short = 'c', value_name = "N")]
    count: Option<u64>,
    /// Write the frames as a Parquet dataset (part-NNNNN.parquet files) into DIR instead of printing them;
    /// the columns are listed in docs/spark.md.
    #[arg(long, value_name = "DIR", conflicts_with = "json")]
    parquet: Option<PathBuf>,
    /// With --parquet: write into DIR/collector=NAME/, so that the datasets of several collectors sit side by
    /// side as one dataset partitioned by collector.
    #[arg(long, value_name = "NAME", requires = "parquet", value_parser = collector_name)]
    collector: Option<String>,
    /// With --parquet: rows at most per row group. By default a group closes at 128 MiB encoded (several
    /// million frames, Spark's block size); the encoded group is held in memory until it is written.
    #[arg(long, value_name = "N", requires = "parquet")]
    row_group_rows: Option<usize>,
}

/// A collector name becomes a directory name and a partition value: no separators, nothing Hive would escape.
fn collector_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && !s.starts_with('.')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(s.to_string())
    } else {
        Err("use letters, digits, '-', '_' and '.' only (not first), e.g. leaf01".into())
    }
}

#[derive(Debug, Args)]
struct StatsArgs {
    #[command(flatten)]
    input: Input,
    /// Threads that decode and count, besides the one that reads: the flows are split among them, and the
    /// output is the same whatever their number. By default as many as the cores this process may use; 1
    /// decodes on the reading thread.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    threads: Option<u32>,
    /// Line rate of every tap, which converts PFC/PAUSE quanta into time (512 bit times each). By default
    /// each tap's own, as the capture recorded it (pcapng if_speed), else 100 Gb/s assumed. A number alone is
    /// Gb/s (25); or 25G, 400Gbps, 100000M.
    #[arg(long, value_name = "SPEED", value_parser = units::parse_speed)]
    link_speed: Option<u64>,
    /// DSCP → priority entries for untagged frames (e.g. 26=3,48=6), on top of the map the tracer recorded
    /// in the capture, else of DSCP/8; they win over both. See docs/priority.md.
    #[arg(long, value_name = "DSCP=PRIO,...", value_parser = parse_dscp_map)]
    dscp_map: Option<PriorityMap>,
    /// One JSON document with the keys capture, flows, cnps, pfc.
    #[arg(long)]
    json: bool,
    /// Also write the tables as CSV files into this directory.
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    /// Also write the tables as Parquet files into this directory.
    #[arg(long, value_name = "DIR")]
    parquet: Option<PathBuf>,
}

/// Buffers of 128 KiB and more get pages of their own, given back when they are freed. glibc otherwise
/// raises that threshold each time such a buffer is freed (up to 32 MiB), after which the large buffers of
/// `report`'s end (the pairing's candidates, the rate series, the table writers') come from the heap, and
/// the heap keeps the high-water mark of all of them together: on the 15 M-frame bench set that was 35 MB
/// of peak RSS, more the longer the capture (docs/report.md, "Size and memory").
fn keep_large_buffers_out_of_the_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

fn main() -> ExitCode {
    keep_large_buffers_out_of_the_heap();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(a) => decode(a),
        Command::Stats(a) => stats(a),
        Command::Dcqcn(a) => dcqcn(a),
        Command::Report(a) => report(a),
        Command::Hops(a) => hops(a),
        Command::Annotate(a) => annotate(a),
    };
    match result {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            say(&format!("error: {e:#}"));
            ExitCode::from(2)
        }
    }
}

/// One line on standard error, after the program's name, its control characters escaped (names in it may
/// come from the capture). The only way this program writes to standard error: see
/// [`roce_core::text::to_stderr`] for why a closed one is no failure.
fn say(line: &str) {
    roce_core::text::to_stderr(&format!("roce-analyzer: {}", escape(line)));
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        // serde_json wraps the writer's error in its own.
        let kind = c
            .downcast_ref::<io::Error>()
            .map(io::Error::kind)
            .or_else(|| {
                c.downcast_ref::<serde_json::Error>()
                    .and_then(serde_json::Error::io_error_kind)
            });
        kind == Some(io::ErrorKind::BrokenPipe)
    })
}

/// `--threads`, or the cores this process may use.
fn threads(given: Option<u32>) -> usize {
    given.map_or_else(
        || std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        |n| n as usize,
    )
}

/// Opens the inputs as one capture, windowed; a directory's files that are not captures are named, and so
/// are the files named more than once (read once).
fn open(input: &Input) -> Result<Capture> {
    let inputs = inputs::resolve(&input.files)?;
    for (path, why) in &inputs.skipped {
        say(&format!("note: {}: skipped ({why})", path.display()));
    }
    for repeat in &inputs.repeats {
        say(&format!("note: {repeat}"));
    }
    let mut capture = Capture::open(inputs).map_err(|e| {
        let hint = match e.kind {
            roce_capture::SourceErrorKind::NotACapture { .. } => {
                " (expected a pcap or pcapng file, plain or gzip/zstd/lz4; convert others with `editcap -F pcapng IN OUT`)"
            }
            _ => "",
        };
        anyhow::anyhow!("{e}{hint}")
    })?;
    capture.set_window(input.from, input.to)?;
    Ok(capture)
}

fn decoder(i: &Input) -> Decoder {
    Decoder {
        check_icrc: !i.no_icrc,
        extra_port: i.roce_port,
    }
}

/// Names each tap whose link type the decoder does not read (an InfiniBand or IPoIB capture, say): its
/// frames are all `other`, and a table of nothing but `other` would not say why.
fn warn_unread_links(capture: &Capture) {
    for tap in capture.taps() {
        let link = tap.description.link;
        if !Decoder::reads_link(link) {
            say(&format!(
                "warning: {}: interface {} has link type {link}, which is not decoded: its frames are \
                 counted as `other` (RoCE is read from Ethernet, Linux cooked and raw IP captures)",
                capture
                    .files()
                    .nth(tap.file)
                    .map(|f| f.name.clone())
                    .unwrap_or_default(),
                tap.interface,
            ));
        }
    }
}

/// What damaged files leave, printed after the results so the user sees both: one warning per file, and
/// exit code 2.
fn finish(capture: &Capture) -> ExitCode {
    warn_unread_links(capture);
    let mut code = ExitCode::SUCCESS;
    for e in capture.errors() {
        say(&format!(
            "warning: {e}; the results above cover everything of that file before this point"
        ));
        code = ExitCode::from(2);
    }
    code
}

fn hops(a: HopsArgs) -> Result<ExitCode> {
    let mut capture = open(&a.input)?;
    let opts = HopsOptions {
        match_window_ns: a.match_window,
        clock_window_ns: a.clock_window,
        max_drift_ppm: a.max_drift_ppm,
        link_bps: a.link_speed,
        np_min_gap_ns: a.np_min_gap,
        bin_bytes: a.bin_bytes,
        switch_ecn: a.switch_ecn,
    };
    let report = hops_analysis::run(&mut capture, decoder(&a.input), opts);
    capture.check_window()?;
    let mut out = BufWriter::new(io::stdout().lock());
    if a.json {
        analyzer::output::json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_hops(&mut out, &report)?;
    }
    out.flush()?;
    Ok(finish(&capture))
}

fn decode(a: DecodeArgs) -> Result<ExitCode> {
    let filter: Option<Filter> = a.filter.as_deref().map(str::parse).transpose()?;
    let mut capture = open(&a.input)?;
    if let Some(dir) = &a.parquet {
        return decode_parquet(&a, dir, filter.as_ref(), capture);
    }
    let stdout = io::stdout().lock();
    let mut out = BufWriter::with_capacity(1 << 16, stdout);
    let mut printed = 0u64;
    let mut first_ns = None;
    let limit = a.count.unwrap_or(u64::MAX);
    let mut frames = Frames::new(&mut capture, decoder(&a.input));
    while printed < limit {
        let Some(f) = frames.next_frame() else {
            break;
        };
        let first = *first_ns.get_or_insert(f.ts_ns);
        if filter.as_ref().is_some_and(|flt| !flt.matches(&f)) {
            continue;
        }
        printed += 1;
        if a.json {
            print::json_line(&mut out, &f)?;
        } else {
            print::text_line(&mut out, &f, first)?;
        }
    }
    out.flush()?;
    capture.check_window()?;
    Ok(finish(&capture))
}

/// `decode --parquet`: the frames that pass the filter, as a dataset in `dir` (or its collector's part).
fn decode_parquet(
    a: &DecodeArgs,
    dir: &Path,
    filter: Option<&Filter>,
    mut capture: Capture,
) -> Result<ExitCode> {
    let dir = match &a.collector {
        Some(name) => dir.join(format!("collector={name}")),
        None => dir.to_path_buf(),
    };
    let layout = dataset::Layout {
        group_rows: a.row_group_rows,
        ..dataset::Layout::default()
    };
    let mut writer = dataset::DatasetWriter::create(&dir, layout)?;
    let limit = a.count.unwrap_or(u64::MAX);
    let mut taken = 0u64;
    let mut full = false;
    let mut frames = Frames::new(&mut capture, decoder(&a.input));
    // The loop pauses when a batch is full, to hand it over with the capture's tap names, and at the limit.
    while taken < limit
        && frames.for_each_until(|f| {
            if filter.is_some_and(|flt| !flt.matches(f)) {
                return false;
            }
            taken += 1;
            full = writer.push(f);
            full || taken >= limit
        })
    {
        if full {
            writer.flush(frames.capture())?;
        }
    }
    capture.check_window()?;
    let written = writer.finish(&capture)?;
    say(&format!("{written} frames written to {}", dir.display()));
    Ok(finish(&capture))
}

fn parse_dscp_map(s: &str) -> Result<PriorityMap, String> {
    PriorityMap::parse(s).map_err(|e| e.to_string())
}

fn stats(a: StatsArgs) -> Result<ExitCode> {
    let mut capture = open(&a.input)?;
    let make = || {
        Stats::new(LineRates::flag(a.link_speed))
            .with_priorities(a.dscp_map.clone().unwrap_or_default())
    };
    let stats = stats_on_threads(&mut capture, decoder(&a.input), threads(a.threads), make);
    capture.check_window()?;
    let report = stats.finish(&capture);
    // Kernel events (`roce-tracer --kernel-events`) name the processes behind QPs. A flow's sending QP is
    // not in its packets: it comes from pairing the flow with its other direction, which `stats` does in a
    // second read only when there are events to label with (the pass would slow every plain run). Standard
    // input cannot be read twice: there the only flow coming back, if it is the only one, stands in.
    let kernel = blocks::kernel_events(capture.custom_blocks());
    let kernel_summary = if kernel.is_empty() {
        None
    } else {
        let pairing = if a.input.files.iter().any(|f| f == Path::new("-")) {
            None
        } else {
            Some(pair_flows(&a.input)?)
        };
        Some(blocks::KernelSummary::of(&kernel, &report.flows, &|f| {
            let key = FlowKey {
                src: f.src,
                dst: f.dst,
                dest_qp: f.dest_qp,
            };
            pairing
                .as_ref()
                .and_then(|p| p.sender_qp(&key))
                .map(|(q, method)| (q, method.key().to_string()))
                .or_else(|| {
                    blocks::reverse_flow_qp(&report.flows, f)
                        .map(|q| (q, "reverse_flow".to_string()))
                })
        }))
    };
    let mut out = BufWriter::new(io::stdout().lock());
    if a.json {
        analyzer::output::json::to_writer_pretty(
            &mut out,
            &StatsJson {
                report: &report,
                kernel_events: kernel_summary.as_ref().map(|summary| KernelJson {
                    summary,
                    events: &kernel.events,
                }),
            },
        )?;
        writeln!(out)?;
    } else {
        print_stats(&mut out, &report)?;
        if let Some(k) = &kernel_summary {
            print_kernel_events(&mut out, k, &kernel.events)?;
        }
    }
    out.flush()?;
    for (dir, format) in [
        (&a.csv, TableFormat::Csv),
        (&a.parquet, TableFormat::Parquet),
    ] {
        if let Some(dir) = dir {
            write_tables(dir, &report, format)?;
            if let Some(k) = &kernel_summary {
                write_kernel_tables(dir, k, &kernel.events, &[format])
                    .with_context(|| format!("writing tables into {}", dir.display()))?;
            }
        }
    }
    Ok(finish(&capture))
}

/// Reads the capture again for the pairing of its flows (damage ends the pass early; the first read has
/// already reported it).
fn pair_flows(input: &Input) -> Result<Pairing> {
    let mut capture = open(input)?;
    let mut pass = PairingPass::default();
    let mut frames = Frames::new(&mut capture, decoder(input));
    frames.for_each(|f| pass.frame(f));
    Ok(pass.finish())
}

/// `stats --json`: the report's keys, then `kernel_events` for a capture made with
/// `roce-tracer --kernel-events`.
#[derive(serde::Serialize)]
struct StatsJson<'a> {
    #[serde(flatten)]
    report: &'a StatsReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_events: Option<KernelJson<'a>>,
}

#[derive(serde::Serialize)]
struct KernelJson<'a> {
    #[serde(flatten)]
    summary: &'a blocks::KernelSummary,
    events: &'a [blocks::KernelEvent],
}

fn model_options(m: &ModelArgs) -> Result<Options> {
    let mut ecn = EcnConfig::default();
    let profile = Profile::from_name(&m.dcqcn_profile, &mut ecn.rp)?;
    let mut source = vec!["defaults".to_string()];
    if let Some(path) = &m.knobs {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading knobs from {}", path.display()))?;
        ecn.apply_kv_text(&text)
            .with_context(|| format!("knobs file {}", path.display()))?;
        source.push(path.display().to_string());
    }
    for kv in &m.set {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--set {kv:?}: expected KNOB=VALUE"))?;
        ecn.set(k.trim(), v.trim())?;
        source.push(format!("--set {kv}"));
    }
    let mut opts = Options {
        profile,
        knob_source: source.join(" + "),
        lines: LineRates::flag(m.link_speed),
        cnp_delay_ns: m.cnp_delay,
        bin_ns: m.bin,
        fit: !m.no_fit,
        fit_flows: m.fit_flows,
        // Knobs the user gave win over the ones recorded in the capture.
        recorded_knobs: m.knobs.is_none() && m.set.is_empty(),
        priorities: m.dscp_map.clone().unwrap_or_default(),
        ..Options::default()
    };
    opts.set_ecn(ecn);
    Ok(opts)
}

fn report(a: ReportArgs) -> Result<ExitCode> {
    one_malloc_arena();
    let opts = PipelineOptions {
        decoder: decoder(&a.input),
        dcqcn: model_options(&a.model)?,
        storm_threshold_ns: a.storm_threshold,
        hops: HopsOptions {
            switch_ecn: a.switch_ecn,
            link_bps: a.model.link_speed,
            ..HopsOptions::default()
        },
        ..PipelineOptions::default()
    };
    let mut capture = open(&a.input)?;
    let progress = Progress::new(capture.progress().1, "analysing");
    let mut log = if a.model_table {
        tables::create_dir(&a.out)?;
        let path = a.out.join(".model_events.tmp");
        Some(ModelLog::create(&path).with_context(|| format!("creating {}", path.display()))?)
    } else {
        None
    };
    let analysis = pipeline::run_with_model_events(
        &mut capture,
        &opts,
        |pos| progress.set_position(pos),
        &mut |id, e| {
            if let Some(l) = &mut log {
                l.push(id, e);
            }
        },
    )?;
    progress.finish();
    capture.check_window()?;
    let kernel = blocks::kernel_events(capture.custom_blocks());
    let input = ReportInput {
        stats: &analysis.stats,
        dcqcn: &analysis.dcqcn,
        pauses: &analysis.pauses,
        findings: &analysis.findings,
        hops: analysis.hops.as_ref(),
    };
    let files = write_report_with(&a.out, &input, &kernel)
        .with_context(|| format!("writing the report into {}", a.out.display()))?;
    kept_read_back(&analysis.dcqcn)?;
    if let Some(log) = log {
        write_model_table(&a.out, log)?;
    }
    // Each line escaped on its own: the line break between them is the headline's.
    // Written, not printed: `report … | head` closes the pipe, and that ends the command quietly.
    let mut out = io::stdout().lock();
    for line in headline(&input).to_string().lines() {
        writeln!(out, "{}", escape(line))?;
    }
    let problems = analysis
        .findings
        .iter()
        .filter(|f| f.severity >= Severity::Warning)
        .count();
    writeln!(
        out,
        "{}: {} frames, {} flows with CE or CNPs, {} findings ({} warnings or problems)",
        escape(&files.index.display().to_string()),
        analysis.stats.capture.frames,
        analysis.dcqcn.flows.len(),
        analysis.findings.len(),
        problems
    )?;
    for f in &analysis.findings {
        writeln!(out, "  [{:?}] {}", f.severity, escape(&f.title))?;
    }
    for limit in analysis.dcqcn.limits() {
        say(&format!("warning: {limit}"));
    }
    Ok(finish(&capture))
}

/// The report's analysis runs the DCQCN passes on a second thread, and glibc would give that thread an
/// allocation arena of its own: free memory in one arena serves no allocation of the other, which cost a
/// fifth more peak memory on the saturation benchmark (176 → 216 MB, before the mmap threshold above was
/// fixed) for no speed. One arena for the process.
fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes a malloc setting; it is called before any other thread of ours starts.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Turns the model's event log into model_events.parquet, a chunk of rows at a time, and removes the log;
/// the table is listed in the report's manifest like the report's own files.
fn write_model_table(dir: &Path, log: ModelLog) -> Result<()> {
    let (path, _) = log
        .finish()
        .context("writing the model's events to a scratch file")?;
    let formats = [TableFormat::Parquet];
    export::list(dir, "model_events", &formats)?;
    let mut error = None;
    let chunks = model_log::read_rows(&path, 1 << 16)
        .with_context(|| format!("reading {}", path.display()))?
        .map_while(|c| c.map_err(|e| error = Some(e)).ok());
    tables::write_formats_chunked(dir, "model_events", chunks, &formats)
        .with_context(|| format!("writing model_events.parquet into {}", dir.display()))?;
    if let Some(e) = error {
        return Err(e).with_context(|| format!("reading {}", path.display()));
    }
    std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    manifest::finish(dir)?;
    Ok(())
}

/// `annotate`: the analysis of `report`, then the capture read again and written with it in its comments.
fn annotate(a: AnnotateArgs) -> Result<ExitCode> {
    one_malloc_arena();
    let opts = PipelineOptions {
        decoder: decoder(&a.input),
        dcqcn: model_options(&a.model)?,
        storm_threshold_ns: a.storm_threshold,
        ..PipelineOptions::default()
    };
    let mut capture = open(&a.input)?;
    annotation::refuse_inputs(&capture, &a.out)?;
    let progress = Progress::new(capture.progress().1, "analysing");
    let mut models = annotation::CnpModels::default();
    let analysis = pipeline::run_with_model_events(
        &mut capture,
        &opts,
        |pos| progress.set_position(pos),
        &mut |id, e| models.event(id, e),
    )?;
    progress.finish();
    capture.check_window()?;
    let progress = Progress::new(capture.progress().1, "annotating");
    let done = annotation::annotate(&capture, &analysis, models, opts.decoder, &a.out, |pos| {
        progress.set_position(pos)
    })?;
    progress.finish();
    kept_read_back(&analysis.dcqcn)?;
    writeln!(io::stdout().lock(), "{}", escape(&done.summary(&a.out)))?;
    for w in done.warnings() {
        say(&format!("warning: {w}"));
    }
    Ok(finish(&capture))
}

fn dcqcn(a: DcqcnArgs) -> Result<ExitCode> {
    let opts = model_options(&a.model)?;
    let mut capture = open(&a.input)?;
    let progress = Progress::new(capture.progress().1, "reading");
    let mut pass = DcqcnPass::new(opts.bin_ns, opts.lines);
    // The model is compared with the observed rate outside PFC pauses only.
    let mut pfc = PfcPass::new(opts.lines);
    let mut frames = Frames::new(&mut capture, decoder(&a.input));
    let mut number = 0u64;
    let mut last_ns = 0;
    while let Some(f) = frames.next_frame() {
        pass.frame(&f);
        pfc.frame(&f);
        last_ns = last_ns.max(f.ts_ns);
        number += 1;
        if number.is_multiple_of(65_536) {
            progress.set_position(frames.capture().progress().0);
        }
    }
    progress.finish();
    capture.check_window()?;
    let mut opts = opts;
    opts.apply_recorded_knobs(capture.custom_blocks());
    opts.learn_taps(capture.taps());
    let (_, pauses) = pfc.finish_with_intervals(last_ns);
    let mut report = pass.finish(&opts, &pauses)?;
    report.name_taps(|i| pipeline::tap_name(&capture, i));
    for limit in report.limits() {
        say(&format!("warning: {limit}"));
    }
    let mut out = BufWriter::new(io::stdout().lock());
    if a.json {
        analyzer::output::json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_dcqcn(&mut out, &report)?;
    }
    out.flush()?;
    kept_read_back(&report)?;
    Ok(finish(&capture))
}

/// Fails when a flow's CNP times or cuts could not be read back from their temporary file while the output
/// was written: that output may lack some of them.
fn kept_read_back(report: &analyzer::analysis::dcqcn::DcqcnReport) -> Result<()> {
    match report.kept_read_error() {
        Some(e) => Err(e).context(
            "reading the DCQCN flows' CNP times and cuts back from their temporary file in TMPDIR: the output \
             above may lack some; check that TMPDIR's file system is healthy and run again",
        ),
        None => Ok(()),
    }
}

fn write_tables(dir: &Path, r: &StatsReport, format: TableFormat) -> Result<()> {
    let ctx = || format!("writing tables into {}", dir.display());
    tables::write_row(dir, "capture", &r.capture, format).with_context(ctx)?;
    tables::write(dir, "flows", &r.flows, format).with_context(ctx)?;
    tables::write(dir, "cnps", &r.cnps, format).with_context(ctx)?;
    tables::write(dir, "pfc", &r.pfc, format).with_context(ctx)?;
    tables::write(dir, "counters", &r.counters, format).with_context(ctx)?;
    tables::write(dir, "kernel_drops", &r.kernel_drops, format).with_context(ctx)?;
    Ok(())
}
