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
- pairs:  per ordered host pair that carried RoCE data, as the pairs of `roce-analyzer fabric`
- hosts:  per host, as the hosts of `roce-analyzer fabric`

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
    """Refuses datasets of another schema version, and returns the first and last timestamps over all frames
    (the span of the merged capture, over which `fabric` gives its rates; pauses still running at its end are
    cut there, as `stats` cuts them)."""
    row = frames.agg(
        F.min("schema_version").alias("lo"),
        F.max("schema_version").alias("hi"),
        F.min("time_ns").alias("start_ns"),
        F.max("time_ns").alias("end_ns"),
    ).first()
    if row["lo"] is not None and (row["lo"] != SCHEMA_VERSION or row["hi"] != SCHEMA_VERSION):
        sys.exit(
            f"rocetrace_job: the dataset has schema versions {row['lo']}..{row['hi']}; this job reads "
            f"version {SCHEMA_VERSION} (rewrite the datasets with the matching roce-analyzer, or use its job)"
        )
    return row["start_ns"] or 0, row["end_ns"] or 0


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


def pause_fold(events, link_bps, end_ns):
    """The pause accounting of `stats`, in picoseconds as it does it (a quantum at 100 Gb/s is 5.12 ns): an
    XOFF starts a pause or moves its end to quanta x 512 bit times after the frame, an XON ends it at once, a
    pause ends by itself when its time runs out, and one still running at the capture's end is cut there. A
    pause never ends before it began, whatever order the timestamps come in. Returns (frames, xoff, xon,
    pauses, paused_ps, intervals), the intervals as (start_ps, end_ps)."""
    frames = xoff = xon = pauses = 0
    intervals = []
    since = None
    until = 0

    def close(start, end):
        intervals.append((start, max(end, start)))

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
    paused_ps = sum(b - a for a, b in intervals)
    return frames, xoff, xon, pauses, paused_ps, intervals


def pause_time(key, events, link_bps, end_ns):
    """One row of the pfc table: a (tap, MAC, priority)'s frames folded by `pause_fold`."""
    frames, xoff, xon, pauses, paused_ps, _ = pause_fold(events, link_bps, end_ns)
    collector, tap, mac, prio = key
    kind = "pause" if prio is None else "pfc"
    return (collector, tap, mac, kind, prio, frames, xoff, xon, pauses, paused_ps // 1000)


def pause_control(frames):
    """The PFC and PAUSE frames, grouped per (tap, MAC, priority) as `pause_events` keys them."""
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
    return control.rdd.flatMap(pause_events).groupByKey()


def pfc_table(spark, frames, link_bps, end_ns):
    """PFC and PAUSE per tap, source MAC and priority. The pause state of a priority depends on the order of
    its frames, so each (tap, MAC, priority) is folded in frame order by one task; these frames are few next
    to the data frames."""
    rows = pause_control(frames).map(lambda kv: pause_time(kv[0], kv[1], link_bps, end_ns))
    return spark.createDataFrame(rows, PFC_SCHEMA)


def pause_intervals(frames, link_bps, end_ns):
    """Every pause as `stats` finds it: (collector, tap, MAC, priority, start_ns, end_ns), each end rounded down
    to the ns as the analyzer's pause intervals are."""
    return (
        pause_control(frames)
        .flatMap(
            lambda kv: [
                (*kv[0], a // 1000, b // 1000)
                for a, b in pause_fold(kv[1], link_bps, end_ns)[5]
            ]
        )
        .collect()
    )


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

# The fabric view (docs/fabric.md): hosts and ordered host pairs, as `roce-analyzer fabric` gives them over the
# same frames merged on one machine. The per-flow counts are aggregations over the data frames; what follows
# them (the pairs, the hosts, which pause stopped whom) has a row per host pair, host or pause, and is folded
# on the driver.

TAP = ["collector", "tap"]


def priority_col():
    """A flow's priority as the analyzer gives it without a DSCP map recorded by the tracer or given with
    --dscp-map: the PCP of a tagged frame, else DSCP/8 (docs/priority.md)."""
    return F.coalesce(F.col("pcp"), F.shiftright(F.col("dscp"), 3))


def flows_once(frames, flows):
    """Each data flow once over the taps that saw it carry data (packets with payload): the most any tap saw of
    its packets, bytes, CE marks and retransmissions, the fewest PSNs a tap missed, and its priorities."""
    data = frames.where(
        (F.col("kind") == "roce")
        & F.col("src").isNotNull()
        & F.col("opcode").isNotNull()
        & (F.col("payload_len") > 0)
    )
    per_tap = data.groupBy(*FLOW_KEY).agg(
        F.count(F.lit(1)).alias("packets"),
        F.sum("len").cast("long").alias("bytes"),
        count_where(F.col("ecn") == ECN_CE).alias("ce_packets"),
    )
    rows = flows.select(
        *[F.col(k).alias(f"_{k}") for k in FLOW_KEY],
        "psn_gaps",
        "retransmissions",
        priority_col().alias("priority"),
    )
    return join_on_flow(per_tap, rows).groupBy("src", "dst", "dest_qp").agg(
        F.max("packets").alias("packets"),
        F.max("bytes").alias("bytes"),
        F.max("ce_packets").alias("ce_packets"),
        F.min("psn_gaps").alias("psn_gaps"),
        F.max("retransmissions").alias("retransmitted"),
        F.collect_set("priority").alias("priorities"),
    )


def host_links(flows, cnps):
    """{(collector, tap): host} for every tap on one host's own link: the host is on every flow and CNP stream
    the tap saw, every stream of the host that any tap saw passed this one, and no other host is both."""
    streams = flows.select(*TAP, F.lit(False).alias("cnp"), "src", "dst", "dest_qp").unionByName(
        cnps.select(*TAP, F.lit(True).alias("cnp"), "src", "dst", "dest_qp")
    )
    ends = streams.withColumn("ip", F.explode(F.array_distinct(F.array("src", "dst"))))
    at_tap = ends.groupBy(*TAP, "ip").agg(F.count(F.lit(1)).alias("here"))
    per_tap = streams.groupBy(*[F.col(k).alias(f"_{k}") for k in TAP]).agg(
        F.count(F.lit(1)).alias("at_tap")
    )
    of_host = (
        ends.select("cnp", "src", "dst", "dest_qp", F.col("ip").alias("_ip"))
        .distinct()
        .groupBy("_ip")
        .agg(F.count(F.lit(1)).alias("anywhere"))
    )
    whole = (
        at_tap.join(per_tap, on=[at_tap[k].eqNullSafe(per_tap[f"_{k}"]) for k in TAP])
        .join(of_host, on=at_tap["ip"] == of_host["_ip"])
        .where((F.col("here") == F.col("at_tap")) & (F.col("here") == F.col("anywhere")))
    )
    links = whole.groupBy(*TAP).agg(F.count(F.lit(1)).alias("n"), F.first("ip").alias("ip"))
    return {(r["collector"], r["tap"]): r["ip"] for r in links.where(F.col("n") == 1).collect()}


def mac_owners(frames):
    """{MAC: IP} for every MAC whose RoCE and CNP frames all carried one source address."""
    roce = frames.where(
        F.col("kind").isin("roce", "cnp") & F.col("src_mac").isNotNull() & F.col("src").isNotNull()
    )
    owners = roce.groupBy("src_mac").agg(
        F.countDistinct("src").alias("n"), F.first("src").alias("ip")
    )
    return {r["src_mac"]: r["ip"] for r in owners.where(F.col("n") == 1).collect()}


def union_ns(intervals, priorities):
    """The time covered by the pauses (priority, start_ns, end_ns) that stop `priorities` (a PAUSE, priority
    None, stops every one), overlaps counted once."""
    spans = sorted((a, max(a, b)) for p, a, b in intervals if p is None or p in priorities)
    total = 0
    open_span = None
    for a, b in spans:
        if open_span is not None and a <= open_span[1]:
            open_span = (open_span[0], max(open_span[1], b))
        else:
            if open_span is not None:
                total += open_span[1] - open_span[0]
            open_span = (a, b)
    return total + (open_span[1] - open_span[0] if open_span else 0)


class Pauses:
    """Which host each pause stopped: one from a host's own MAC stops the traffic to it, one on a host's own
    link from another MAC stops the host's sending, and the rest (a switch pausing a switch) are unplaced."""

    def __init__(self, intervals, links, owners, pfc_rows):
        self.links = links
        self.linked = set(links.values())
        self.owners = owners
        self.pfc_rows = pfc_rows
        self.stop_sending = {}
        self.stop_receiving = {}
        self.unplaced = []
        for collector, tap, mac, prio, start, end in intervals:
            where = (collector, tap)
            if mac in owners:
                self.stop_receiving.setdefault(owners[mac], {}).setdefault(where, []).append((prio, start, end))
            elif where in links:
                self.stop_sending.setdefault(links[where], {}).setdefault(where, []).append((prio, start, end))
            else:
                self.unplaced.append(prio)

    def mac_of(self, host):
        macs = sorted(m for m, ip in self.owners.items() if ip == host)
        return ",".join(macs) if macs else None

    def pauses_sent(self, host):
        most = {}
        for r in self.pfc_rows:
            if self.owners.get(r["src_mac"]) == host:
                key = (r["src_mac"], r["kind"], r["priority"])
                most[key] = max(most.get(key, 0), r["pauses"])
        sent = sum(most.values())
        known = self.mac_of(host) is not None and (host in self.linked or sent > 0)
        return sent if known else None

    def host_paused_ns(self, host, priorities):
        if host not in self.linked:
            return None
        taps = self.stop_sending.get(host, {})
        return max((union_ns(ivs, priorities) for ivs in taps.values()), default=0)

    def pair_paused_ns(self, src, dst, priorities):
        if src not in self.linked or dst not in self.linked:
            return None
        if any(p is None or p in priorities for p in self.unplaced):
            return None
        by_tap = {}
        for taps in (self.stop_sending.get(src, {}), self.stop_receiving.get(dst, {})):
            for where, ivs in taps.items():
                by_tap.setdefault(where, []).extend(ivs)
        return max((union_ns(ivs, priorities) for ivs in by_tap.values()), default=0)


PAIRS_SCHEMA = T.StructType(
    [T.StructField(name, t) for name, t in [
        ("src", T.StringType()),
        ("dst", T.StringType()),
        ("flows", T.LongType()),
        ("packets", T.LongType()),
        ("bytes", T.LongType()),
        ("gbps", T.DoubleType()),
        ("ce_packets", T.LongType()),
        ("ce_fraction", T.DoubleType()),
        ("cnps", T.LongType()),
        ("psn_gaps", T.LongType()),
        ("retransmitted", T.LongType()),
        ("priority", T.IntegerType()),
        ("paused_ns", T.LongType()),
    ]]
)

HOSTS_SCHEMA = T.StructType(
    [T.StructField(name, t) for name, t in [
        ("host", T.StringType()),
        ("mac", T.StringType()),
        ("tx_gbps", T.DoubleType()),
        ("rx_gbps", T.DoubleType()),
        ("cnps_sent", T.LongType()),
        ("cnps_received", T.LongType()),
        ("pauses_sent", T.LongType()),
        ("paused_ns", T.LongType()),
        ("retransmitted", T.LongType()),
    ]]
)


def fabric_tables(spark, frames, flows, cnps, pfc, link_bps, start_ns, end_ns):
    """The pairs and hosts tables of `roce-analyzer fabric`: rates over the span of all the datasets, each
    flow and CNP stream counted once over the taps, pauses tied to the hosts they stopped where the capture
    shows it (docs/fabric.md)."""
    span = end_ns - start_ns

    def rate(b):
        return b * 8.0 / span if span > 0 else None

    pair_rows = (
        flows_once(frames, flows)
        .groupBy("src", "dst")
        .agg(
            F.count(F.lit(1)).alias("flows"),
            F.sum("packets").alias("packets"),
            F.sum("bytes").alias("bytes"),
            F.sum("ce_packets").alias("ce_packets"),
            F.sum("psn_gaps").alias("psn_gaps"),
            F.sum("retransmitted").alias("retransmitted"),
            F.array_distinct(F.flatten(F.collect_list("priorities"))).alias("priorities"),
        )
        .collect()
    )
    streams = cnps.groupBy("src", "dst", "dest_qp").agg(F.max("count").alias("count"))
    cnp_pairs = {
        (r["src"], r["dst"]): r["n"]
        for r in streams.groupBy("src", "dst").agg(F.sum("count").alias("n")).collect()
    }
    pauses = Pauses(
        pause_intervals(frames, link_bps, end_ns),
        host_links(flows, cnps),
        mac_owners(frames),
        pfc.collect(),
    )
    pairs = []
    for r in pair_rows:
        prios = set(r["priorities"])
        pairs.append({
            "src": r["src"],
            "dst": r["dst"],
            "flows": r["flows"],
            "packets": r["packets"],
            "bytes": r["bytes"],
            "gbps": rate(r["bytes"]),
            "ce_packets": r["ce_packets"],
            "ce_fraction": r["ce_packets"] / max(r["packets"], 1),
            "cnps": cnp_pairs.get((r["dst"], r["src"]), 0),
            "psn_gaps": r["psn_gaps"],
            "retransmitted": r["retransmitted"],
            "priority": next(iter(prios)) if len(prios) == 1 else None,
            "paused_ns": pauses.pair_paused_ns(r["src"], r["dst"], prios),
            "_priorities": prios,
        })
    addresses = flows.select(F.col("src").alias("ip")).union(flows.select("dst")).union(
        cnps.select("src")
    ).union(cnps.select("dst"))
    hosts = []
    for host in sorted(r["ip"] for r in addresses.distinct().collect()):
        sent = [p for p in pairs if p["src"] == host]
        hosts.append({
            "host": host,
            "mac": pauses.mac_of(host),
            "tx_gbps": rate(sum(p["bytes"] for p in sent)),
            "rx_gbps": rate(sum(p["bytes"] for p in pairs if p["dst"] == host)),
            "cnps_sent": sum(n for (np, _), n in cnp_pairs.items() if np == host),
            "cnps_received": sum(n for (_, rp), n in cnp_pairs.items() if rp == host),
            "pauses_sent": pauses.pauses_sent(host),
            "paused_ns": pauses.host_paused_ns(host, set().union(*[p["_priorities"] for p in sent])),
            "retransmitted": sum(p["retransmitted"] for p in sent),
        })
    as_rows = lambda rows, schema: [tuple(r[f.name] for f in schema.fields) for r in rows]  # noqa: E731
    return (
        spark.createDataFrame(as_rows(pairs, PAIRS_SCHEMA), PAIRS_SCHEMA),
        spark.createDataFrame(as_rows(hosts, HOSTS_SCHEMA), HOSTS_SCHEMA),
    )


def main(argv):
    parser = argparse.ArgumentParser(
        prog="rocetrace_job.py",
        description="Flows, CNP streams, PFC pause time, cross-collector hops, and host pairs and hosts of rocetrace "
        "datasets.",
    )
    parser.add_argument("dataset", help="directory of collector=NAME/ datasets (local, hdfs://, s3a://)")
    parser.add_argument("out", help="directory for the flows, cnps, pfc, hops, pairs and hosts tables (replaced)")
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
    start_ns, end_ns = check_schema(frames)
    out = args.out.rstrip("/")
    tables = {
        "flows": flows_table(spark, frames),
        "cnps": cnps_table(frames),
        "pfc": pfc_table(spark, frames, args.link_speed, end_ns),
        "hops": hops_table(frames),
    }
    # The flows, CNP and PFC tables are read again by the fabric tables: kept rather than computed twice.
    for name in ("flows", "cnps", "pfc"):
        tables[name] = tables[name].cache()
    tables["pairs"], tables["hosts"] = fabric_tables(
        spark, frames, tables["flows"], tables["cnps"], tables["pfc"], args.link_speed, start_ns, end_ns
    )
    for name, table in tables.items():
        table.write.mode("overwrite").parquet(f"{out}/{name}")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
