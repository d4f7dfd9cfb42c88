//! `roce-analyzer`: offline analysis of RoCEv2 captures.
//!
//! Exit codes: 0 success; 2 an error, including a damaged capture (whose results up to the damage are still
//! printed, followed by a warning that names the byte offset). A closed pipe (`| head`) ends quietly with 0.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use analyzer::dcqcn::analysis::{DcqcnPass, DcqcnReport, Options};
use analyzer::dcqcn::{Knobs, Profile};
use analyzer::decode::{Decoder, Frame};
use analyzer::filter::Filter;
use analyzer::findings::Severity;
use analyzer::passes::flows::FlowKey;
use analyzer::passes::pairing::{Pairing, PairingPass};
use analyzer::passes::{Stats, StatsReport};
use analyzer::pipeline::{self, PipelineOptions};
use analyzer::report::{Progress, ReportInput, write_report_with};
use analyzer::source::{CaptureReader, SourceError};
use analyzer::tables::{self, TableFormat};
use analyzer::{blocks, print, units};
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

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
}

#[derive(Debug, Args)]
struct DcqcnArgs {
    #[command(flatten)]
    input: Input,
    #[command(flatten)]
    model: ModelArgs,
    /// JSON with a `flows` list (see the README for the fields).
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
}

/// How the reaction-point model runs (shared by `dcqcn` and `report`).
#[derive(Debug, Args)]
struct ModelArgs {
    /// Line rate of the senders: the model's starting and maximum rate; also converts pause quanta to time.
    #[arg(long, default_value = "100G", value_parser = units::parse_speed)]
    link_speed: u64,
    /// Reaction-point model: connectx (firmware knobs) or paper (SIGCOMM 2015).
    #[arg(long, default_value = "connectx")]
    dcqcn_profile: String,
    /// File of knob values (`name=value` lines, as the tracer records them under roce_rp/).
    #[arg(long, value_name = "FILE")]
    knobs: Option<PathBuf>,
    /// Override one knob, e.g. `--set rpg_gd=10` (repeatable; applied after --knobs).
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
    /// Fit the knobs of this many flows, those with the most CNPs (each fit replays the model 41 times).
    #[arg(long, value_name = "N", default_value_t = analyzer::dcqcn::analysis::DEFAULT_FIT_FLOWS)]
    fit_flows: usize,
    /// Model events kept over all flows (about 50 bytes each), shared out evenly and at most a million a
    /// flow; a flow whose model needs more stops early, with a warning.
    #[arg(long, value_name = "N", default_value_t = analyzer::dcqcn::analysis::DEFAULT_MAX_MODEL_EVENTS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    model_events: usize,
}

#[derive(Debug, Args)]
struct Input {
    /// Capture file (pcap or pcapng); `-` reads standard input.
    file: PathBuf,
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
    /// JSON lines, one object per frame, with the fields documented in the README.
    #[arg(long)]
    json: bool,
    /// Only frames matching this expression, e.g. `cnp or (roce and ecn == ce and qp == 0x118)`.
    /// Fields: kind qp src dst ip opcode psn ecn dscp vlan pcp sport icrc; see the README.
    #[arg(long, short = 'Y', value_name = "EXPR")]
    filter: Option<String>,
    /// Stop after this many printed frames.
    #[arg(short = 'c', value_name = "N")]
    count: Option<u64>,
}

#[derive(Debug, Args)]
struct StatsArgs {
    #[command(flatten)]
    input: Input,
    /// Link speed that converts PFC/PAUSE quanta into time (512 bit times each).
    #[arg(long, default_value = "100G", value_parser = units::parse_speed)]
    link_speed: u64,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(a) => decode(a),
        Command::Stats(a) => stats(a),
        Command::Dcqcn(a) => dcqcn(a),
        Command::Report(a) => report(a),
    };
    match result {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roce-analyzer: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

fn open(path: &Path) -> Result<CaptureReader> {
    CaptureReader::open(path).map_err(|e| {
        let hint = match e.kind {
            analyzer::source::SourceErrorKind::NotACapture { .. } => {
                " (expected a pcap or pcapng file; convert others with `editcap -F pcapng IN OUT`)"
            }
            _ => "",
        };
        anyhow::anyhow!("{e}{hint}")
    })
}

fn decoder(i: &Input) -> Decoder {
    Decoder {
        check_icrc: !i.no_icrc,
        extra_port: i.roce_port,
    }
}

/// What a damaged file leaves: printed after the results so the user sees both.
fn damage_warning(e: &SourceError) -> ExitCode {
    eprintln!("roce-analyzer: warning: {e}; the results above cover everything before this point");
    ExitCode::from(2)
}

fn decode(a: DecodeArgs) -> Result<ExitCode> {
    let filter: Option<Filter> = a.filter.as_deref().map(str::parse).transpose()?;
    let dec = decoder(&a.input);
    let mut reader = open(&a.input.file)?;
    let stdout = io::stdout().lock();
    let mut out = BufWriter::with_capacity(1 << 16, stdout);
    let mut number = 0u64;
    let mut printed = 0u64;
    let mut first_ns = None;
    let limit = a.count.unwrap_or(u64::MAX);
    let damage = loop {
        if printed >= limit {
            break None;
        }
        let rec = match reader.next_record() {
            Ok(Some(rec)) => rec,
            Ok(None) => break None,
            Err(e) => break Some(e),
        };
        number += 1;
        let f = dec.decode(number, &rec);
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
    };
    out.flush()?;
    Ok(match damage {
        Some(e) => damage_warning(&e),
        None => ExitCode::SUCCESS,
    })
}

fn stats(a: StatsArgs) -> Result<ExitCode> {
    let dec = decoder(&a.input);
    let mut reader = open(&a.input.file)?;
    let mut stats = Stats::new(a.link_speed);
    let mut number = 0u64;
    let damage = loop {
        match reader.next_record() {
            Ok(Some(rec)) => {
                number += 1;
                let mut f = Frame::empty(number, &rec);
                dec.decode_into(&mut f, rec.link);
                stats.frame(&f);
            }
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    let report = stats.finish(&reader, damage.as_ref().map(ToString::to_string));
    // Kernel events (`roce-tracer --kernel-events`) name the processes behind QPs. A flow's sending QP is
    // not in its packets: it comes from pairing the flow with its other direction, which `stats` does in a
    // second read only when there are events to label with (the pass would slow every plain run). Standard
    // input cannot be read twice: there the only flow coming back, if it is the only one, stands in.
    let kernel = blocks::kernel_events(reader.custom_blocks());
    let kernel_summary = if kernel.is_empty() {
        None
    } else {
        let pairing = if a.input.file == Path::new("-") {
            None
        } else {
            Some(pair_flows(&a.input.file, &dec)?)
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
        serde_json::to_writer_pretty(
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
                write_kernel_tables(dir, k, &kernel.events, format)?;
            }
        }
    }
    Ok(match damage {
        Some(e) => damage_warning(&e),
        None => ExitCode::SUCCESS,
    })
}

/// Reads the capture again for the pairing of its flows (damage ends the pass early; the first read has
/// already reported it).
fn pair_flows(path: &Path, dec: &Decoder) -> Result<Pairing> {
    let mut reader = open(path)?;
    let mut pass = PairingPass::default();
    let mut number = 0u64;
    while let Ok(Some(rec)) = reader.next_record() {
        number += 1;
        let mut f = Frame::empty(number, &rec);
        dec.decode_into(&mut f, rec.link);
        pass.frame(&f);
    }
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
    let profile = Profile::from_name(&m.dcqcn_profile)?;
    let mut knobs = Knobs::default();
    let mut source = vec!["defaults".to_string()];
    if let Some(path) = &m.knobs {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading knobs from {}", path.display()))?;
        knobs
            .apply_kv_text(&text)
            .with_context(|| format!("knobs file {}", path.display()))?;
        source.push(path.display().to_string());
    }
    for kv in &m.set {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--set {kv:?}: expected KNOB=VALUE"))?;
        knobs.set(k.trim(), v.trim())?;
        source.push(format!("--set {kv}"));
    }
    Ok(Options {
        profile,
        knobs,
        knob_source: source.join(" + "),
        line_mbps: m.link_speed as f64 / 1e6,
        cnp_delay_ns: m.cnp_delay,
        bin_ns: m.bin,
        fit: !m.no_fit,
        fit_flows: m.fit_flows,
        max_model_events: m.model_events,
        // Knobs the user gave win over the ones recorded in the capture.
        recorded_knobs: m.knobs.is_none() && m.set.is_empty(),
        ..Options::default()
    })
}

fn report(a: ReportArgs) -> Result<ExitCode> {
    let opts = PipelineOptions {
        decoder: decoder(&a.input),
        link_bps: a.model.link_speed,
        dcqcn: model_options(&a.model)?,
        storm_threshold_ns: a.storm_threshold,
        ..PipelineOptions::default()
    };
    let mut reader = open(&a.input.file)?;
    let total = std::fs::metadata(&a.input.file).ok().map(|m| m.len());
    let progress = Progress::new(total, "analysing");
    let (analysis, damage) = pipeline::run(&mut reader, &opts, |pos| progress.set_position(pos))?;
    progress.finish();
    let kernel = blocks::kernel_events(reader.custom_blocks());
    let files = write_report_with(
        &a.out,
        &ReportInput {
            stats: &analysis.stats,
            dcqcn: &analysis.dcqcn,
            pauses: &analysis.pauses,
            findings: &analysis.findings,
        },
        &kernel,
    )
    .with_context(|| format!("writing the report into {}", a.out.display()))?;
    let problems = analysis
        .findings
        .iter()
        .filter(|f| f.severity >= Severity::Warning)
        .count();
    println!(
        "{}: {} frames, {} flows with CE or CNPs, {} findings ({} warnings or problems)",
        files.index.display(),
        analysis.stats.capture.frames,
        analysis.dcqcn.flows.len(),
        analysis.findings.len(),
        problems
    );
    for f in &analysis.findings {
        println!("  [{:?}] {}", f.severity, f.title);
    }
    for limit in analysis.dcqcn.limits() {
        eprintln!("roce-analyzer: warning: {limit}");
    }
    Ok(match damage {
        Some(e) => damage_warning(&e),
        None => ExitCode::SUCCESS,
    })
}

fn dcqcn(a: DcqcnArgs) -> Result<ExitCode> {
    let opts = model_options(&a.model)?;
    let dec = decoder(&a.input);
    let mut reader = open(&a.input.file)?;
    let mut pass = DcqcnPass::new(opts.bin_ns);
    let mut number = 0u64;
    let damage = loop {
        match reader.next_record() {
            Ok(Some(rec)) => {
                number += 1;
                pass.frame(&dec.decode(number, &rec));
            }
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    let mut opts = opts;
    opts.apply_recorded_knobs(reader.custom_blocks());
    let report = pass.finish(&opts)?;
    for limit in report.limits() {
        eprintln!("roce-analyzer: warning: {limit}");
    }
    let mut out = BufWriter::new(io::stdout().lock());
    if a.json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_dcqcn(&mut out, &report)?;
    }
    out.flush()?;
    Ok(match damage {
        Some(e) => damage_warning(&e),
        None => ExitCode::SUCCESS,
    })
}

fn print_dcqcn(out: &mut impl Write, r: &DcqcnReport) -> io::Result<()> {
    writeln!(
        out,
        "DCQCN  profile {}, knobs from {}, line {} Gb/s, bins {} µs, CNP delay {} ns",
        r.profile,
        r.knob_source,
        r.line_gbps,
        r.bin_ns as f64 / 1000.0,
        r.cnp_delay_ns
    )?;
    let rows: Vec<Vec<String>> = r
        .flows
        .iter()
        .map(|f| {
            let ratios: Vec<f64> = f.observed_cuts.iter().map(|c| c.ratio).collect();
            let median = if ratios.is_empty() {
                "-".to_string()
            } else {
                let mut v = ratios.clone();
                v.sort_by(f64::total_cmp);
                format!("{:.2}", v[v.len() / 2])
            };
            let ce: f64 = f.observed.iter().map(|o| o.ce_fraction).sum::<f64>()
                / f.observed.len().max(1) as f64;
            vec![
                f.sender.to_string(),
                f.receiver.to_string(),
                format!("0x{:06x}", f.receiver_qp),
                f.sender_qp.map_or("?".into(), |q| format!("0x{q:06x}")),
                f.pairing.map_or("unpaired".into(), |m| format!("{m:?}")),
                f.cnps.to_string(),
                format!("{:.3}", ce),
                f.cuts.len().to_string(),
                f.cuts
                    .last()
                    .map_or("-".into(), |c| format!("{:.1}", c.rc_after_gbps)),
                median,
                f.fit.map_or("-".into(), |x| {
                    format!(
                        "G={} gd={} ({:.2} vs {:.2} Gb/s)",
                        x.dce_tcp_g, x.rpg_gd, x.error_gbps, x.given_error_gbps
                    )
                }),
            ]
        })
        .collect();
    table(
        out,
        &[
            "sender",
            "receiver",
            "rcv_qp",
            "snd_qp",
            "pairing",
            "CNPs",
            "CE frac",
            "cuts",
            "last Rc",
            "obs ratio",
            "fit (error: fitted vs given)",
        ],
        &rows,
    )?;
    if !r.unpaired_cnps.is_empty() {
        writeln!(
            out,
            "\nCNP streams not tied to any data flow ({})",
            r.unpaired_cnps.len()
        )?;
        for u in &r.unpaired_cnps {
            writeln!(
                out,
                "  {} → {} QP 0x{:06x}: {} CNPs",
                u.src, u.dst, u.dest_qp, u.cnps
            )?;
        }
    }
    Ok(())
}

fn write_tables(dir: &Path, r: &StatsReport, format: TableFormat) -> Result<()> {
    let ctx = || format!("writing tables into {}", dir.display());
    tables::write(dir, "capture", std::slice::from_ref(&r.capture), format).with_context(ctx)?;
    tables::write(dir, "flows", &r.flows, format).with_context(ctx)?;
    tables::write(dir, "cnps", &r.cnps, format).with_context(ctx)?;
    tables::write(dir, "pfc", &r.pfc, format).with_context(ctx)?;
    tables::write(dir, "counters", &r.counters, format).with_context(ctx)?;
    tables::write(dir, "kernel_drops", &r.kernel_drops, format).with_context(ctx)?;
    Ok(())
}

/// Left-aligned first columns, right-aligned numbers, widths from the content.
fn table(out: &mut impl Write, header: &[&str], rows: &[Vec<String>]) -> io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    // One line buffer for the whole table: a capture with thousands of flows made an allocation per padded
    // cell show up in `stats`'s run time.
    let mut s = String::new();
    let mut line = |out: &mut dyn Write, cells: &[String]| -> io::Result<()> {
        s.clear();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            let pad = std::iter::repeat_n(' ', w.saturating_sub(c.chars().count()));
            if i < 3 {
                s.push_str(c);
                s.extend(pad);
            } else {
                s.extend(pad);
                s.push_str(c);
            }
        }
        writeln!(out, "{}", s.trim_end())
    };
    let head: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    line(out, &head)?;
    for r in rows {
        line(out, r)?;
    }
    Ok(())
}

fn write_kernel_tables(
    dir: &Path,
    k: &blocks::KernelSummary,
    events: &[blocks::KernelEvent],
    format: TableFormat,
) -> Result<()> {
    let ctx = || format!("writing tables into {}", dir.display());
    let events = blocks::kernel_event_rows(events);
    let flows = blocks::flow_process_rows(&k.flow_processes);
    tables::write(dir, "kernel_events", &events, format).with_context(ctx)?;
    tables::write(dir, "kernel_drop_intervals", &k.drop_intervals, format).with_context(ctx)?;
    tables::write(dir, "qp_processes", &k.qp_processes, format).with_context(ctx)?;
    tables::write(dir, "flow_processes", &flows, format).with_context(ctx)?;
    Ok(())
}

/// Kernel events shown in full before the list is cut: the QP and connection events matter, and a busy
/// fabric's MADs would bury them.
const MAX_PRINTED_EVENTS: usize = 50;

fn owner(o: &Option<blocks::QpOwner>) -> String {
    o.as_ref().map_or("-".into(), |o| {
        format!("{}[{}] QP 0x{:06x}", o.comm, o.pid, o.qp_num)
    })
}

fn print_kernel_events(
    out: &mut impl Write,
    k: &blocks::KernelSummary,
    events: &[blocks::KernelEvent],
) -> io::Result<()> {
    writeln!(
        out,
        "\nKernel events (roce-tracer --kernel-events): {} events in {} intervals, {} lost",
        events.len(),
        k.blocks,
        k.lost
    )?;
    let t = &k.tracepoints;
    if !t.attached.is_empty() {
        writeln!(out, "  attached: {}", t.attached.join(", "))?;
    }
    if !t.unavailable.is_empty() {
        writeln!(
            out,
            "  unavailable on the traced host: {}",
            t.unavailable.join(", ")
        )?;
    }
    for (name, n) in &k.events_per_tracepoint {
        writeln!(out, "  {name}: {n}")?;
    }
    if !k.qp_processes.is_empty() {
        writeln!(out, "\nQPs and their processes ({})", k.qp_processes.len())?;
        let rows: Vec<Vec<String>> = k
            .qp_processes
            .iter()
            .map(|q| {
                vec![
                    format!("0x{:06x}", q.qp_num),
                    q.process(),
                    q.local.map_or("-".into(), |a| a.to_string()),
                    q.remote.map_or("-".into(), |a| a.to_string()),
                    q.qp_type.clone().unwrap_or_else(|| "-".into()),
                    q.tracepoint.clone(),
                    ns_to_s(q.seen_ns),
                ]
            })
            .collect();
        table(
            out,
            &["qp", "process", "host", "peer", "type", "seen by", "at"],
            &rows,
        )?;
    }
    if !k.flow_processes.is_empty() {
        writeln!(
            out,
            "\nFlows with their processes ({})",
            k.flow_processes.len()
        )?;
        let rows: Vec<Vec<String>> = k
            .flow_processes
            .iter()
            .map(|f| {
                vec![
                    f.src.to_string(),
                    f.dst.to_string(),
                    format!("0x{:06x}", f.dest_qp),
                    owner(&f.sender),
                    owner(&f.receiver),
                ]
            })
            .collect();
        table(
            out,
            &[
                "src",
                "dst",
                "dest_qp",
                "sender process",
                "receiver process",
            ],
            &rows,
        )?;
    }
    if !events.is_empty() {
        writeln!(
            out,
            "\nEvents{}",
            if events.len() > MAX_PRINTED_EVENTS {
                format!(
                    " (first {MAX_PRINTED_EVENTS} of {}; --json has them all)",
                    events.len()
                )
            } else {
                String::new()
            }
        )?;
        let rows: Vec<Vec<String>> = events
            .iter()
            .take(MAX_PRINTED_EVENTS)
            .map(|e| vec![ns_to_s(e.ts_ns), e.process(), e.summary()])
            .collect();
        table(out, &["at", "process", "event"], &rows)?;
    }
    let busy: Vec<&blocks::DropInterval> =
        k.drop_intervals.iter().filter(|d| d.count > 0).collect();
    if !busy.is_empty() {
        writeln!(out, "\nKernel drops per interval")?;
        let rows: Vec<Vec<String>> = busy
            .iter()
            .map(|d| {
                vec![
                    ns_to_s(d.from_ns),
                    ns_to_s(d.to_ns),
                    d.drops
                        .iter()
                        .map(|x| format!("{}/{} {}", x.protocol, x.reason, x.count))
                        .collect::<Vec<_>>()
                        .join(", "),
                    d.count.to_string(),
                ]
            })
            .collect();
        table(out, &["from", "to", "reasons", "drops"], &rows)?;
    }
    if !k.counts.is_empty() {
        writeln!(out, "\nCounted in the kernel")?;
        let rows: Vec<Vec<String>> = k
            .counts
            .iter()
            .map(|c| {
                vec![
                    c.tracepoint.clone(),
                    c.key.clone(),
                    c.sum_field.clone().unwrap_or_default(),
                    c.events.to_string(),
                    c.sum.to_string(),
                ]
            })
            .collect();
        table(
            out,
            &["tracepoint", "key", "summed", "events", "sum"],
            &rows,
        )?;
    }
    Ok(())
}

fn ns_to_s(ns: u64) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

fn print_stats(out: &mut impl Write, r: &StatsReport) -> io::Result<()> {
    let c = &r.capture;
    writeln!(out, "Capture  {} ({})", c.file, c.format)?;
    let kinds: Vec<String> = c
        .frames_by_kind
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    writeln!(
        out,
        "  frames {} ({}), {} bytes, span {} s, truncated {}",
        c.frames,
        kinds.join(", "),
        c.bytes,
        ns_to_s(c.duration_ns),
        c.truncated_frames
    )?;
    if let Some(n) = c.largest_gap_frame {
        writeln!(
            out,
            "  largest gap {} s, before frame {n}; {} frames stamped earlier than their predecessor",
            ns_to_s(c.largest_gap_ns),
            c.timestamps_backwards
        )?;
    }
    for i in &c.interfaces {
        writeln!(
            out,
            "  interface {} {} {} snaplen {} ts {}{}",
            i.id,
            i.name.as_deref().unwrap_or("-"),
            i.link_type,
            i.snaplen,
            i.ts_resolution,
            match (i.received, i.dropped) {
                (r, Some(d)) => format!(
                    ", recorder dropped {d} of {}",
                    r.map_or("?".into(), |r| r.to_string())
                ),
                _ => String::new(),
            }
        )?;
    }
    writeln!(out, "\nFlows ({})", r.flows.len())?;
    let rows: Vec<Vec<String>> = r
        .flows
        .iter()
        .map(|f| {
            vec![
                f.src.to_string(),
                f.dst.to_string(),
                format!("0x{:06x}", f.dest_qp),
                f.packets.to_string(),
                f.bytes.to_string(),
                f.mean_gbps.map_or("-".into(), |g| format!("{g:.3}")),
                f.ect_packets.to_string(),
                f.ce_packets.to_string(),
                f.psn_gaps.to_string(),
                f.retransmissions.to_string(),
                f.out_of_order.to_string(),
                f.naks.total().to_string(),
                f.icrc_failures.to_string(),
                f.truncated.to_string(),
            ]
        })
        .collect();
    table(
        out,
        &[
            "src", "dst", "dest_qp", "packets", "bytes", "Gb/s", "ECT", "CE", "gaps", "retx",
            "ooo", "NAKs", "ICRC bad", "trunc",
        ],
        &rows,
    )?;
    writeln!(out, "\nCNPs ({} streams)", r.cnps.len())?;
    let rows: Vec<Vec<String>> = r
        .cnps
        .iter()
        .map(|c| {
            vec![
                c.src.to_string(),
                c.dst.to_string(),
                format!("0x{:06x}", c.dest_qp),
                c.count.to_string(),
                ns_to_s(c.first_ns),
                ns_to_s(c.last_ns),
            ]
        })
        .collect();
    table(
        out,
        &["src", "dst", "dest_qp", "count", "first", "last"],
        &rows,
    )?;
    writeln!(out, "\nPFC / PAUSE ({} sources×priorities)", r.pfc.len())?;
    let rows: Vec<Vec<String>> = r
        .pfc
        .iter()
        .map(|p| {
            vec![
                p.src_mac.clone(),
                p.kind.to_string(),
                p.priority.map_or("all".into(), |x| x.to_string()),
                p.frames.to_string(),
                p.xoff.to_string(),
                p.xon.to_string(),
                p.pauses.to_string(),
                p.paused_ns.to_string(),
            ]
        })
        .collect();
    table(
        out,
        &[
            "src_mac",
            "kind",
            "prio",
            "frames",
            "xoff",
            "xon",
            "pauses",
            "paused_ns",
        ],
        &rows,
    )?;
    let moved: Vec<&analyzer::blocks::CounterDelta> = r
        .counters
        .iter()
        .filter(|d| d.delta > 0 || d.reset)
        .collect();
    if !r.counters.is_empty() {
        writeln!(
            out,
            "\nNIC counters sampled by roce-tracer ({} counters, {} moved)",
            r.counters.len(),
            moved.len()
        )?;
        let rows: Vec<Vec<String>> = moved
            .iter()
            .map(|d| {
                vec![
                    d.name.clone(),
                    if d.reset {
                        "reset".into()
                    } else {
                        d.delta.to_string()
                    },
                    d.samples.to_string(),
                ]
            })
            .collect();
        table(out, &["counter", "delta", "samples"], &rows)?;
    }
    if !r.kernel_drops.is_empty() {
        writeln!(out, "\nKernel drops (roce-tracer --kernel-events)")?;
        let rows: Vec<Vec<String>> = r
            .kernel_drops
            .iter()
            .map(|k| {
                vec![
                    k.protocol.clone(),
                    k.reason.clone(),
                    String::new(),
                    k.count.to_string(),
                ]
            })
            .collect();
        table(out, &["protocol", "reason", "", "count"], &rows)?;
    }
    if let Some(e) = &c.error {
        writeln!(out, "\nIncomplete: {e}")?;
    }
    Ok(())
}
