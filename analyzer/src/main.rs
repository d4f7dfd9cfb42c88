//! `roce-analyzer`: offline analysis of RoCEv2 captures.
//!
//! Exit codes: 0 success; 2 an error, including a damaged capture (whose results up to the damage are still
//! printed, followed by a warning that names the byte offset) and a window that took no frame. A closed pipe
//! (`| head`) on standard output ends quietly with 0; a closed standard error loses its notes and warnings,
//! never the results or the exit code (every line for it goes through [`say`]).

mod args;

use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use analyzer::analysis::dcqcn::{self, FlowId, OnEvent, Options};
use analyzer::analysis::fabric;
use analyzer::analysis::findings::Severity;
use analyzer::analysis::hops::{self as hops_analysis, HopsOptions};
use analyzer::analysis::model_log::{self, ModelLog};
use analyzer::analysis::{self as pipeline, PipelineOptions};
use analyzer::output::annotate as annotation;
use analyzer::output::dataset;
use analyzer::output::fabric::print_fabric;
use analyzer::output::hops::print_hops;
use analyzer::output::lines::{self, Style};
use analyzer::output::report::export::{self, write_kernel_tables};
use analyzer::output::report::manifest;
use analyzer::output::report::{Progress, ReportInput, headline, write_report_with};
use analyzer::output::tables::{self, TableFormat};
use analyzer::output::text::{print_dcqcn, print_kernel_events, print_stats};
use anyhow::{Context, Result};
use args::{
    AnnotateArgs, Cli, Command, DcqcnArgs, DecodeArgs, FabricArgs, HopsArgs, Input, ModelArgs,
    ReportArgs, StatsArgs, Threads,
};
use clap::Parser;
use roce_capture::{Capture, inputs};
use roce_core::dcqcn::{EcnConfig, Event, Profile};
use roce_core::decode::Decoder;
use roce_core::filter::Filter;
use roce_core::frames::Frames;
use roce_core::line::LineRates;
use roce_core::passes::brief::Brief;
use roce_core::passes::pairing::{Pairing, PairingPass};
use roce_core::passes::threads::stats_on_threads;
use roce_core::passes::{Stats, StatsReport};
use roce_core::processes;
use roce_core::recorded::{KernelEvent, Recorded};
use roce_core::text::escape_control as escape;

/// mimalloc rather than glibc's malloc. The report's steps after the read allocate on every thread of the
/// pool at once (tables, charts, models); glibc either gives each thread an arena of its own, whose free
/// memory serves no other (peak RSS 106 → 162 MB on the bench capture), or, held to one arena, makes them
/// queue on its lock (the tables took as long on two cores as on one). mimalloc keeps free lists per
/// thread: on two cores `report` took 1.0 to 1.25 s where one arena took 1.2 to 1.5 s, at a peak of 118
/// MB (BENCHMARKS.md). Built without transparent huge pages (Cargo.toml), which it would otherwise ask for
/// on every block it maps, each resident whole once touched.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay`: its place in the `mi_option_e` enum of the mimalloc 3 that
/// libmimalloc-sys builds, which names no constant for it; a test checks that it is that option.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed memory goes back to the system at once rather than after mimalloc's delay (a second in mimalloc
/// 3): the peak RSS of `stats` on the bench capture was 41 MB with the delay and 26 MB without it (glibc:
/// 21). Read each time mimalloc purges, so setting it first thing in `main` is in time.
fn return_freed_memory_at_once() {
    // SAFETY: setting an option is allowed at any time.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
    }
}

fn main() -> ExitCode {
    return_freed_memory_at_once();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(a) => decode(a),
        Command::Stats(a) => stats(a),
        Command::Dcqcn(a) => dcqcn(a),
        Command::Report(a) => on_threads(threads(&a.threads), || report(a)),
        Command::Hops(a) => hops(a),
        Command::Fabric(a) => fabric(a),
        Command::Annotate(a) => on_threads(threads(&a.threads), || annotate(a)),
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
fn threads(given: &Threads) -> usize {
    let given = given.threads;
    given.map_or_else(
        || std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        |n| n as usize,
    )
}

/// Runs `work` in a pool of `n` threads, so that the steps after the read that spread over threads (the
/// models of the flows, the report's tables and charts) take the threads `--threads` allows and no more; on
/// this thread when no pool can be had. The pool's threads get the main thread's stack size.
fn on_threads<T: Send>(n: usize, work: impl FnOnce() -> T + Send) -> T {
    match rayon::ThreadPoolBuilder::new()
        .num_threads(n.max(1))
        .stack_size(8 << 20)
        .thread_name(|i| format!("work-{i}"))
        .build()
    {
        Ok(pool) => pool.install(work),
        Err(_) => work(),
    }
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
    let report = hops_analysis::run_on(&mut capture, decoder(&a.input), opts, threads(&a.threads));
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

fn fabric(a: FabricArgs) -> Result<ExitCode> {
    let mut capture = open(&a.input)?;
    let progress = Progress::new(capture.progress().1, "reading");
    let report = fabric::read(
        &mut capture,
        decoder(&a.input),
        threads(&a.threads),
        LineRates::flag(a.tables.link_speed),
        a.tables.dscp_map.unwrap_or_default(),
        |at| progress.set_position(at),
    );
    progress.finish();
    capture.check_window()?;
    let mut out = BufWriter::new(io::stdout().lock());
    if a.json {
        analyzer::output::json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_fabric(&mut out, &report)?;
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
    let style = if a.json { Style::Json } else { Style::Text };
    lines::write(
        &mut capture,
        decoder(&a.input),
        filter.as_ref(),
        style,
        threads(&a.threads),
        a.count,
        &mut out,
    )?;
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
    let mut writer = dataset::DatasetWriter::create(&dir, layout, threads(&a.threads))?;
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

fn stats(a: StatsArgs) -> Result<ExitCode> {
    let mut capture = open(&a.input)?;
    let make = || {
        Stats::new(LineRates::flag(a.tables.link_speed))
            .with_priorities(a.tables.dscp_map.clone().unwrap_or_default())
    };
    let stats = stats_on_threads(&mut capture, decoder(&a.input), threads(&a.threads), make);
    capture.check_window()?;
    let recorded = Recorded::of(&capture);
    let report = stats.finish(&capture, &recorded);
    // Kernel events (`roce-tracer --kernel-events`) name the processes behind QPs. A flow's sending QP is
    // not in its packets: it comes from pairing the flow with its other direction, which `stats` does in a
    // second read only when there are events to label with (the pass would slow every plain run). Standard
    // input cannot be read twice: there the only flow coming back, if it is the only one, stands in.
    let kernel = &recorded.kernel_events;
    let kernel_summary = if kernel.is_empty() {
        None
    } else {
        let pairing = if a.input.files.iter().any(|f| f == Path::new("-")) {
            None
        } else {
            Some(pair_flows(&a.input)?)
        };
        Some(processes::KernelSummary::of(kernel, &report.flows, &|f| {
            let key = f.key();
            pairing
                .as_ref()
                .and_then(|p| p.sender_qp(&key))
                .map(|(q, method)| (q, method.key().to_string()))
                .or_else(|| {
                    processes::reverse_flow_qp(&report.flows, f)
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
        analyzer::output::nic::print(&mut out, &report.nic_counters)?;
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
    frames.for_each(|f| pass.frame(&Brief::of(f)));
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
    summary: &'a processes::KernelSummary,
    events: &'a [KernelEvent],
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
    let opts = PipelineOptions {
        decoder: decoder(&a.input),
        dcqcn: model_options(&a.model)?,
        storm_threshold_ns: a.storm_threshold,
        hops: HopsOptions {
            switch_ecn: a.switch_ecn,
            link_bps: a.model.link_speed,
            ..HopsOptions::default()
        },
        threads: threads(&a.threads),
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
    // Only a log takes the events; without one the models are free to run over the threads.
    let mut to_log = log
        .as_mut()
        .map(|l| move |id: &FlowId, e: &Event| l.push(id, e));
    let analysis = pipeline::run_with_model_events(
        &mut capture,
        &opts,
        |pos| progress.set_position(pos),
        to_log.as_mut().map(|f| f as OnEvent<'_>),
    )?;
    progress.finish();
    capture.check_window()?;
    let input = ReportInput {
        stats: &analysis.stats,
        dcqcn: &analysis.dcqcn,
        pauses: &analysis.pauses,
        findings: &analysis.findings,
        hops: analysis.hops.as_ref(),
        fabric: &analysis.fabric,
    };
    let files = write_report_with(&a.out, &input, &analysis.recorded.kernel_events)
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
    let opts = PipelineOptions {
        decoder: decoder(&a.input),
        dcqcn: model_options(&a.model)?,
        storm_threshold_ns: a.storm_threshold,
        threads: threads(&a.threads),
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
        Some(&mut |id, e| models.event(id, e)),
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
    let n = threads(&a.threads);
    on_threads(n, || dcqcn_on(a, n))
}

/// `dcqcn` in a pool of `threads` (the flows' models spread over it after the read).
fn dcqcn_on(a: DcqcnArgs, threads: usize) -> Result<ExitCode> {
    let opts = model_options(&a.model)?;
    let mut capture = open(&a.input)?;
    let progress = Progress::new(capture.progress().1, "reading");
    let (pass, pauses) = dcqcn::read(&mut capture, decoder(&a.input), threads, &opts, |at| {
        progress.set_position(at)
    });
    progress.finish();
    capture.check_window()?;
    let mut opts = opts;
    opts.apply_recorded_knobs(&Recorded::of(&capture));
    opts.learn_taps(capture.taps());
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
    let nic = roce_core::nic_counters::check::table_rows(&r.nic_counters);
    tables::write(dir, "nic_counters", &nic, format).with_context(ctx)?;
    tables::write(dir, "kernel_drops", &r.kernel_drops, format).with_context(ctx)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option set at start is mimalloc's purge delay: in mimalloc 3 it alone defaults to 1000 ms, its
    /// neighbours to 1 and 0, so a mimalloc whose options moved fails here rather than have another set.
    #[test]
    fn the_option_set_at_start_is_the_purge_delay() {
        // SAFETY: reading an option is allowed at any time.
        let get = |o| unsafe { libmimalloc_sys::mi_option_get(o) };
        assert_eq!(
            get(MI_OPTION_PURGE_DELAY),
            1000,
            "option {MI_OPTION_PURGE_DELAY}"
        );
        assert_eq!(get(MI_OPTION_PURGE_DELAY - 1), 1);
        assert_eq!(get(MI_OPTION_PURGE_DELAY + 1), 0);
        return_freed_memory_at_once();
        assert_eq!(get(MI_OPTION_PURGE_DELAY), 0);
    }
}
