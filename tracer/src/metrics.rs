//! `--metrics ADDR`: the live numbers as Prometheus metrics (Prometheus text format), per QP, per priority and for
//! the capture itself. Values come from the same per-second pass results as the console line, so a dashboard
//! and `roce-analyzer stats` on the file count the same things.
//!
//! The HTTP side is hyper on tokio: `roce-tracer top` serves it from the event loop it already runs, and
//! `capture` from a thread of its own with a runtime of one thread ([`Metrics::serve`]). A hand-written
//! server answered one connection at a time and knew nothing of keep-alive or a client that stalls.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

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
    model_gbps: Family<QpLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    flow_gbps: Family<QpLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
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
            model_gbps: Family::default(),
            flow_gbps: Family::default(),
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
        r.register(
            "model_gbps",
            "The DCQCN reaction-point model's rate per flow (source, destination, destination QP), fed with \
             its CNPs as they arrived, at the last bin's last frame, Gb/s (roce-tracer top)",
            m.model_gbps.clone(),
        );
        r.register(
            "flow_gbps",
            "Observed rate per flow over the last bin of capture time, Gb/s (roce-tracer top)",
            m.flow_gbps.clone(),
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

    /// Sets each flow's observed rate and, for the flows whose CNP stream is paired and modelled, the
    /// model's rate (`roce-tracer top`, at each bin): `(src, dst, dest_qp, observed, model)`, Gb/s.
    pub fn update_flows(
        &self,
        flows: &[(std::net::IpAddr, std::net::IpAddr, u32, f64, Option<f64>)],
    ) {
        for &(src, dst, qp, observed, model) in flows {
            let l = QpLabels {
                src: src.to_string(),
                dst: dst.to_string(),
                qp: qp.to_string(),
            };
            self.flow_gbps.get_or_create(&l).set(observed);
            if let Some(g) = model {
                self.model_gbps.get_or_create(&l).set(g);
            }
        }
    }

    /// Binds `addr` and serves the metrics from a thread of its own (`capture`, which has no runtime).
    pub fn serve(&self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let bound = listener.local_addr()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let me = self.clone();
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                rt.block_on(async move {
                    if let Ok(l) = tokio::net::TcpListener::from_std(listener) {
                        me.serve_on(l).await;
                    }
                });
            })?;
        Ok(bound)
    }

    /// Serves every connection `listener` accepts, each on a task of its own, until the runtime ends.
    pub async fn serve_on(self, listener: tokio::net::TcpListener) {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let me = self.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let me = me.clone();
                    async move { Ok::<_, Infallible>(me.answer(&req)) }
                });
                // A client that goes away mid-request is its own business.
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    /// The metrics for a GET or HEAD of any path (scrapers are configured with one, and `/metrics` is the
    /// convention); other methods are refused.
    fn answer<B>(&self, req: &Request<B>) -> Response<Full<Bytes>> {
        let mut resp = Response::new(Full::new(Bytes::new()));
        if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
            *resp.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
            return resp;
        }
        let body = self.render();
        if req.method() == hyper::Method::GET {
            *resp.body_mut() = Full::new(Bytes::from(body));
        }
        resp.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::io::{Read, Write};
    use std::net::TcpStream;
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
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut resp = String::new();
        c.read_to_string(&mut resp).unwrap();
        assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
        assert!(resp.contains("rocetrace_qp_bytes_total"), "{resp}");
        assert!(resp.contains("text/plain; version=0.0.4"), "{resp}");
        // Keep-alive: two requests on one connection, and a method that is not a read refused.
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nPOST /metrics HTTP/1.1\r\nHost: x\r\n\
              Content-Length: 0\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        let mut resp = String::new();
        c.read_to_string(&mut resp).unwrap();
        assert_eq!(resp.matches("HTTP/1.1 200 OK").count(), 1, "{resp}");
        assert!(resp.contains("HTTP/1.1 405 Method Not Allowed"), "{resp}");
        // The model's gauge per flow, beside the observed rate.
        let ip = |n| IpAddr::V4(Ipv4Addr::new(10, 0, 0, n));
        m.update_flows(&[
            (ip(1), ip(2), 7, 6.5, Some(3.25)),
            (ip(3), ip(2), 8, 1.0, None),
        ]);
        let text = m.render();
        assert!(
            text.contains(r#"rocetrace_model_gbps{src="10.0.0.1",dst="10.0.0.2",qp="7"} 3.25"#),
            "{text}"
        );
        assert!(
            !text.contains(r#"rocetrace_model_gbps{src="10.0.0.3""#),
            "{text}"
        );
        assert!(
            text.contains(r#"rocetrace_flow_gbps{src="10.0.0.3",dst="10.0.0.2",qp="8"} 1.0"#),
            "{text}"
        );
    }
}
