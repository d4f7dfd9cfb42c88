//! `--metrics ADDR`: the live numbers as Prometheus metrics (Prometheus text format), per QP, per priority and for
//! the capture itself. Values come from the same per-second pass results as the console line, so a dashboard
//! and `roce-analyzer stats` on the file count the same things.
//!
//! The HTTP side is a few lines over `std::net`: one scrape is one short connection, and pulling in an HTTP
//! stack for that would cost more build time than the whole tracer.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use roce_core::passes::{cnp::CnpRow, flows::FlowRow, pfc::PfcRow};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QpLabels {
    src: String,
    dst: String,
    qp: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PrioLabels {
    src_mac: String,
    priority: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RingLabels {
    ring: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IfaceLabels {
    interface: String,
}

/// The metric handles; cheap to update from the capture loop while the server thread encodes them.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    frames: Family<KindLabels, Counter>,
    qp_packets: Family<QpLabels, Counter>,
    qp_bytes: Family<QpLabels, Counter>,
    qp_ce: Family<QpLabels, Counter>,
    qp_psn_gaps: Family<QpLabels, Counter>,
    cnps: Family<QpLabels, Counter>,
    pfc_frames: Family<PrioLabels, Counter>,
    pfc_xoff: Family<PrioLabels, Counter>,
    pause_frames: Family<PrioLabels, Counter>,
    dropped: Gauge,
    dropped_by_iface: Family<IfaceLabels, Gauge>,
    dropped_by_ring: Family<RingLabels, Gauge>,
    late: Gauge,
    roce_gbps: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric registered, all at zero.
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("rocetrace");
        let m = Metrics {
            registry: Arc::new(Registry::default()),
            frames: Family::default(),
            qp_packets: Family::default(),
            qp_bytes: Family::default(),
            qp_ce: Family::default(),
            qp_psn_gaps: Family::default(),
            cnps: Family::default(),
            pfc_frames: Family::default(),
            pfc_xoff: Family::default(),
            pause_frames: Family::default(),
            dropped: Gauge::default(),
            dropped_by_iface: Family::default(),
            dropped_by_ring: Family::default(),
            late: Gauge::default(),
            roce_gbps: Gauge::default(),
        };
        r.register("frames", "Frames captured, by kind", m.frames.clone());
        r.register(
            "qp_packets",
            "RoCE data packets per flow (source, destination, destination QP)",
            m.qp_packets.clone(),
        );
        r.register(
            "qp_bytes",
            "Wire bytes of RoCE data packets per flow",
            m.qp_bytes.clone(),
        );
        r.register(
            "qp_ce_packets",
            "RoCE data packets marked Congestion Experienced, per flow",
            m.qp_ce.clone(),
        );
        r.register(
            "qp_psn_gaps",
            "PSNs never seen, per flow",
            m.qp_psn_gaps.clone(),
        );
        r.register(
            "cnps",
            "Congestion Notification Packets, per notified flow",
            m.cnps.clone(),
        );
        r.register(
            "pfc_frames",
            "PFC frames naming a priority",
            m.pfc_frames.clone(),
        );
        r.register(
            "pfc_xoff",
            "PFC frames with a non-zero pause time for a priority",
            m.pfc_xoff.clone(),
        );
        r.register(
            "pause_frames",
            "802.3x PAUSE frames",
            m.pause_frames.clone(),
        );
        r.register(
            "capture_dropped_frames",
            "Frames the capture engine lost so far",
            m.dropped.clone(),
        );
        r.register(
            "interface_dropped_frames",
            "Frames the capture engine lost so far, per interface",
            m.dropped_by_iface.clone(),
        );
        r.register(
            "ring_dropped_frames",
            "Frames the eBPF probe lost so far to a full ring buffer, per ring (one per CPU)",
            m.dropped_by_ring.clone(),
        );
        r.register(
            "capture_late_frames",
            "Frames written after a later frame: they reached the writer beyond its reordering window",
            m.late.clone(),
        );
        r.register(
            "roce_gbps",
            "RoCE throughput over the last second, Gb/s",
            m.roce_gbps.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            ..m
        }
    }

    /// Adds one interval's pass results.
    pub fn update(
        &self,
        kinds: &[(&'static str, u64)],
        flows: &[FlowRow],
        cnps: &[CnpRow],
        pfc: &[PfcRow],
        roce_gbps: f64,
        dropped: u64,
    ) {
        for (kind, n) in kinds {
            self.frames
                .get_or_create(&KindLabels {
                    kind: (*kind).to_owned(),
                })
                .inc_by(*n);
        }
        // Rows are per capture interface; a flow seen on several interfaces is counted once, from the
        // interface that saw most of it, or its label set would repeat.
        let mut seen = std::collections::HashSet::new();
        let mut by_size: Vec<&FlowRow> = flows.iter().collect();
        by_size.sort_by_key(|f| std::cmp::Reverse(f.packets));
        for f in by_size {
            if !seen.insert((f.src, f.dst, f.dest_qp)) {
                continue;
            }
            let l = QpLabels {
                src: f.src.to_string(),
                dst: f.dst.to_string(),
                qp: f.dest_qp.to_string(),
            };
            self.qp_packets.get_or_create(&l).inc_by(f.packets);
            self.qp_bytes.get_or_create(&l).inc_by(f.bytes);
            self.qp_ce.get_or_create(&l).inc_by(f.ce_packets);
            self.qp_psn_gaps.get_or_create(&l).inc_by(f.psn_gaps);
        }
        for c in cnps {
            let l = QpLabels {
                src: c.src.to_string(),
                dst: c.dst.to_string(),
                qp: c.dest_qp.to_string(),
            };
            self.cnps.get_or_create(&l).inc_by(c.count);
        }
        for p in pfc {
            let l = PrioLabels {
                src_mac: p.src_mac.clone(),
                priority: p
                    .priority
                    .map_or_else(|| "all".to_owned(), |x| x.to_string()),
            };
            if p.kind == "pause" {
                self.pause_frames.get_or_create(&l).inc_by(p.frames);
            } else {
                self.pfc_frames.get_or_create(&l).inc_by(p.frames);
                self.pfc_xoff.get_or_create(&l).inc_by(p.xoff);
            }
        }
        self.dropped.set(i64::try_from(dropped).unwrap_or(i64::MAX));
        self.roce_gbps.set(roce_gbps);
    }

    /// Sets the losses: per `-i` interface (`names` and `by_iface` in the same order), per ring (empty for
    /// an engine without rings), and the frames written late.
    pub fn update_losses(&self, names: &[String], by_iface: &[u64], by_ring: &[u64], late: u64) {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        for (name, &n) in names.iter().zip(by_iface) {
            self.dropped_by_iface
                .get_or_create(&IfaceLabels {
                    interface: name.clone(),
                })
                .set(gauge(n));
        }
        for (ring, &n) in by_ring.iter().enumerate() {
            self.dropped_by_ring
                .get_or_create(&RingLabels {
                    ring: ring.to_string(),
                })
                .set(gauge(n));
        }
        self.late.set(gauge(late));
    }

    /// Every metric in Prometheus' text format (0.0.4), which every scraper and `promtool check metrics`
    /// read. prometheus-client writes OpenMetrics, where a counter family is named without its `_total`
    /// suffix and the text ends with `# EOF`; both are adjusted here.
    pub fn render(&self) -> String {
        let mut open = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut open, &self.registry);
        let counters: Vec<&str> = open
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|rest| rest.strip_suffix(" counter"))
            .collect();
        let mut out = String::with_capacity(open.len() + 64);
        for line in open.lines() {
            if line == "# EOF" {
                continue;
            }
            let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
                let rest = line.strip_prefix(prefix)?;
                let (name, tail) = rest.split_once(' ')?;
                counters
                    .contains(&name)
                    .then(|| format!("{prefix}{name}_total {tail}"))
            });
            out.push_str(renamed.as_deref().unwrap_or(line));
            out.push('\n');
        }
        out
    }

    /// Binds `addr` and serves `/metrics` (any path, in fact) from a background thread.
    pub fn serve(&self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind(addr)?;
        let bound = listener.local_addr()?;
        let me = self.clone();
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                for conn in listener.incoming().flatten() {
                    let _ = me.answer(conn);
                }
            })?;
        Ok(bound)
    }

    fn answer(&self, mut conn: TcpStream) -> std::io::Result<()> {
        conn.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut req = Vec::new();
        let mut buf = [0u8; 1024];
        // Read the request head; its content does not matter, but answering before it arrives confuses
        // some clients.
        while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 * 1024 {
            let n = conn.read(&mut buf)?;
            if n == 0 {
                break;
            }
            req.extend_from_slice(buf.get(..n).unwrap_or(&[]));
        }
        let body = self.render();
        write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
        conn.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::net::{IpAddr, Ipv4Addr};

    fn flow(qp: u32, packets: u64, ce: u64) -> FlowRow {
        FlowRow {
            iface: 0,
            tap: String::new(),
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            dest_qp: qp,
            packets,
            bytes: packets * 1000,
            first_ns: 0,
            last_ns: 1,
            mean_gbps: None,
            opcodes: BTreeMap::new(),
            ect_packets: 0,
            ce_packets: ce,
            psn_gaps: 0,
            retransmissions: 0,
            out_of_order: 0,
            naks: Default::default(),
            icrc_failures: 0,
            truncated: 0,
            pcp: Some(3),
            dscp: 26,
            priority: Some(3),
            priority_source: Some(roce_core::priority::PrioritySource::Pcp),
        }
    }

    #[test]
    fn intervals_accumulate_and_are_served() {
        let m = Metrics::new();
        m.update(&[("roce", 10)], &[flow(7, 10, 2)], &[], &[], 1.5, 0);
        m.update(&[("roce", 5)], &[flow(7, 5, 1)], &[], &[], 0.5, 3);
        let text = m.render();
        assert!(
            text.contains(r#"rocetrace_qp_packets_total{src="10.0.0.1",dst="10.0.0.2",qp="7"} 15"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"rocetrace_qp_ce_packets_total{src="10.0.0.1",dst="10.0.0.2",qp="7"} 3"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"rocetrace_frames_total{kind="roce"} 15"#),
            "{text}"
        );
        assert!(
            text.contains("rocetrace_capture_dropped_frames 3"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE rocetrace_qp_packets_total counter"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE rocetrace_capture_dropped_frames gauge"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
        // Losses per interface and per ring, and the late frames.
        m.update_losses(&["va".into(), "vb".into()], &[1, 2], &[0, 3], 4);
        let text = m.render();
        for line in [
            r#"rocetrace_interface_dropped_frames{interface="vb"} 2"#,
            r#"rocetrace_ring_dropped_frames{ring="1"} 3"#,
            "rocetrace_capture_late_frames 4",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }

        let addr = m.serve("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut resp = String::new();
        c.read_to_string(&mut resp).unwrap();
        assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
        assert!(resp.contains("rocetrace_qp_bytes_total"), "{resp}");
    }
}
