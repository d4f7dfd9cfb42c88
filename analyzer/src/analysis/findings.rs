//! Plain-language diagnoses, each with the evidence a network engineer needs to check it (times, QPs, counts).
//!
//! Every rule reads only the tables the passes produced, so a finding can always be traced back to numbers
//! that `stats`, `dcqcn` and the report show.

use std::net::IpAddr;

use serde::Serialize;

use crate::analysis::dcqcn::DcqcnReport;
use crate::analysis::pauses::PauseReport;
use roce_core::nic_counters::check::{CheckedRow, counted_text, percent, phrase};
use roce_core::nic_counters::{Meaning, Status};
use roce_core::passes::StatsReport;
use roce_core::passes::flows::FlowRow;

/// How much a finding matters, which orders the findings and colours them in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing, nothing wrong.
    Info,
    /// Possibly wrong, or a limit of what the capture can tell.
    Warning,
    /// Something in the network or the NICs misbehaved.
    Problem,
}

/// One diagnosis in plain language, with what a network engineer needs to check it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Stable identifier, e.g. `ce_without_cnps`.
    pub code: &'static str,
    /// How much it matters; the findings are sorted by it.
    pub severity: Severity,
    /// The diagnosis in one line, for the console and the report's list.
    pub title: String,
    /// What it means and what to look at next.
    pub detail: String,
    /// The numbers behind it (times, QPs, counts), each a line, so it can be checked in the capture.
    pub evidence: Vec<String>,
}

/// Thresholds of the rules, with the reasons for their defaults.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// CNPs a flow must have received before "no cut followed" means anything.
    pub min_cnps_for_cut_check: u64,
    /// Share of the stretches after the first CNP in which the flow sent above what the modeled Rc allowed
    /// (by more than 20 % and a frame; see `FlowSummary::stretches_compared`) that marks a sender ignoring
    /// CNPs.
    pub above_model_share: f64,
    /// The fitted knobs must explain the observed rate this much better than the given ones (error ratio).
    pub fit_gain: f64,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            min_cnps_for_cut_check: 5,
            // A sender that obeys its limiter exceeds Rc's allowance only by the frame straddling a stretch's
            // start and the queues' jitter, both within the margin; half the stretches is far beyond that.
            above_model_share: 0.5,
            fit_gain: 0.7,
        }
    }
}

fn ns(t: u64) -> String {
    format!("{}.{:09} s", t / 1_000_000_000, t % 1_000_000_000)
}

/// A flow mirrored at two taps has two rows with the same facts; say them once.
fn push_once(v: &mut Vec<String>, line: String) {
    if !v.contains(&line) {
        v.push(line);
    }
}

fn flow_name(src: IpAddr, dst: IpAddr, qp: u32) -> String {
    format!("{src} → {dst} QP 0x{qp:06x}")
}

/// Runs every rule; problems first.
pub fn diagnose(
    stats: &StatsReport,
    dcqcn: &DcqcnReport,
    pauses: &PauseReport,
    rules: &Rules,
) -> Vec<Finding> {
    let mut out = Vec::new();
    ce_without_cnps(stats, dcqcn, &mut out);
    cnps_without_cuts(dcqcn, rules, &mut out);
    ambiguous_pairing(dcqcn, &mut out);
    np_pacing(dcqcn, &mut out);
    cut_mismatch(dcqcn, rules, &mut out);
    pfc_storms(pauses, &mut out);
    hol_blocking(pauses, &mut out);
    go_back_n(stats, &mut out);
    loss_kinds(stats, &mut out);
    cnp_priorities(stats, pauses, &mut out);
    priority_checks(pauses, &mut out);
    cnp_counters(stats, &mut out);
    nic_counters(stats, &mut out);
    out.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.code.cmp(b.code)));
    out
}

fn ce_without_cnps(stats: &StatsReport, dcqcn: &DcqcnReport, out: &mut Vec<Finding>) {
    let evidence: Vec<String> = unanswered_ce(stats, dcqcn)
        .into_iter()
        .map(|(_, line)| line)
        .collect();
    if !evidence.is_empty() {
        out.push(Finding {
            code: "ce_without_cnps",
            severity: Severity::Problem,
            title: format!("{} flow(s) were marked CE but their receivers sent no CNPs", evidence.len()),
            detail: "The switch signalled congestion, but no notification point answered: DCQCN's NP is off on \
                     these receivers (or on this priority), or the CNPs were lost before the capture point. \
                     The senders never slow down; expect queues to build and PFC to take over."
                .into(),
            evidence,
        });
    }
}

/// The flows of `ce_without_cnps`, each with its line of evidence: CE-marked, and no CNP at all from their
/// receiver back to their sender. Public for the outputs that point at the flows' packets (`annotate`).
pub fn unanswered_ce<'a>(
    stats: &StatsReport,
    dcqcn: &'a DcqcnReport,
) -> Vec<(&'a crate::analysis::dcqcn::FlowDcqcn, String)> {
    let mut evidence = Vec::new();
    for f in dcqcn.flows.iter().filter(|f| f.summary.cnps == 0) {
        let ce: u64 = stats
            .flows
            .iter()
            .filter(|r| {
                r.src == f.summary.sender
                    && r.dst == f.summary.receiver
                    && r.dest_qp == f.summary.receiver_qp
            })
            .map(|r| r.ce_packets)
            .max()
            .unwrap_or(0);
        // Any CNP from the receiver back to the sender (even one we could not pair) means the NP works.
        let any_cnp = stats
            .cnps
            .iter()
            .any(|c| c.src == f.summary.receiver && c.dst == f.summary.sender);
        if ce > 0 && !any_cnp {
            // The receiver's own recorded knob, when the capture holds it, says why.
            let why = match (f.summary.np_enabled, f.summary.priority) {
                (Some(false), Some(p)) => {
                    format!(
                        "; the receiver's roce_np/enable/{p} is recorded 0: its NP is off on priority {p}"
                    )
                }
                _ => String::new(),
            };
            let line = format!(
                "{}: {ce} CE-marked packets, no CNP back to {}{why}",
                flow_name(f.summary.sender, f.summary.receiver, f.summary.receiver_qp),
                f.summary.sender
            );
            evidence.push((f, line));
        }
    }
    evidence
}

/// Rc is a ceiling: a sender that kept sending well above it for most of the time after its CNPs did not apply
/// the cuts.
fn ignores_cnps(f: &crate::analysis::dcqcn::FlowDcqcn, rules: &Rules) -> bool {
    f.summary.cnps >= rules.min_cnps_for_cut_check
        && f.summary.above_model_fraction >= rules.above_model_share
}

/// The notification point keeps its own pacing knob or it does not: a stream with CNPs closer than
/// `min_time_between_cnps`, or marks left unanswered well past it, is an NP configured (or built) otherwise
/// than the knobs say, and the model's CNP input is then what that NP made of the marks.
fn np_pacing(dcqcn: &DcqcnReport, out: &mut Vec<Finding>) {
    use crate::analysis::np::Pacing;
    let evidence: Vec<String> = dcqcn
        .np_streams
        .iter()
        .filter_map(|n| {
            let c = &n.check;
            let us = |v: f64| v / 1000.0;
            let gap = us(c.min_gap_ns as f64);
            let what = match c.pacing {
                Pacing::Faster => format!(
                    "{} of {} gaps shorter than {gap} µs (least {:.1} µs, median {:.1} µs)",
                    c.below_min_gap,
                    c.cnps.saturating_sub(1),
                    us(c.min_spacing_ns.unwrap_or(0) as f64),
                    us(c.spacing_ns.map_or(0.0, |p| p.p50))
                ),
                Pacing::Slower => format!(
                    "marks waited {:.1} µs (median) past the {gap} µs gap for their CNP",
                    us(c.ce_to_cnp_ns.map_or(0.0, |p| p.p50))
                ),
                _ => return None,
            };
            Some(format!(
                "{} → {} QP 0x{:06x} at {}: {what} (min_time_between_cnps: {})",
                n.receiver, n.sender, n.sender_qp, n.tap, n.knobs_of
            ))
        })
        .collect();
    if !evidence.is_empty() {
        out.push(Finding {
            code: "np_pacing",
            severity: Severity::Warning,
            title: format!(
                "{} CNP stream(s) paced otherwise than their receiver's min_time_between_cnps",
                evidence.len()
            ),
            detail: "A notification point sends at most one CNP per QP per min_time_between_cnps. CNPs closer \
                     than that mean a different value on the receiver (or an NP that moderates otherwise); marks \
                     answered much later than that mean a longer value, or per-port moderation. Check \
                     /sys/class/net/IF/ecn/roce_np/min_time_between_cnps on the receivers (or record it with \
                     roce-tracer)."
                .into(),
            evidence,
        });
    }
    let ports: Vec<String> = dcqcn
        .np_ports
        .iter()
        .filter(|p| p.check.per_port)
        .map(|p| {
            let gap = p.min_gap_ns as f64 / 1000.0;
            format!(
                "{} at {}: {} CNPs to {} QPs, {} times two QPs' CNPs in a row within 2 × {gap} µs, never \
                 closer than {gap} µs (min_time_between_cnps: {})",
                p.receiver, p.tap, p.check.cnps, p.check.qps, p.check.interleaved, p.knobs_of
            )
        })
        .collect();
    if !ports.is_empty() {
        out.push(Finding {
            code: "np_per_port_moderation",
            severity: Severity::Info,
            title: format!("{} receiver(s) pace CNPs per port, not per QP", ports.len()),
            detail: "With several QPs marked at once, these receivers never sent two CNPs closer than the least \
                     gap even to different QPs: the NIC moderates the port as a whole, so each QP gets fewer CNPs \
                     (and smaller cuts) than per-QP moderation would give it."
                .into(),
            evidence: ports,
        });
    }
}

/// A CNP stream that several data flows could have caused is left unpaired rather than guessed: say so, with
/// the candidates, since its cuts are missing from every model.
fn ambiguous_pairing(dcqcn: &DcqcnReport, out: &mut Vec<Finding>) {
    let evidence: Vec<String> = dcqcn
        .unpaired_cnps
        .iter()
        .filter(|u| !u.candidates.is_empty())
        .map(|u| {
            format!(
                "{} → {} QP 0x{:06x}, {} CNPs: {}",
                u.src,
                u.dst,
                u.dest_qp,
                u.cnps,
                u.describe()
            )
        })
        .collect();
    if !evidence.is_empty() {
        out.push(Finding {
            code: "ambiguous_pairing",
            severity: Severity::Warning,
            title: format!(
                "{} CNP stream(s) could be tied to more than one data flow, and were tied to none",
                evidence.len()
            ),
            detail: "The capture's evidence (CM handshakes, acknowledged PSNs, CE marks just before the CNPs, which \
                     flows were sending) does not single out the flow these CNPs throttle, so no model is cut by \
                     them. QPs that start at the same PSN and run side by side, or several CE-marked flows in one \
                     queue, look alike; a capture that includes the connection setup (CM) or a tap at the \
                     receiver (CE marks) settles it."
                .into(),
            evidence,
        });
    }
}

fn cnps_without_cuts(dcqcn: &DcqcnReport, rules: &Rules, out: &mut Vec<Finding>) {
    // A sender whose own recorded roce_rp/enable/N is 0 ignores its CNPs by configuration: the model does not
    // cut it, so its rate cannot be held against a ceiling; the knob is the evidence.
    let off = dcqcn.flows.iter().filter_map(|f| match (f.summary.rp_enabled, f.summary.priority) {
        (Some(false), Some(p)) if f.summary.cnps >= rules.min_cnps_for_cut_check => Some(format!(
            "{}: {} CNPs on priority {p}, where the sender's roce_rp/enable/{p} is recorded 0: its NIC ignores \
             them (rp_cnp_ignored)",
            flow_name(f.summary.sender, f.summary.receiver, f.summary.receiver_qp),
            f.summary.cnps
        )),
        _ => None,
    });
    let evidence: Vec<String> = dcqcn
        .flows
        .iter()
        .filter(|f| ignores_cnps(f, rules))
        .map(|f| {
            format!(
                "{}: {} CNPs, yet sent above the modeled rate ceiling in {:.0} % of the {} stretches after the \
                 first (the model's last Rc {:.0} Mb/s)",
                flow_name(f.summary.sender, f.summary.receiver, f.summary.receiver_qp),
                f.summary.cnps,
                f.summary.above_model_fraction * 100.0,
                f.summary.stretches_compared,
                f.cuts
                    .last()
                    .map_or(f.summary.line.gbps(), |c| c.rc_after_gbps)
                    * 1000.0
            )
        })
        .chain(off)
        .collect();
    if !evidence.is_empty() {
        out.push(Finding {
            code: "cnps_without_cuts",
            severity: Severity::Problem,
            title: format!("{} sender(s) received CNPs but did not slow down", evidence.len()),
            detail: "CNPs reached these senders and their rate stayed far above what the reaction point would \
                     allow: the RP is off for this priority (rp_cnp_ignored grows on the sender), or the sender \
                     is not the one the CNPs address."
                .into(),
            evidence,
        });
    }
}

fn cut_mismatch(dcqcn: &DcqcnReport, rules: &Rules, out: &mut Vec<Finding>) {
    let mut evidence = Vec::new();
    // A sender that ignores CNPs fits no knobs; that finding says more.
    for f in dcqcn.flows.iter().filter(|f| !ignores_cnps(f, rules)) {
        let Some(fit) = f.summary.fit else { continue };
        if fit.given_error_gbps > 0.0 && fit.error_gbps < rules.fit_gain * fit.given_error_gbps {
            evidence.push(format!(
                "{}: fitted dce_tcp_g={} rpg_gd={} explain the rate with {:.2} Gb/s mean error, the given knobs with {:.2}",
                flow_name(f.summary.sender, f.summary.receiver, f.summary.receiver_qp),
                fit.dce_tcp_g,
                fit.rpg_gd,
                fit.error_gbps,
                fit.given_error_gbps
            ));
        }
    }
    if !evidence.is_empty() {
        out.push(Finding {
            code: "cut_mismatch",
            severity: Severity::Warning,
            title: format!(
                "Rate cuts of {} flow(s) differ from the model with knobs from {}",
                evidence.len(),
                dcqcn.knob_source
            ),
            detail: "The observed cuts are deeper or shallower than the reaction-point model predicts; other knob \
                     values fit much better. Check the senders' /sys/class/net/*/ecn/roce_rp/ values."
                .into(),
            evidence,
        });
    }
}

fn pfc_storms(p: &PauseReport, out: &mut Vec<Finding>) {
    if p.storms.is_empty() {
        return;
    }
    out.push(Finding {
        code: "pfc_storm",
        severity: Severity::Problem,
        title: format!(
            "PFC storm: {} pause(s) longer than {} µs without a break",
            p.storms.len(),
            p.storm_threshold_ns / 1000
        ),
        detail: "A source kept a priority paused continuously, as a stuck receiver or a pause loop does; a PFC \
                 watchdog would drop or stop honouring these pauses."
            .into(),
        evidence: p.storms.iter().map(storm_evidence).collect(),
    });
}

/// A storm's line of evidence in `pfc_storm`.
pub fn storm_evidence(s: &crate::analysis::pauses::Storm) -> String {
    format!(
        "{} paused priority {} from {} for {} µs",
        s.src_mac,
        s.priority.map_or("all (802.3x)".into(), |x| x.to_string()),
        ns(s.start_ns),
        (s.end_ns - s.start_ns) / 1000
    )
}

fn hol_blocking(p: &PauseReport, out: &mut Vec<Finding>) {
    // A host that pauses its switch port (a slow or stuck receiver, a storm) is where the congestion is; a flow
    // that stalls meanwhile although it neither goes to nor comes from that host is a victim sharing a paused
    // queue or link.
    let mut evidence = Vec::new();
    for culprit in p
        .stalls
        .iter()
        .filter_map(|s| s.pauser_ip.map(|ip| (ip, s)))
        .chain(p.intervals.iter().filter_map(|_| None))
    {
        let (host, cs) = culprit;
        for s in p
            .stalls
            .iter()
            .filter(|s| s.start_ns < cs.end_ns && cs.start_ns < s.end_ns)
        {
            for f in s.flows.iter().filter(|f| f.dst != host && f.src != host) {
                let line = format!(
                    "{} stalled {} – {} while {} ({}) paused priority {}",
                    flow_name(f.src, f.dst, f.dest_qp),
                    ns(s.start_ns),
                    ns(s.end_ns),
                    host,
                    cs.src_mac,
                    cs.priority.map_or("all".into(), |x| x.to_string()),
                );
                if !evidence.contains(&line) {
                    evidence.push(line);
                }
            }
        }
    }
    if !evidence.is_empty() {
        out.push(Finding {
            code: "hol_blocking",
            severity: Severity::Problem,
            title: format!("Head-of-line blocking: {} flow stall(s) caused by another host's pauses", evidence.len()),
            detail: "These flows go neither to nor from the host that sent the pauses, yet stopped while it paused \
                     its link: they share a paused switch queue or uplink with its traffic and are its victims."
                .into(),
            evidence,
        });
    }
}

fn go_back_n(stats: &StatsReport, out: &mut Vec<Finding>) {
    // A go-back-N after a NAK, or over PSNs that were missing at the tap, follows a loss. Without either the
    // sender timed out: its ACKs came late (behind a long pause) or were lost; nothing says data was lost.
    let (mut lost, mut timed_out) = (Vec::new(), Vec::new());
    for f in &stats.flows {
        match retransmitted(stats, f) {
            Some(("go_back_n_loss", line)) => push_once(&mut lost, line),
            Some((_, line)) => push_once(&mut timed_out, line),
            None => {}
        }
    }
    if !lost.is_empty() {
        out.push(Finding {
            code: "go_back_n_loss",
            severity: Severity::Problem,
            title: format!("Loss and go-back-N retransmission on {} flow(s)", lost.len()),
            detail: "The senders went back and resent from an earlier PSN onwards, sending data twice, after \
                     packets were lost: the receiver NAKed a PSN sequence error, or PSNs were missing before the \
                     retransmission (lost on a lossy priority, or dropped elsewhere)."
                .into(),
            evidence: lost,
        });
    }
    if !timed_out.is_empty() {
        out.push(Finding {
            code: "timeout_retransmission",
            severity: Severity::Problem,
            title: format!(
                "Retransmission after a transport timeout on {} flow(s)",
                timed_out.len()
            ),
            detail: "The senders resent data that the capture saw arrive, without a NAK: their transport timer \
                     expired before the ACKs came, which happens when ACKs wait behind a long pause, or are lost, \
                     or when the timeout (the QP's timeout and retry settings) is shorter than the fabric's \
                     worst delay."
                .into(),
            evidence: timed_out,
        });
    }
}

/// Which finding a flow's retransmissions raise, `go_back_n_loss` or `timeout_retransmission`, with its
/// line of evidence; `None` for a flow that sent nothing twice. Public for the outputs that point at the
/// packets sent again (`annotate`).
pub fn retransmitted(stats: &StatsReport, f: &FlowRow) -> Option<(&'static str, String)> {
    if f.retransmissions == 0 {
        return None;
    }
    let naks: u64 = stats
        .flows
        .iter()
        .filter(|r| r.iface == f.iface && r.src == f.dst && r.dst == f.src)
        .map(|r| r.naks.psn_sequence_error)
        .sum();
    let bytes_again = f.bytes / f.packets.max(1) * f.retransmissions;
    let again = format!(
        "{}: {} packets (~{} bytes) sent again",
        flow_name(f.src, f.dst, f.dest_qp),
        f.retransmissions,
        bytes_again,
    );
    Some(if naks > 0 {
        (
            "go_back_n_loss",
            format!("{again}, after {naks} NAK(PSN sequence error) from the receiver"),
        )
    } else if f.psn_gaps + f.out_of_order > 0 {
        (
            "go_back_n_loss",
            format!("{again}, over PSNs missing at the tap"),
        )
    } else {
        (
            "timeout_retransmission",
            format!("{again}, with no NAK and no PSN missing before"),
        )
    })
}

/// A flow's line of evidence in `network_loss`: PSNs that came late and filled earlier gaps; `None` for a
/// flow without. Public for the outputs that point at those packets (`annotate`).
pub fn filled_gaps(f: &FlowRow) -> Option<String> {
    (f.out_of_order > 0).then(|| {
        format!(
            "{}: {} PSNs arrived late, filling earlier gaps",
            flow_name(f.src, f.dst, f.dest_qp),
            f.out_of_order
        )
    })
}

fn loss_kinds(stats: &StatsReport, out: &mut Vec<Finding>) {
    let dropped = stats.capture.dropped.unwrap_or(0);
    let unfilled: Vec<String> = stats
        .flows
        .iter()
        .filter(|f| f.psn_gaps > 0)
        .map(|f| {
            format!(
                "{}: {} PSNs never seen",
                flow_name(f.src, f.dst, f.dest_qp),
                f.psn_gaps
            )
        })
        .collect();
    let filled: Vec<String> = stats.flows.iter().filter_map(filled_gaps).collect();
    if !unfilled.is_empty() {
        let capture = dropped > 0;
        out.push(Finding {
            code: if capture { "capture_loss" } else { "unseen_psns" },
            severity: Severity::Warning,
            title: if capture {
                format!("The recorder dropped {dropped} frames: {} flow(s) have PSNs the capture never saw", unfilled.len())
            } else {
                format!("{} flow(s) have PSNs that never appeared, with no recorder drops", unfilled.len())
            },
            detail: if capture {
                "Gaps that no retransmission filled, in a file whose statistics record drops: these packets \
                 were most likely lost by the capture, not by the network."
                    .into()
            } else {
                "Gaps that no retransmission filled although the capture recorded no drops: lost before the \
                 capture point, or the capture started or ended inside these messages."
                    .into()
            },
            evidence: unfilled,
        });
    }
    if !filled.is_empty() {
        out.push(Finding {
            code: "network_loss",
            severity: Severity::Warning,
            title: format!("{} flow(s) had gaps later filled by retransmissions", filled.len()),
            detail: "PSNs missing at first and resent later: the network lost them (a capture loss is never \
                     filled)."
                .into(),
            evidence: filled,
        });
    }
}

fn cnp_priorities(stats: &StatsReport, p: &PauseReport, out: &mut Vec<Finding>) {
    if p.paused_priorities.is_empty() {
        return;
    }
    // A priority of CNPs alone is NVIDIA's standard setup (CNPs on priority 6, strict, without PFC): nothing
    // queues there for a CNP to be dropped behind. CNPs sharing a lossy priority with data are the risk.
    let data: Vec<u8> = stats.flows.iter().filter_map(|f| f.priority).collect();
    let evidence: Vec<String> = stats
        .cnps
        .iter()
        .filter(|c| {
            c.priority
                .is_some_and(|q| !p.paused_priorities.contains(&q) && data.contains(&q))
        })
        .map(|c| {
            format!(
                "{} → {} QP 0x{:06x}: {} CNPs on priority {} (from its {}; lossless: {:?})",
                c.src,
                c.dst,
                c.dest_qp,
                c.count,
                c.priority.unwrap_or(0),
                match c.priority_source {
                    Some(roce_core::priority::PrioritySource::Dscp) => format!("DSCP {}", c.dscp),
                    _ => "PCP".to_string(),
                },
                p.paused_priorities
            )
        })
        .collect();
    if !evidence.is_empty() {
        out.push(Finding {
            code: "cnps_on_lossy_priority",
            severity: Severity::Warning,
            title: "CNPs share a priority with RoCE data that PFC never protected".into(),
            detail: "A CNP dropped on a lossy priority is a rate cut that never happens; carry CNPs on a lossless \
                     priority, or on a priority of their own with strict scheduling (cnp_802p_prio, cnp_dscp)."
                .into(),
            evidence,
        });
    }
}

fn priority_checks(p: &PauseReport, out: &mut Vec<Finding>) {
    if !p.roce_on_unpaused_priorities.is_empty() {
        out.push(Finding {
            code: "roce_on_unpaused_priority",
            severity: Severity::Info,
            title: format!(
                "RoCE data on priority {:?}, which no PFC frame paused in this capture",
                p.roce_on_unpaused_priorities
            ),
            detail: "PFC is in use on priorities {:?} but these carry RoCE too; if they are lossy by design, loss \
                     there is recovered only by go-back-N."
                .replace("{:?}", &format!("{:?}", p.paused_priorities)),
            evidence: Vec::new(),
        });
    }
    if !p.paused_without_roce.is_empty() {
        out.push(Finding {
            code: "pause_without_roce",
            severity: Severity::Warning,
            title: format!("PFC paused priority {:?}, which carried no RoCE data", p.paused_without_roce),
            detail: "Pauses on a priority without RoCE traffic stop other traffic for nothing, or the RoCE traffic \
                     is mapped to another priority than PFC protects."
                .into(),
            evidence: Vec::new(),
        });
    }
}

/// The CNPs the NICs counted against every CNP in the capture, for the ports whose counters the tracer could
/// not tie to their host (an older tracer recorded no addresses): the NICs' sum against the capture's, as a
/// capture of one host's traffic would have it. Ports tied to their host are judged one by one
/// ([`nic_counters`]).
fn cnp_counters(stats: &StatsReport, out: &mut Vec<Finding>) {
    let sent: Vec<(String, &CheckedRow)> = stats
        .nic_counters
        .iter()
        .filter(|c| c.info.addrs.is_empty())
        .flat_map(|c| {
            c.meanings
                .iter()
                .filter(|r| r.row.meaning == Meaning::CnpSent && r.row.status == Status::Counted)
                .filter(|r| r.row.movement.is_some_and(|m| !m.at_least()))
                .map(move |r| (c.name(), r))
        })
        .collect();
    if sent.is_empty() {
        return;
    }
    let nic: u64 = sent
        .iter()
        .filter_map(|(_, r)| r.row.movement)
        .map(|m| m.delta)
        .sum();
    let captured: u64 = stats.cnps.iter().map(|c| c.count).sum();
    let (lo, hi) = (nic.min(captured), nic.max(captured));
    if hi == 0 || (hi - lo) as f64 <= 0.1 * hi as f64 {
        return;
    }
    out.push(Finding {
        code: "cnp_count_mismatch",
        severity: Severity::Warning,
        title: format!("The NICs report {nic} CNPs sent; the capture holds {captured}"),
        detail: "The NICs' counters of CNPs sent moved by a different amount than the CNPs captured: the capture \
                 point does not see every CNP (another path, a tap on one side only), or the recorder lost frames. \
                 The tracer did not record these ports' addresses, so their CNPs are compared with every CNP of \
                 the capture."
            .into(),
        evidence: sent
            .iter()
            .filter_map(|(name, r)| {
                let m = r.row.movement?;
                Some(format!(
                    "{name} {}: +{} over {} samples",
                    r.row.counters.join(" + "),
                    m.delta,
                    m.samples
                ))
            })
            .collect(),
    });
}

/// docs/nic-counters.md: a port whose counters say it sent (or received) clearly more of the same packets
/// than the capture holds of its host over the same stretch of time: the capture is incomplete, and by how
/// much is the share.
fn nic_counters(stats: &StatsReport, out: &mut Vec<Finding>) {
    let mut lows: Vec<(f64, String, String)> = Vec::new();
    for c in &stats.nic_counters {
        for r in c.low() {
            let (Some(cmp), Some(m)) = (&r.compared, r.row.movement) else {
                continue;
            };
            let share = cmp.fraction.unwrap_or(0.0);
            let what = phrase(r.row.meaning, r.row.priority, &c.name());
            lows.push((
                share,
                what.clone(),
                format!(
                    "{what}: {} by {} ({}); the capture holds {} ({}, {} over the same {:.3} s)",
                    counted_text(&m),
                    r.row.counters.join(" + "),
                    c.info.vendor.map_or("?", |v| v.name()),
                    cmp.captured.count,
                    cmp.with,
                    percent(share),
                    m.last_ns.saturating_sub(m.first_ns) as f64 / 1e9,
                ),
            ));
        }
    }
    let Some((share, what, _)) = lows.iter().min_by(|a, b| a.0.total_cmp(&b.0)).cloned() else {
        return;
    };
    out.push(Finding {
        code: "capture_below_nic_counters",
        severity: Severity::Warning,
        title: format!("The capture holds {} of the {what}", percent(share)),
        detail: "The NIC counted more of these packets than the capture holds of its host over the same stretch \
                 of time, so the capture is missing some of its traffic: the mirror port or the recorder dropped \
                 frames (check the capture's drop counts and the mirror's own), or the tap does not see every \
                 path this host's packets take (another uplink, a LAG member, traffic kept inside a switch). \
                 Every count taken from this capture (CNPs, pauses, losses) is short by as much. PFC frames are \
                 often not mirrored at all: a switch consumes them on the port they arrive at."
            .into(),
        evidence: lows.into_iter().map(|(_, _, line)| line).collect(),
    });
}
