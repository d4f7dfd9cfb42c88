//! `roce-analyzer fabric`: the hosts side by side. On the teaching sample (an all-to-all where one pair goes
//! through a congested queue) every pair's rate against what the simulator says it sent, and the congested pair
//! named first with its CE marks and CNPs; on crafted captures, each rule of docs/fabric.md: a packet seen at
//! two taps counts once, CE as the tap furthest along saw it, pauses tied to the hosts they stopped, and null
//! where the capture cannot tell.

use std::path::Path;

use serde_json::Value;

use crate::common::{analyzer, parquet_rows, pfc_frame, report_of, run, workspace};
use analyzer::output::report::charts::Chart;
use analyzer::output::report::fabric as fabric_section;
use testkit::frames::{Net, write_taps};

fn fabric_json(files: &[&Path]) -> Value {
    let out = run(analyzer().arg("fabric").arg("--json").args(files));
    assert!(
        out.status.success(),
        "fabric failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn pair<'a>(f: &'a Value, src: &str, dst: &str) -> &'a Value {
    f["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["src"] == src && p["dst"] == dst)
        .unwrap_or_else(|| panic!("no pair {src} -> {dst}: {}", f["pairs"]))
}

fn host<'a>(f: &'a Value, ip: &str) -> &'a Value {
    f["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == ip)
        .unwrap_or_else(|| panic!("no host {ip}: {}", f["hosts"]))
}

/// Frame bytes the simulator puts around a WRITE's payload: Ethernet 14, VLAN 4, IPv4 20, UDP 8, BTH 12, ICRC
/// 4 on every packet, and a RETH of 16 on the first packet of each message.
const PER_PACKET: u64 = 62;
const RETH: u64 = 16;

#[test]
fn every_pair_gets_what_it_sent_and_the_congested_pair_comes_first() {
    let dir = workspace().join("samples/captures");
    let capture = dir.join("all_to_all_slow_pair.pcapng");
    let truth: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("all_to_all_slow_pair.truth.json")).unwrap(),
    )
    .unwrap();
    let f = fabric_json(&[&capture]);
    let span = f["span_ns"].as_f64().unwrap();
    let flows = truth["flows"].as_array().unwrap();
    assert_eq!(f["pairs"].as_array().unwrap().len(), flows.len());
    for t in flows {
        let p = pair(
            &f,
            t["src_ip"].as_str().unwrap(),
            t["dst_ip"].as_str().unwrap(),
        );
        let name = t["name"].as_str().unwrap();
        let n = |v: &Value| v.as_u64().unwrap();
        // Each packet once, although the all-to-all's are seen at the sender's link and at the receiver's.
        assert_eq!(p["packets"], t["data_packets_sent"], "{name}");
        let payload = n(&t["data_payload_bytes_sent"]);
        assert_eq!(
            n(&p["bytes"]),
            payload + PER_PACKET * n(&t["data_packets_sent"]) + RETH * n(&t["messages_completed"]),
            "{name}"
        );
        let sent_gbps = payload as f64 * 8.0 / span;
        let gbps = p["gbps"].as_f64().unwrap();
        assert!(
            (gbps / sent_gbps - 1.0).abs() < 0.03,
            "{name}: {gbps} Gb/s, the truth's payload over the span is {sent_gbps}"
        );
        assert_eq!(p["ce_packets"], t["ce_received"], "{name}");
        assert_eq!(p["cnps"], t["cnps_sent"], "{name}");
        assert_eq!(p["retransmitted"], 0, "{name}");
        assert_eq!(p["priority"], t["prio"], "{name}");
        // Both ends' links are tapped for the all-to-all and nothing paused; st's link is not tapped.
        if name == "st-h4" {
            assert!(p["paused_ns"].is_null(), "{name}");
        } else {
            assert_eq!(p["paused_ns"], 0, "{name}");
        }
    }
    let slow = f["slowest"].as_array().unwrap();
    assert_eq!(slow.len(), 1, "{slow:?}");
    assert_eq!(
        (slow[0]["src"].as_str(), slow[0]["dst"].as_str()),
        (Some("10.0.0.1"), Some("10.0.0.4"))
    );
    let codes: Vec<&str> = slow[0]["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["ce_marked", "cnps"]);
    assert!(slow[0]["share_of_median"].as_f64().unwrap() < 0.6);
    // The hosts add up their pairs; st's link was not mirrored, so its pauses cannot be known.
    for h in f["hosts"].as_array().unwrap() {
        let ip = h["host"].as_str().unwrap();
        let sum = |end: &str| -> f64 {
            f["pairs"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p[end] == ip)
                .map(|p| p["gbps"].as_f64().unwrap())
                .sum()
        };
        assert!(
            (h["tx_gbps"].as_f64().unwrap() - sum("src")).abs() < 1e-9,
            "{ip}"
        );
        assert!(
            (h["rx_gbps"].as_f64().unwrap() - sum("dst")).abs() < 1e-9,
            "{ip}"
        );
        let tapped = ip != "10.0.0.5";
        assert_eq!(h["paused_ns"].is_null(), !tapped, "{ip}");
        assert_eq!(h["pauses_sent"].is_null(), !tapped, "{ip}");
    }
    assert_eq!(host(&f, "10.0.0.4")["cnps_sent"], slow_cnps(&truth));
    assert_eq!(f["links"].as_array().unwrap().len(), 4);
}

/// The report's Fabric section is the same analysis as the command, fed by the report's own passes: its
/// `summary.json` carries what `fabric --json` prints, and its heatmaps hold a cell per pair that carried data.
#[test]
fn the_report_shows_what_the_command_finds() {
    let capture = workspace().join("samples/captures/all_to_all_slow_pair.pcapng");
    let (_, summary, dir) = report_of(&capture, &[]);
    assert_eq!(summary["fabric"], fabric_json(&[&capture]));
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    let section = &html[html.find("<h2 id=\"fabric\">").expect("the fabric section")..];
    let section = &section[..section.find("<h2 id=\"flows\"").unwrap()];
    assert_eq!(section.matches("<svg").count(), 2, "two heatmaps");
    assert!(section.contains("the slowest, 10.0.0.1 → 10.0.0.4, ran at 3.02 Gb/s (53 % of it): CE-marked, throttled by CNPs."));
    for png in ["fabric_rate.png", "fabric_ce.png"] {
        assert!(dir.path().join(png).is_file(), "{png}");
    }
    for table in ["fabric_pairs", "fabric_hosts"] {
        let rows = parquet_rows(&dir.path().join(format!("{table}.parquet")));
        let key = if table == "fabric_pairs" {
            "pairs"
        } else {
            "hosts"
        };
        assert_eq!(
            rows.len(),
            summary["fabric"][key].as_array().unwrap().len(),
            "{table}"
        );
    }
}

#[test]
fn a_heatmap_has_a_cell_for_each_pair_and_none_where_no_data_went() {
    let capture = workspace().join("samples/captures/all_to_all_slow_pair.pcapng");
    let f: analyzer::analysis::fabric::FabricReport = {
        let mut c = roce_capture::Capture::open_file(&capture).unwrap();
        analyzer::analysis::fabric::read(
            &mut c,
            Default::default(),
            1,
            roce_core::line::LineRates::default(),
            Default::default(),
            |_| {},
        )
    };
    let hosts: Vec<std::net::IpAddr> = f.hosts.iter().map(|h| h.host).collect();
    let Chart::Heatmap(rate) = fabric_section::rate_map(&f, &hosts) else {
        panic!("a heatmap")
    };
    assert_eq!(rate.rows, rate.columns);
    assert_eq!(rate.rows.len(), 5);
    let filled: usize = rate.cells.iter().flatten().filter(|c| c.is_some()).count();
    assert_eq!(filled, f.pairs.len());
    for (i, row) in rate.cells.iter().enumerate() {
        assert!(row[i].is_none(), "a host sends nothing to itself");
    }
    // Row h1, column h4: the slow pair, at its rate; the fastest pair sets the scale.
    let cell = rate.cells[0][3].as_ref().unwrap();
    assert_eq!(Some(cell.value), pair_gbps(&f, "10.0.0.1", "10.0.0.4"));
    assert_eq!(cell.text, "3.02 Gb/s");
    assert_eq!(Some(rate.max), pair_gbps(&f, "10.0.0.5", "10.0.0.4"));
    let Chart::Heatmap(ce) = fabric_section::ce_map(&f, &hosts) else {
        panic!("a heatmap")
    };
    assert_eq!(ce.cells[0][3].as_ref().unwrap().text, "86.4 %");
    assert_eq!(ce.cells[1][3].as_ref().unwrap().value, 0.0);
}

fn pair_gbps(f: &analyzer::analysis::fabric::FabricReport, src: &str, dst: &str) -> Option<f64> {
    f.pairs
        .iter()
        .find(|p| p.src.to_string() == src && p.dst.to_string() == dst)
        .and_then(|p| p.gbps)
}

fn slow_cnps(truth: &Value) -> Value {
    truth["flows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "h1-h4")
        .unwrap()["cnps_sent"]
        .clone()
}

/// The crafted captures' hosts: 10.0.0.h, DSCP 26 (priority 3).
const NET: Net = Net {
    prefix: [10, 0, 0],
    dscp: 26,
};

const SWITCH_PORT: [u8; 6] = [2, 0, 0, 1, 0, 1];

#[test]
fn pauses_are_tied_to_the_hosts_they_stopped_and_packets_count_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("three.pcapng");
    // Taps 0, 1, 2 on the links of hosts 1, 2, 3: every packet is seen at its sender's and its receiver's.
    let mut frames = NET.sends((1, 2), 400, 0, &[0, 1], |i| i % 4 == 0);
    frames.extend(NET.sends((1, 3), 400, 100, &[0, 2], |_| false));
    frames.extend(NET.sends((2, 3), 400, 200, &[1, 2], |_| false));
    // The switch pauses host 1 for 200 µs (on host 1's link); host 3 pauses its switch for 50 µs.
    frames.push((0, 100_000, pfc_frame(SWITCH_PORT, 3, 65535)));
    frames.push((0, 300_000, pfc_frame(SWITCH_PORT, 3, 0)));
    frames.push((2, 500_000, pfc_frame(NET.mac(3), 3, 65535)));
    frames.push((2, 550_000, pfc_frame(NET.mac(3), 3, 0)));
    write_taps(&path, &["h1", "h2", "h3"], frames);
    let f = fabric_json(&[&path]);

    let p12 = pair(&f, "10.0.0.1", "10.0.0.2");
    assert_eq!(p12["packets"], 400);
    assert_eq!(p12["ce_packets"], 100, "the receiver's tap saw the marks");
    assert_eq!(p12["paused_ns"], 200_000);
    // Pauses at two taps are not added: the most either tap shows.
    assert_eq!(pair(&f, "10.0.0.1", "10.0.0.3")["paused_ns"], 200_000);
    assert_eq!(pair(&f, "10.0.0.2", "10.0.0.3")["paused_ns"], 50_000);
    assert_eq!(host(&f, "10.0.0.1")["paused_ns"], 200_000);
    assert_eq!(host(&f, "10.0.0.2")["paused_ns"], 0);
    assert_eq!(host(&f, "10.0.0.3")["pauses_sent"], 1);
    assert_eq!(host(&f, "10.0.0.1")["pauses_sent"], 0);
    assert_eq!(host(&f, "10.0.0.3")["mac"], "02:00:00:00:00:03");
    assert!(f["unplaced_pauses"].as_array().unwrap().is_empty());
    let links: Vec<(&str, &str)> = f["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["tap"].as_str().unwrap(), l["host"].as_str().unwrap()))
        .collect();
    assert_eq!(links.len(), 3);
    assert!(
        links
            .iter()
            .all(|(tap, host)| tap.ends_with(&format!("h{}", &host[7..]))),
        "{links:?}"
    );
    // Every pair carried the same, so none is slow.
    assert!(f["slowest"].as_array().unwrap().is_empty());
}

#[test]
fn pauses_between_switches_and_untapped_ends_are_unknown_not_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("uplink.pcapng");
    // One tap between two switches that carries two pairs' traffic, and a pause there from a switch port.
    let mut frames = NET.sends((1, 2), 200, 0, &[0], |_| false);
    frames.extend(NET.sends((3, 4), 50, 100, &[0], |_| false));
    frames.push((0, 10_000, pfc_frame(SWITCH_PORT, 3, 65535)));
    frames.push((0, 20_000, pfc_frame(SWITCH_PORT, 3, 0)));
    write_taps(&path, &["uplink"], frames);
    let f = fabric_json(&[&path]);
    assert!(f["links"].as_array().unwrap().is_empty());
    let unplaced = f["unplaced_pauses"].as_array().unwrap();
    assert_eq!(unplaced.len(), 1);
    assert_eq!(unplaced[0]["paused_ns"], 10_000);
    for h in f["hosts"].as_array().unwrap() {
        assert!(
            h["paused_ns"].is_null() && h["pauses_sent"].is_null(),
            "{h}"
        );
    }
    let slow = pair(&f, "10.0.0.3", "10.0.0.4");
    assert!(slow["paused_ns"].is_null());
    // The slow pair has no evidence of its own, and says it cannot rule out the pauses.
    let s = &f["slowest"][0];
    assert_eq!(s["src"], "10.0.0.3");
    assert_eq!(s["reasons"][0]["code"], "not_the_network");
    assert!(
        s["reasons"][0]["text"]
            .as_str()
            .unwrap()
            .contains("unless PFC paused it")
    );
}

#[test]
fn a_capture_without_data_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pfc.pcapng");
    write_taps(
        &path,
        &["a"],
        vec![(0, 1_000, pfc_frame(SWITCH_PORT, 3, 65535))],
    );
    let out = run(analyzer().arg("fabric").arg(&path));
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no host pair carried data"), "{text}");
    let f = fabric_json(&[&path]);
    assert!(f["pairs"].as_array().unwrap().is_empty());
    assert!(f["median_gbps"].is_null());
}
