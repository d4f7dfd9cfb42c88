"""rocetrace on Apache Spark: a fabric's per-frame datasets in, the tables of `roce-analyzer stats` out.

Run as

    spark-submit spark/rocetrace_job.py DATASET_DIR OUT_DIR [--link-speed 100G]

DATASET_DIR holds what `roce-analyzer decode --parquet DATASET_DIR --collector NAME FILE...` wrote on each
collector (copied or written straight to HDFS or S3): a Hive-style layout, one `collector=NAME/` directory
per collector. OUT_DIR receives one Parquet directory per table:

- flows:  per tap and (src, dst, dest_qp), as the flows table of `stats`
- cnps:   CNP streams per tap and (src, dst, dest_qp), as the cnps table of `stats`
- pfc:    PFC/PAUSE per tap, source MAC and priority, with the pause time, as the pfc table of `stats`
- hops:   the same packet seen at two collectors, per pair of collectors and direction of traffic (src, dst):
          matched packets and the delay between the sightings

The definitions, and why each one is what it is, are in docs/spark.md. Only PySpark's own API is used (no
pandas or pyarrow), so `pip install pyspark` and a Java runtime are all a machine needs.
"""

import argparse
import re
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

# The dataset schema this job reads: `decode --parquet` writes it in the schema_version column.
SCHEMA_VERSION = 1

# 802.3 pause quanta are 512 bit times each.
BITS_PER_QUANTUM = 512

# What makes two sightings the same packet: its flow, its place in the flow, and what it carries. The tap
# is not part of it, since the point is to find the packet at another place.
HOP_KEY = ["src", "dst", "dest_qp", "psn", "opcode", "payload_len"]

ECN_CE = 3

NAK_CODES = [
    (0, "psn_sequence_error"),
    (1, "invalid_request"),
    (2, "remote_access_error"),
    (3, "remote_operational_error"),
    (4, "invalid_rd_request"),
]


def parse_speed(text):
    """Bits per second from `100G`, `25g`, `400Gbps`, `1e11`: the forms `roce-analyzer --link-speed` takes."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([kKmMgGtT]?)(?:bps|b/s)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a speed such as 100G")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2).lower()]
    bps = int(round(float(m.group(1)) * scale))
    if bps <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the speed must be positive")
    return bps


def count_where(cond):
    """How many rows of the group satisfy `cond` (a null condition counts as false)."""
    return F.sum(F.when(cond, 1).otherwise(0)).cast("long")


def read_frames(spark, dataset):
    """The frames of every collector, with `collector` from the directory names (null for a dataset written
    without --collector)."""
    frames = spark.read.option("basePath", dataset).parquet(dataset)
    if "collector" not in frames.columns:
        frames = frames.withColumn("collector", F.lit(None).cast("string"))
    return frames


def check_schema(frames):
    """Refuses datasets of another schema version, and returns the last timestamp over all frames (the end of
    the merged capture, where pauses still running are cut, as `stats` cuts them)."""
    row = frames.agg(
        F.min("schema_version").alias("lo"),
        F.max("schema_version").alias("hi"),
        F.max("time_ns").alias("end_ns"),
    ).first()
    if row["lo"] is not None and (row["lo"] != SCHEMA_VERSION or row["hi"] != SCHEMA_VERSION):
        sys.exit(
            f"rocetrace_job: the dataset has schema versions {row['lo']}..{row['hi']}; this job reads "
            f"version {SCHEMA_VERSION} (rewrite the datasets with the matching roce-analyzer, or use its job)"
        )
    return row["end_ns"] or 0


# IBTA's operation names by operation code (the BTH opcode's low five bits), and the transports by the high
# three: the names `stats` gives each opcode it counts (TRANSPORT_OPERATION, CNP, or UNKNOWN).
OPERATIONS = [
    "SEND_FIRST", "SEND_MIDDLE", "SEND_LAST", "SEND_LAST_WITH_IMMEDIATE", "SEND_ONLY",
    "SEND_ONLY_WITH_IMMEDIATE", "RDMA_WRITE_FIRST", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_LAST",
    "RDMA_WRITE_LAST_WITH_IMMEDIATE", "RDMA_WRITE_ONLY", "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
    "RDMA_READ_REQUEST", "RDMA_READ_RESPONSE_FIRST", "RDMA_READ_RESPONSE_MIDDLE",
    "RDMA_READ_RESPONSE_LAST", "RDMA_READ_RESPONSE_ONLY", "ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE",
    "COMPARE_SWAP", "FETCH_ADD", "RESYNC", "SEND_LAST_WITH_INVALIDATE", "SEND_ONLY_WITH_INVALIDATE",
]
TRANSPORTS = {0: "RC", 1: "UC", 2: "RD", 3: "UD", 5: "XRC"}
CNP_OPCODE = 0x81


def opcode_name(code):
    """The name of a BTH opcode, UNKNOWN for one IBTA leaves undefined (each transport defines a subset of
    the operations: UC has no reads or atomics, UD only SEND_ONLY with or without immediate, RESYNC is RD's
    alone, the invalidating sends RC's and XRC's)."""
    if code == CNP_OPCODE:
        return "CNP"
    transport, op = code >> 5, code & 0x1F
    if transport in (0, 5):
        defined = op <= 0x14 or op in (0x16, 0x17)
    elif transport == 1:
        defined = op <= 0x0B
    elif transport == 2:
        defined = op <= 0x15
    elif transport == 3:
        defined = op in (0x04, 0x05)
    else:
        defined = False
    return f"{TRANSPORTS[transport]}_{OPERATIONS[op]}" if defined else "UNKNOWN"


def opcode_names():
    """Every opcode's name as a literal map column (built once a session is up, as columns need one)."""
    return F.create_map(*[x for code in range(256) for x in (F.lit(code), F.lit(opcode_name(code)))])

FLOW_KEY = ["collector", "tap", "src", "dst", "dest_qp"]


def last_by_frame(col):
    """The value of the group's last frame: `frame` numbers a collector's frames in its merged order, and a
    tap belongs to one collector, so this is what `stats` keeps as the flow's last value."""
    return F.max_by(col, "frame")


# PSNs are 24-bit and wrap; the tracker remembers at most MAX_HOLES holes per flow (older ones are counted as
# never seen); a READ REQUEST reserves one PSN per response packet, which depends on the path MTU.
PSN_MOD = 1 << 24
MAX_HOLES = 64
PMTUS = (256, 512, 1024, 2048, 4096)
RESPONSE_OPERATIONS = (0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12)
READ_REQUEST = 0x0C
READ_RESPONSES = (0x0D, 0x0E, 0x0F, 0x10)


def tracks_psn(code):
    """Whether `stats` feeds a packet of this opcode to its PSN tracker: requests (sends, writes, read
    requests, atomics, RESYNC) and read responses, of defined opcodes other than CNP."""
    if opcode_name(code) in ("UNKNOWN", "CNP"):
        return False
    op = code & 0x1F
    return op not in RESPONSE_OPERATIONS or op in READ_RESPONSES


def psn_diff(a, b):
    """Signed distance from b to a in 24-bit PSN space, in [-2^23, 2^23)."""
    d = (a - b) % PSN_MOD
    return d - PSN_MOD if d >= PSN_MOD // 2 else d


def after_read(span_psn, span_len, seen):
    """The PSN that follows a READ REQUEST, given the PSN that came next: the span some PMTU explains, else the
    largest span not beyond what was seen (the smallest gap), else the shortest span."""
    d = psn_diff(seen, span_psn)
    spans = [max(-(-span_len // m), 1) for m in PMTUS]
    if d > 0 and d in spans:
        return seen
    fitting = [n for n in spans if n <= d]
    return (span_psn + (max(fitting) if fitting else spans[-1])) % PSN_MOD


def psn_counts(events):
    """`stats`' PSN analysis of one flow: `events` are (frame, psn, opcode, reth_len) of its packets. A PSN
    past the one expected leaves a hole; a PSN below it fills a hole (out of order) or was carried before
    (a retransmission); holes still open at the end are PSNs never seen. Returns (psn_gaps, retransmissions,
    out_of_order)."""
    expected = None
    read = None
    holes = []
    forgotten = retransmissions = out_of_order = 0

    def advance(psn, opcode, reth_len):
        nonlocal expected, read
        if opcode & 0x1F == READ_REQUEST:
            read = (psn, reth_len or 0)
        expected = (psn + 1) % PSN_MOD

    for _, psn, opcode, reth_len in sorted(events):
        if expected is None:
            advance(psn, opcode, reth_len)
            continue
        if read is not None:
            expected = after_read(read[0], read[1], psn)
            read = None
        d = psn_diff(psn, expected)
        if d == 0:
            advance(psn, opcode, reth_len)
        elif d > 0:
            if len(holes) == MAX_HOLES:
                forgotten += holes.pop(0)[1]
            holes.append((expected, d))
            advance(psn, opcode, reth_len)
        else:
            hit = next(
                (i for i, (first, n) in enumerate(holes) if 0 <= psn_diff(psn, first) < n), None
            )
            if hit is None:
                retransmissions += 1
                continue
            out_of_order += 1
            first, n = holes.pop(hit)
            k = psn_diff(psn, first)
            parts = [(first, k), ((psn + 1) % PSN_MOD, n - k - 1)]
            holes[hit:hit] = [part for part in parts if part[1] > 0]
    return forgotten + sum(n for _, n in holes), retransmissions, out_of_order


PSN_SCHEMA = T.StructType(
    [T.StructField(f"_{k}", t) for k, t in [
        ("collector", T.StringType()),
        ("tap", T.StringType()),
        ("src", T.StringType()),
        ("dst", T.StringType()),
        ("dest_qp", T.IntegerType()),
    ]]
    + [
        T.StructField("psn_gaps", T.LongType()),
        T.StructField("retransmissions", T.LongType()),
        T.StructField("out_of_order", T.LongType()),
    ]
)


def psn_table(spark, roce):
    """Per flow, the PSN analysis: it depends on the order of each flow's packets, so each flow is folded in
    frame order by one task (in Python, as the pause accounting is)."""
    tracked = [code for code in range(256) if tracks_psn(code)]
    rows = (
        roce.where(F.col("opcode").isin(tracked))
        .select(*FLOW_KEY, "frame", "psn", "opcode", "reth_len")
        .rdd.map(lambda r: (tuple(r[k] for k in FLOW_KEY), (r["frame"], r["psn"], r["opcode"], r["reth_len"])))
        .groupByKey()
        .map(lambda kv: (*kv[0], *psn_counts(kv[1])))
    )
    return spark.createDataFrame(rows, PSN_SCHEMA)


def join_on_flow(left, right):
    """`left` with `right`'s columns, matched on the flow key (`right` names it `_collector`, `_tap`, ...),
    null-safely since `collector` is null for a dataset written without --collector."""
    return left.join(
        right, on=[left[k].eqNullSafe(right[f"_{k}"]) for k in FLOW_KEY], how="left"
    ).drop(*[f"_{k}" for k in FLOW_KEY])


def flows_table(spark, frames):
    """Per-flow statistics: RoCE data frames (not CNPs) with an IP header and a BTH, counted per tap."""
    roce = frames.where(
        (F.col("kind") == "roce") & F.col("src").isNotNull() & F.col("opcode").isNotNull()
    )
    is_nak = (F.col("aeth_syndrome").bitwiseAND(0xE0) == 0x60)
    nak_code = F.col("aeth_syndrome").bitwiseAND(0x1F)
    naks = [count_where(is_nak & (nak_code == code)).alias(f"naks_{name}") for code, name in NAK_CODES]
    naks.append(count_where(is_nak & (nak_code > 4)).alias("naks_reserved"))
    naks.append(count_where(F.col("aeth_syndrome").bitwiseAND(0xE0) == 0x20).alias("naks_rnr"))
    flows = roce.groupBy(*FLOW_KEY).agg(
        F.count(F.lit(1)).alias("packets"),
        F.sum("len").cast("long").alias("bytes"),
        F.min("time_ns").alias("first_ns"),
        F.max("time_ns").alias("last_ns"),
        count_where(F.col("ecn").isin(1, 2)).alias("ect_packets"),
        count_where(F.col("ecn") == ECN_CE).alias("ce_packets"),
        count_where(F.col("icrc_ok") == F.lit(False)).alias("icrc_failures"),
        count_where(F.col("caplen") < F.col("len")).alias("truncated"),
        last_by_frame("pcp").alias("pcp"),
        last_by_frame("dscp").alias("dscp"),
        *naks,
    )
    # Packets per opcode name, as the JSON object `stats --json` prints ({"RC_SEND_FIRST": 12, ...}, names in
    # order): counted apart (a flow uses few opcodes) and joined on the flow's key. Text rather than a map column, so that
    # readers without nested types (polars built lean, CSV exports) read it too; Spark gets the map back with
    # from_json(opcodes, 'map<string,bigint>').
    per_opcode = roce.groupBy(*FLOW_KEY, opcode_names()[F.col("opcode")].alias("name")).count()
    opcodes = per_opcode.groupBy(*[F.col(k).alias(f"_{k}") for k in FLOW_KEY]).agg(
        F.to_json(F.map_from_entries(F.array_sort(F.collect_list(F.struct("name", "count"))))).alias(
            "opcodes"
        )
    )
    flows = join_on_flow(join_on_flow(flows, opcodes), psn_table(spark, roce))
    # A flow without requests or read responses (an ACK stream) has nothing for the PSN tracker.
    flows = flows.fillna(0, subset=["psn_gaps", "retransmissions", "out_of_order"])
    span = F.col("last_ns") - F.col("first_ns")
    return flows.withColumn(
        "mean_gbps", F.when(span > 0, F.col("bytes") * 8.0 / span)
    )


def cnps_table(frames):
    """CNP streams: CNPs with an IP header and a BTH, per tap and (src, dst, dest_qp)."""
    cnps = frames.where(
        (F.col("kind") == "cnp") & F.col("src").isNotNull() & F.col("opcode").isNotNull()
    )
    return cnps.groupBy("collector", "tap", "src", "dst", "dest_qp").agg(
        F.count(F.lit(1)).alias("count"),
        F.min("time_ns").alias("first_ns"),
        F.max("time_ns").alias("last_ns"),
        last_by_frame("pcp").alias("pcp"),
        last_by_frame("dscp").alias("dscp"),
    )


PFC_SCHEMA = T.StructType(
    [
        T.StructField("collector", T.StringType()),
        T.StructField("tap", T.StringType()),
        T.StructField("src_mac", T.StringType()),
        T.StructField("kind", T.StringType()),
        T.StructField("priority", T.IntegerType()),
        T.StructField("frames", T.LongType()),
        T.StructField("xoff", T.LongType()),
        T.StructField("xon", T.LongType()),
        T.StructField("pauses", T.LongType()),
        T.StructField("paused_ns", T.LongType()),
    ]
)


def pause_events(row):
    """One (key, event) per priority a PFC frame names (its class-enable bit set), or one for a PAUSE frame
    (priority None: it stops the whole link)."""
    mac = row["src_mac"] or "00:00:00:00:00:00"
    event = lambda quanta: (row["frame"], row["time_ns"], quanta)  # noqa: E731
    if row["kind"] == "pause":
        if row["pause_quanta"] is not None:
            yield (row["collector"], row["tap"], mac, None), event(row["pause_quanta"])
        return
    enable = row["pfc_enable"] or 0
    for prio in range(8):
        if enable & (1 << prio):
            yield (row["collector"], row["tap"], mac, prio), event(row[f"pfc_quanta_{prio}"])


def pause_time(key, events, link_bps, end_ns):
    """The pause accounting of `stats`, in picoseconds as it does it (a quantum at 100 Gb/s is 5.12 ns): an
    XOFF starts a pause or moves its end to quanta x 512 bit times after the frame, an XON ends it at once, a
    pause ends by itself when its time runs out, and one still running at the capture's end is cut there. A
    pause never ends before it began, whatever order the timestamps come in."""
    frames = xoff = xon = pauses = 0
    paused_ps = 0
    since = None
    until = 0

    def close(start, end):
        nonlocal paused_ps
        paused_ps += max(end, start) - start

    for _, ts_ns, quanta in sorted(events):
        t = ts_ns * 1000
        frames += 1
        if since is not None and until <= t:
            close(since, until)
            since = None
        if quanta == 0:
            xon += 1
            if since is not None:
                close(since, t)
                since = None
        else:
            xoff += 1
            if since is None:
                since = t
                pauses += 1
            until = t + quanta * BITS_PER_QUANTUM * 10**12 // link_bps
    if since is not None:
        close(since, max(min(until, end_ns * 1000), since))
    collector, tap, mac, prio = key
    kind = "pause" if prio is None else "pfc"
    return (collector, tap, mac, kind, prio, frames, xoff, xon, pauses, paused_ps // 1000)


def pfc_table(spark, frames, link_bps, end_ns):
    """PFC and PAUSE per tap, source MAC and priority. The pause state of a priority depends on the order of
    its frames, so each (tap, MAC, priority) is folded in frame order by one task; these frames are few next
    to the data frames."""
    control = frames.where(F.col("kind").isin("pfc", "pause")).select(
        "collector",
        "tap",
        "src_mac",
        "kind",
        "frame",
        "time_ns",
        "pfc_enable",
        "pause_quanta",
        *[f"pfc_quanta_{p}" for p in range(8)],
    )
    rows = (
        control.rdd.flatMap(pause_events)
        .groupByKey()
        .map(lambda kv: pause_time(kv[0], kv[1], link_bps, end_ns))
    )
    return spark.createDataFrame(rows, PFC_SCHEMA)


def hops_table(frames):
    """The same packet at two collectors. A packet is its HOP_KEY; a retransmission repeats it, so each
    collector's earliest sighting of a key stands for the packet there (earliest copy to earliest copy). A row
    is one direction of one host pair's traffic (src to dst) through a pair of collectors, named in name order
    (collector_a < collector_b), with how many packets both saw and the delay t_b - t_a in ns: signed, and
    on the two collectors' own clocks, so it is their offset plus the transit between them (docs/spark.md)."""
    roce = frames.where(
        (F.col("kind") == "roce") & F.col("src").isNotNull() & F.col("opcode").isNotNull()
    )
    sightings = roce.groupBy("collector", *HOP_KEY).agg(F.min("time_ns").alias("time_ns"))
    a = sightings.alias("a")
    b = sightings.alias("b")
    pairs = a.join(b, on=HOP_KEY).where(F.col("a.collector") < F.col("b.collector"))
    delays = pairs.select(
        F.col("a.collector").alias("collector_a"),
        F.col("b.collector").alias("collector_b"),
        "src",
        "dst",
        (F.col("b.time_ns") - F.col("a.time_ns")).alias("delay_ns"),
    )
    return delays.groupBy("collector_a", "collector_b", "src", "dst").agg(
        F.count(F.lit(1)).alias("matched"),
        F.min("delay_ns").alias("delay_min_ns"),
        F.expr("percentile(delay_ns, 0.5)").alias("delay_median_ns"),
        F.max("delay_ns").alias("delay_max_ns"),
    )


def main(argv):
    parser = argparse.ArgumentParser(
        prog="rocetrace_job.py",
        description="Flows, CNP streams, PFC pause time and cross-collector hops of rocetrace datasets.",
    )
    parser.add_argument("dataset", help="directory of collector=NAME/ datasets (local, hdfs://, s3a://)")
    parser.add_argument("out", help="directory for the flows, cnps, pfc and hops tables (replaced)")
    parser.add_argument(
        "--link-speed",
        type=parse_speed,
        default=parse_speed("100G"),
        help="link speed that converts pause quanta into time (as roce-analyzer --link-speed; default 100G)",
    )
    args = parser.parse_args(argv)
    spark = (
        SparkSession.builder.appName("rocetrace")
        # Collector names such as 01 must stay text, not become numbers.
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        .getOrCreate()
    )
    frames = read_frames(spark, args.dataset)
    end_ns = check_schema(frames)
    out = args.out.rstrip("/")
    tables = {
        "flows": flows_table(spark, frames),
        "cnps": cnps_table(frames),
        "pfc": pfc_table(spark, frames, args.link_speed, end_ns),
        "hops": hops_table(frames),
    }
    for name, table in tables.items():
        table.write.mode("overwrite").parquet(f"{out}/{name}")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
