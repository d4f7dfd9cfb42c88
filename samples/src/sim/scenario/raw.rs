//! The file as written: plain structs that serde fills from the TOML, refusing unknown keys, with the defaults
//! of every key that may be left out (samples/README.md lists them). No value is checked here: that is
//! [`build`](super::build)'s job, so that each rule is written once, with the key it names.

use serde::Deserialize;

fn default_true() -> bool {
    true
}

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScenario {
    pub(super) description: Option<String>,
    #[serde(default)]
    pub(super) expect_findings: Vec<String>,
    #[serde(default)]
    pub(super) seed: u64,
    pub(super) duration_us: u64,
    pub(super) snaplen: Option<u32>,
    #[serde(default = "default_vlan")]
    pub(super) vlan: u16,
    #[serde(default = "default_sample_ns")]
    pub(super) queue_sample_ns: u64,
    #[serde(default)]
    pub(super) dcqcn: toml::Table,
    #[serde(default, rename = "switch")]
    pub(super) switches: Vec<RawSwitch>,
    #[serde(default, rename = "host")]
    pub(super) hosts: Vec<RawHost>,
    #[serde(default, rename = "link")]
    pub(super) links: Vec<RawLink>,
    #[serde(default, rename = "flow")]
    pub(super) flows: Vec<RawFlow>,
    #[serde(default, rename = "tap")]
    pub(super) taps: Vec<RawTap>,
    #[serde(default, rename = "file")]
    pub(super) files: Vec<RawFile>,
}

fn default_vlan() -> u16 {
    100
}
fn default_sample_ns() -> u64 {
    2_000
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSwitch {
    pub(super) name: String,
    #[serde(default = "default_buffer")]
    pub(super) buffer_bytes: u64,
    #[serde(default = "default_true")]
    pub(super) ecn: bool,
    #[serde(default = "default_kmin")]
    pub(super) kmin_bytes: u64,
    #[serde(default = "default_kmax")]
    pub(super) kmax_bytes: u64,
    #[serde(default = "default_pmax")]
    pub(super) pmax: f64,
    #[serde(default = "default_pfc")]
    pub(super) pfc_priorities: Vec<u8>,
    #[serde(default = "default_xoff")]
    pub(super) xoff_bytes: u64,
    #[serde(default = "default_xon")]
    pub(super) xon_bytes: u64,
    #[serde(default = "default_queue_limit")]
    pub(super) queue_limit_bytes: u64,
    #[serde(default = "default_mark_at")]
    pub(super) mark_at: String,
}

fn default_mark_at() -> String {
    "dequeue".into()
}

fn default_buffer() -> u64 {
    4_000_000
}
fn default_kmin() -> u64 {
    20_000
}
fn default_kmax() -> u64 {
    200_000
}
fn default_pmax() -> f64 {
    0.01
}
fn default_pfc() -> Vec<u8> {
    vec![3, 6]
}
fn default_xoff() -> u64 {
    150_000
}
fn default_xon() -> u64 {
    100_000
}
fn default_queue_limit() -> u64 {
    400_000
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStorm {
    pub(super) start_us: u64,
    pub(super) end_us: u64,
    #[serde(default = "default_prio")]
    pub(super) prio: u8,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHost {
    pub(super) name: String,
    #[serde(default = "default_true")]
    pub(super) rp: bool,
    #[serde(default = "default_true")]
    pub(super) np: bool,
    #[serde(default = "default_min_cnp")]
    pub(super) min_time_between_cnps_us: u64,
    #[serde(default = "default_cnp_dscp")]
    pub(super) cnp_dscp: u8,
    #[serde(default = "default_cnp_prio")]
    pub(super) cnp_prio: u8,
    pub(super) storm: Option<RawStorm>,
    #[serde(default)]
    pub(super) jitter_ns: u64,
}

fn default_min_cnp() -> u64 {
    4
}
fn default_cnp_dscp() -> u8 {
    48
}
fn default_cnp_prio() -> u8 {
    6
}
fn default_prio() -> u8 {
    3
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLink {
    pub(super) a: String,
    pub(super) b: String,
    #[serde(default = "default_gbps")]
    pub(super) gbps: u32,
    #[serde(default = "default_delay")]
    pub(super) delay_ns: u64,
}

fn default_gbps() -> u32 {
    25
}
fn default_delay() -> u64 {
    500
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFlow {
    pub(super) name: Option<String>,
    pub(super) src: String,
    pub(super) dst: String,
    #[serde(default = "default_op")]
    pub(super) op: String,
    #[serde(default = "default_msg")]
    pub(super) message_bytes: u32,
    #[serde(default)]
    pub(super) messages: u64,
    #[serde(default)]
    pub(super) start_us: u64,
    pub(super) stop_us: Option<u64>,
    #[serde(default = "default_mtu")]
    pub(super) mtu: u32,
    #[serde(default = "default_prio")]
    pub(super) prio: u8,
    #[serde(default = "default_dscp")]
    pub(super) dscp: u8,
    #[serde(default = "default_ack_every")]
    pub(super) ack_every: u32,
    #[serde(default = "default_window")]
    pub(super) window_packets: u32,
    #[serde(default = "default_timeout")]
    pub(super) timeout_us: u64,
    #[serde(default = "default_reads")]
    pub(super) max_reads: u32,
    pub(super) offered_gbps: Option<f64>,
}

fn default_op() -> String {
    "write".into()
}
fn default_msg() -> u32 {
    65_536
}
fn default_mtu() -> u32 {
    4096
}
fn default_dscp() -> u8 {
    26
}
fn default_ack_every() -> u32 {
    16
}
fn default_window() -> u32 {
    512
}
fn default_timeout() -> u64 {
    1000
}
fn default_reads() -> u32 {
    8
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTap {
    pub(super) name: Option<String>,
    pub(super) a: String,
    pub(super) b: String,
    pub(super) file: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    pub(super) name: String,
    #[serde(default)]
    pub(super) clock_offset_ns: u64,
    #[serde(default)]
    pub(super) clock_drift_ppm: f64,
}
