//! The command line of `roce-analyzer`: each command's arguments as clap reads them, their help text (the
//! reference a user sees first) and the parsers of the values that are not plain numbers. `main.rs` runs them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use roce_capture::Bound;
use roce_core::priority::PriorityMap;
use roce_core::units;

/// Decode and analyse RoCEv2 captures: BTH and extension headers, ECN, CNPs, PFC/PAUSE, per-QP statistics.
#[derive(Debug, Parser)]
#[command(name = "roce-analyzer", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
    /// The hosts side by side: each host pair's rate, CE, CNPs, losses and pauses, and the slow pairs with why.
    Fabric(FabricArgs),
    /// The capture written back as one pcapng file with the analysis in packet comments, for Wireshark.
    Annotate(AnnotateArgs),
}

#[derive(Debug, Args)]
pub(crate) struct FabricArgs {
    #[command(flatten)]
    pub(crate) input: Input,
    #[command(flatten)]
    pub(crate) threads: Threads,
    #[command(flatten)]
    pub(crate) tables: TableArgs,
    /// One JSON document with the keys hosts, pairs, slowest (see docs/fabric.md).
    #[arg(long)]
    pub(crate) json: bool,
}

/// How the per-tap tables of `stats` and `fabric` turn pause quanta into time and give untagged frames a
/// priority.
#[derive(Debug, Args)]
pub(crate) struct TableArgs {
    /// Line rate of every tap, which converts PFC/PAUSE quanta into time (512 bit times each). By default
    /// each tap's own, as the capture recorded it (pcapng if_speed), else 100 Gb/s assumed. A number alone is
    /// Gb/s (25); or 25G, 400Gbps, 100000M.
    #[arg(long, value_name = "SPEED", value_parser = units::parse_speed)]
    pub(crate) link_speed: Option<u64>,
    /// DSCP → priority entries for untagged frames (e.g. 26=3,48=6), on top of the map the tracer recorded
    /// in the capture, else of DSCP/8; they win over both. See docs/priority.md.
    #[arg(long, value_name = "DSCP=PRIO,...", value_parser = parse_dscp_map)]
    pub(crate) dscp_map: Option<PriorityMap>,
}

#[derive(Debug, Args)]
pub(crate) struct AnnotateArgs {
    #[command(flatten)]
    pub(crate) input: Input,
    #[command(flatten)]
    pub(crate) threads: Threads,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// The pcapng file to write (replaced if it exists; never one of the inputs).
    #[arg(short = 'o', long = "out", value_name = "OUT.pcapng")]
    pub(crate) out: PathBuf,
    /// A pause at least this long without a break is a PFC storm (as for `report`).
    #[arg(long, default_value = "500us", value_parser = units::parse_positive_ns)]
    pub(crate) storm_threshold: u64,
}

#[derive(Debug, Args)]
pub(crate) struct HopsArgs {
    #[command(flatten)]
    pub(crate) input: Input,
    #[command(flatten)]
    pub(crate) threads: Threads,
    /// Drain rate of every queue, and the rate that takes each frame's serialization out of its delay. By
    /// default each downstream tap's line rate as the capture recorded it (pcapng if_speed); where none is
    /// recorded, the drain rate is measured from back-to-back frames. A number alone is Gb/s (25).
    #[arg(long, value_name = "SPEED", value_parser = units::parse_speed)]
    pub(crate) link_speed: Option<u64>,
    /// Copies of one packet are matched within this time of the first: more than the largest delay between
    /// taps plus the largest clock offset between files.
    #[arg(long, default_value = "10ms", value_parser = units::parse_positive_ns)]
    pub(crate) match_window: u64,
    /// Each hop's least delay is taken per window this long (some packet in each should find the queue
    /// empty); the drift between two files' clocks is followed from window to window.
    #[arg(long, default_value = "10ms", value_parser = units::parse_positive_ns)]
    pub(crate) clock_window: u64,
    /// Largest drift between two clocks to believe, in ppm; a steeper rise of the least delay is a queue.
    #[arg(long, default_value_t = 100.0)]
    pub(crate) max_drift_ppm: f64,
    /// The receivers' min_time_between_cnps, for the NP check.
    #[arg(long, default_value = "4us", value_parser = units::parse_positive_ns)]
    pub(crate) np_min_gap: u64,
    /// Width of the queue-depth bins of the marking curve, in bytes.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(64..))]
    pub(crate) bin_bytes: u64,
    /// The switch's configured marking curve, KMIN,KMAX in bytes and PMAX (e.g. 40000,160000,0.5): a
    /// finding when the fitted curve disagrees.
    #[arg(long, value_name = "KMIN,KMAX,PMAX", value_parser = parse_switch_ecn)]
    pub(crate) switch_ecn: Option<(f64, f64, f64)>,
    /// One JSON document with the keys taps, hops, queues, np, findings (see docs/hops.md).
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn parse_switch_ecn(s: &str) -> Result<(f64, f64, f64), String> {
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
pub(crate) struct DcqcnArgs {
    #[command(flatten)]
    pub(crate) input: Input,
    #[command(flatten)]
    pub(crate) threads: Threads,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// JSON with a `flows` list (fields in docs/dcqcn.md).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    #[command(flatten)]
    pub(crate) input: Input,
    #[command(flatten)]
    pub(crate) threads: Threads,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// Directory for index.html, the PNG charts, summary.json and the tables (created if missing).
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    pub(crate) out: PathBuf,
    /// A pause at least this long without a break is a PFC storm (PFC watchdogs act after hundreds of ms
    /// on production fabrics; the default suits captures of a few ms).
    #[arg(long, default_value = "500us", value_parser = units::parse_positive_ns)]
    pub(crate) storm_threshold: u64,
    /// The switches' configured marking curve, KMIN,KMAX in bytes and PMAX, for the queue section (a finding
    /// when the curve fitted from captures of both sides of a switch disagrees).
    #[arg(long, value_name = "KMIN,KMAX,PMAX", value_parser = parse_switch_ecn)]
    pub(crate) switch_ecn: Option<(f64, f64, f64)>,
    /// Also write model_events.parquet: every event of every flow's DCQCN model (model.parquet holds the
    /// decimated series the charts draw). Written to disk as the model runs.
    #[arg(long)]
    pub(crate) model_table: bool,
}

/// How the reaction-point model runs (shared by `dcqcn` and `report`).
#[derive(Debug, Args)]
pub(crate) struct ModelArgs {
    /// DSCP → priority entries for untagged frames (e.g. 26=3,48=6), on top of the map the tracer recorded
    /// in the capture, else of DSCP/8; they win over both. See docs/priority.md.
    #[arg(long, value_name = "DSCP=PRIO,...", value_parser = parse_dscp_map)]
    pub(crate) dscp_map: Option<PriorityMap>,
    /// Line rate of every tap: each flow's model starts at it and never exceeds it, and it converts pause
    /// quanta to time. By default each tap's own, as the capture recorded it (pcapng if_speed), else 100 Gb/s
    /// assumed, which the output then says. A number alone is Gb/s (25); or 25G, 400Gbps, 100000M.
    #[arg(long, value_name = "SPEED", value_parser = units::parse_speed)]
    pub(crate) link_speed: Option<u64>,
    /// Reaction-point model: connectx (firmware knobs), connectx-fixed (the same with the NIC's 10-bit
    /// integer alpha) or paper (SIGCOMM 2015).
    #[arg(long, default_value = "connectx")]
    pub(crate) dcqcn_profile: String,
    /// File of knob values (`name=value` lines: the tracer's recorded `roce_rp/NAME`, `roce_np/NAME` and
    /// `enable/N` paths, bare names, or the model's options; see docs/dcqcn.md).
    #[arg(long, value_name = "FILE")]
    pub(crate) knobs: Option<PathBuf>,
    /// Override one knob, e.g. `--set rpg_gd=10` or `--set roce_rp/enable/3=0` (repeatable; applied after
    /// --knobs).
    #[arg(long = "set", value_name = "KNOB=VALUE")]
    pub(crate) set: Vec<String>,
    /// Rate bin width (e.g. 10us); by default chosen from the capture span.
    #[arg(long, value_parser = units::parse_positive_ns)]
    pub(crate) bin: Option<u64>,
    /// Shift CNP times by this one-way delay before the model sees them (e.g. 2us), when the capture was
    /// not taken at the sender.
    #[arg(long, default_value = "0ns", value_parser = units::parse_duration_ns, allow_hyphen_values = true)]
    pub(crate) cnp_delay: i64,
    /// Skip the knob fit.
    #[arg(long)]
    pub(crate) no_fit: bool,
    /// Fit the knobs of this many flows, those with the most CNPs.
    #[arg(long, value_name = "N", default_value_t = analyzer::analysis::dcqcn::DEFAULT_FIT_FLOWS)]
    pub(crate) fit_flows: usize,
}

#[derive(Debug, Args)]
pub(crate) struct Input {
    /// Capture files (pcap or pcapng, plain or gzip/zstd/lz4), directories of them, quoted patterns such as
    /// 'run.*.pcapng', or `-` for standard input. Several are merged by time; each interface of each file
    /// is a tap named FILE:IFACE (a rotated set continues its first file's taps).
    #[arg(required = true, value_name = "FILE")]
    pub(crate) files: Vec<PathBuf>,
    /// Only frames from this time on: `+12.5s` after the first frame, or seconds since the epoch.
    #[arg(long, value_name = "TIME", value_parser = units::parse_time, allow_hyphen_values = true)]
    pub(crate) from: Option<Bound>,
    /// Only frames before this time (same forms as --from).
    #[arg(long, value_name = "TIME", value_parser = units::parse_time, allow_hyphen_values = true)]
    pub(crate) to: Option<Bound>,
    /// Also treat this UDP destination port as RoCEv2 (besides 4791).
    #[arg(long, value_name = "PORT")]
    pub(crate) roce_port: Option<u16>,
    /// Skip the ICRC check (it costs a CRC over every complete frame).
    #[arg(long)]
    pub(crate) no_icrc: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DecodeArgs {
    #[command(flatten)]
    pub(crate) input: Input,
    #[command(flatten)]
    pub(crate) threads: Threads,
    /// JSON lines, one object per frame, with the fields documented in docs/decode.md.
    #[arg(long)]
    pub(crate) json: bool,
    /// Only frames matching this expression, e.g. `cnp or (roce and ecn == ce and qp == 0x118)`.
    /// Fields: kind qp src dst ip opcode psn ecn dscp vlan pcp sport icrc; see docs/decode.md.
    #[arg(long, short = 'Y', value_name = "EXPR")]
    pub(crate) filter: Option<String>,
    /// Stop after this many printed frames.
    #[arg(short = 'c', value_name = "N")]
    pub(crate) count: Option<u64>,
    /// Write the frames as a Parquet dataset (part-NNNNN.parquet files) into DIR instead of printing them;
    /// the columns are listed in docs/spark.md.
    #[arg(long, value_name = "DIR", conflicts_with = "json")]
    pub(crate) parquet: Option<PathBuf>,
    /// With --parquet: write into DIR/collector=NAME/, so that the datasets of several collectors sit side by
    /// side as one dataset partitioned by collector.
    #[arg(long, value_name = "NAME", requires = "parquet", value_parser = collector_name)]
    pub(crate) collector: Option<String>,
    /// With --parquet: rows at most per row group. By default a group closes at 128 MiB encoded (several
    /// million frames, Spark's block size); the encoded group is held in memory until it is written.
    #[arg(long, value_name = "N", requires = "parquet")]
    pub(crate) row_group_rows: Option<usize>,
}

/// A collector name becomes a directory name and a partition value: no separators, nothing Hive would escape.
pub(crate) fn collector_name(s: &str) -> Result<String, String> {
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
pub(crate) struct StatsArgs {
    #[command(flatten)]
    pub(crate) input: Input,
    #[command(flatten)]
    pub(crate) threads: Threads,
    #[command(flatten)]
    pub(crate) tables: TableArgs,
    /// One JSON document with the keys capture, flows, cnps, pfc.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also write the tables as CSV files into this directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) csv: Option<PathBuf>,
    /// Also write the tables as Parquet files into this directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) parquet: Option<PathBuf>,
}

/// How many threads a command's read runs on.
#[derive(Debug, Args)]
pub(crate) struct Threads {
    /// Threads the command works on; the output is the same bytes whatever their number. stats shares the
    /// flows among them, besides the thread that reads; report and annotate give the DCQCN and hosts passes
    /// a thread of their own and, from three threads on, share the flows among the rest, then run the
    /// flows' models and write the report's tables and charts over them (docs/report.md); dcqcn and fabric
    /// read as report does (dcqcn then runs the flows' models over them); decode makes its lines on them
    /// (without -c) and writes them in order; hops decodes on all but one and matches on that
    /// one, decode --parquet encodes on one. By default as many as the cores this process may
    /// use; 1 works on one thread.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) threads: Option<u32>,
}

pub(crate) fn parse_dscp_map(s: &str) -> Result<PriorityMap, String> {
    PriorityMap::parse(s).map_err(|e| e.to_string())
}
