//! `roce-tracer top` on a real terminal: tmux runs it in a pane, the test reads the screen back and presses
//! the keys. A replay of the incast sample shows its four senders, their CNPs and the model falling and
//! recovering; `q`, Ctrl-C, SIGTERM and a panic each leave a terminal as it was (the alternate screen left,
//! the cursor shown, the line discipline back in canonical mode with echo). Live, on a veth pair during a
//! tcpreplay (privileged), the same flows come up.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{TRACER, have, require};

/// A tmux session of its own, killed when dropped.
struct Pane {
    name: String,
}

impl Pane {
    /// Runs `command` (a shell line) in a detached 100×30 session.
    fn start(tag: &str, command: &str) -> Pane {
        let name = format!("rocetrace-top-{}-{tag}", std::process::id());
        let ok = Command::new("tmux")
            .args(["new-session", "-d", "-x", "100", "-y", "30", "-s", &name])
            .arg(command)
            .status()
            .expect("tmux starts");
        assert!(ok.success(), "tmux new-session failed");
        Pane { name }
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.name])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn show(&self, format: &str) -> String {
        let out = Command::new("tmux")
            .args(["display-message", "-p", "-t", &self.name, format])
            .output()
            .expect("tmux display-message");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn keys(&self, keys: &str) {
        let ok = Command::new("tmux")
            .args(["send-keys", "-t", &self.name, keys])
            .status()
            .expect("tmux send-keys");
        assert!(ok.success());
    }

    /// The pid of `roce-tracer`, the child of the pane's shell.
    fn tracer_pid(&self) -> Option<u32> {
        let shell = self.show("#{pane_pid}");
        let children =
            std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.name])
            .status();
    }
}

/// The shell line that runs `top ARGS` with `env`, then records its exit code and the terminal's modes.
fn line(dir: &Path, env: &str, args: &str) -> String {
    format!(
        "{env} {TRACER} top {args} 2>{err}; echo $? > {code}; stty -a > {stty}; sleep 600",
        err = dir.join("stderr").display(),
        code = dir.join("code").display(),
        stty = dir.join("stty").display(),
    )
}

fn wait_for(what: &str, secs: u64, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for `top` to exit; its exit code, and the terminal checked to be as it was.
fn exited(pane: &Pane, dir: &Path) -> i32 {
    let code = dir.join("code");
    wait_for("top to exit", 20, || {
        std::fs::read_to_string(&code).is_ok_and(|c| !c.trim().is_empty())
    });
    let stty = dir.join("stty");
    wait_for("stty", 5, || {
        std::fs::metadata(&stty).is_ok_and(|m| m.len() > 0)
    });
    let modes = std::fs::read_to_string(&stty).expect("stty -a");
    let words: Vec<&str> = modes.split_whitespace().collect();
    for mode in ["icanon", "echo", "isig", "icrnl"] {
        assert!(
            words.contains(&mode),
            "the terminal was left without {mode}: {modes}"
        );
    }
    assert_eq!(
        pane.show("#{alternate_on}"),
        "0",
        "the alternate screen was not left"
    );
    assert_eq!(
        pane.show("#{cursor_flag}"),
        "1",
        "the cursor was left hidden"
    );
    std::fs::read_to_string(&code)
        .expect("code")
        .trim()
        .parse()
        .expect("an exit code")
}

/// One flow row of the screen: (src, dst) → (CNP/s, model Gb/s).
fn rows(screen: &str) -> BTreeMap<(String, String), (String, Option<f64>)> {
    let mut out = BTreeMap::new();
    for l in screen.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() >= 7 && w[0].starts_with("10.0.0.") && w[1].starts_with("10.0.0.") {
            out.insert(
                (w[0].to_string(), w[1].to_string()),
                (w[5].to_string(), w[6].parse().ok()),
            );
        }
    }
    out
}

#[test]
fn top_replays_the_incast_on_a_terminal_and_gives_it_back() {
    if !require(
        "top_replays_the_incast_on_a_terminal_and_gives_it_back",
        have("tmux"),
        "needs tmux to run top in a terminal and read its screen (apt-get install tmux; cargo xtask install)",
    ) {
        return;
    }
    let sample = common::sample("incast_dcqcn");
    let dir = tempfile::tempdir().unwrap();
    let pane = Pane::start(
        "q",
        &line(
            dir.path(),
            "",
            &format!("--replay {} --speed 0.001", sample.display()),
        ),
    );
    // Each sender's CNPs and model, as seen over the replay: the lowest model rate, and the highest after it.
    let senders = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"];
    let mut cnps_seen = BTreeMap::new();
    let mut low: BTreeMap<&str, f64> = BTreeMap::new();
    let mut recovered: BTreeMap<&str, f64> = BTreeMap::new();
    let mut screens = Vec::new();
    wait_for("the replay to end", 30, || {
        let s = pane.screen();
        for ((src, dst), (cnps, model)) in rows(&s) {
            let Some(&sender) = senders.iter().find(|x| **x == src) else {
                continue;
            };
            if dst != "10.0.0.5" {
                continue;
            }
            if cnps != "0" {
                cnps_seen.insert(sender, cnps);
            }
            if let Some(m) = model {
                let l = low.entry(sender).or_insert(m);
                if m < *l {
                    *l = m;
                    recovered.remove(sender);
                } else if m > *l {
                    let r = recovered.entry(sender).or_insert(m);
                    *r = r.max(m);
                }
            }
        }
        if screens.is_empty() && s.contains("model Gb/s") {
            assert_eq!(
                pane.show("#{alternate_on}"),
                "1",
                "top draws on the alternate screen"
            );
        }
        screens.push(s.clone());
        s.contains("ENDED")
    });
    let last = screens.last().cloned().unwrap_or_default();
    assert_eq!(
        cnps_seen.len(),
        4,
        "every sender's CNPs on screen: {cnps_seen:?}\n{last}"
    );
    assert_eq!(
        low.len(),
        4,
        "every sender's model on screen: {low:?}\n{last}"
    );
    for s in senders {
        // The line is 25 Gb/s: the model cut each sender well below it, and brought it back up.
        assert!(low[s] < 15.0, "{s}'s model never fell: {low:?}");
        assert!(
            recovered.get(s).is_some_and(|r| *r > low[s] * 1.5),
            "{s}'s model did not recover: low {low:?}, after {recovered:?}"
        );
    }
    assert!(
        last.contains("reverse_traffic"),
        "the pairing's evidence is shown:\n{last}"
    );
    pane.keys("q");
    assert_eq!(exited(&pane, dir.path()), 0, "q exits 0");
    let after = pane.screen();
    assert!(
        !after.contains("model Gb/s"),
        "the view was left on the screen:\n{after}"
    );
}

/// Ctrl-C, SIGTERM and a panic each end `top` with the terminal given back.
#[test]
fn top_gives_the_terminal_back_on_ctrl_c_sigterm_and_a_panic() {
    if !require(
        "top_gives_the_terminal_back_on_ctrl_c_sigterm_and_a_panic",
        have("tmux"),
        "needs tmux to run top in a terminal and read its screen (apt-get install tmux; cargo xtask install)",
    ) {
        return;
    }
    let sample = common::sample("incast_dcqcn");
    let args = format!("--replay {} --speed 0.0001", sample.display());
    for how in ["ctrl-c", "sigterm", "panic"] {
        let dir = tempfile::tempdir().unwrap();
        let env = if how == "panic" {
            format!("{}=1", tracer::top::PANIC_ENV)
        } else {
            String::new()
        };
        let pane = Pane::start(how, &line(dir.path(), &env, &args));
        wait_for("the view", 15, || pane.screen().contains("model Gb/s"));
        match how {
            "ctrl-c" => pane.keys("C-c"),
            "sigterm" => {
                let pid = pane.tracer_pid().expect("top's pid");
                let ok = Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
                assert!(ok.is_ok_and(|s| s.success()));
            }
            _ => {}
        }
        let code = exited(&pane, dir.path());
        let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
        if how == "panic" {
            assert_eq!(code, 101, "a panic exits 101: {stderr}");
            assert!(
                stderr.contains("panicked"),
                "the panic's message was kept: {stderr}"
            );
        } else {
            assert_eq!(code, 0, "{how} exits 0: {stderr}");
        }
    }
}

/// Live: `top -i vb` in a pane inside a network namespace while tcpreplay sends the incast sample through
/// the veth pair; the screen shows its senders, their CNPs and the model.
#[test]
fn top_live_on_a_veth_shows_the_replayed_flows() {
    let what = "top_live_on_a_veth_shows_the_replayed_flows";
    if !common::require_netns(what)
        || !require(
            what,
            have("tmux"),
            "needs tmux (apt-get install tmux; cargo xtask install)",
        )
    {
        return;
    }
    let ns = common::netns("top");
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("incast.pcap");
    common::replayable(&common::sample("incast_dcqcn"), &pcap);
    let ready = dir.path().join("ready");
    let written = dir.path().join("live.pcapng");
    let pane = Pane::start(
        "live",
        &format!(
            "ip netns exec {ns} {TRACER} top -i vb -w {w} --ready-file {r} 2>{err}; echo $? > {code}; \
             stty -a > {stty}; sleep 600",
            ns = ns.name,
            w = written.display(),
            r = ready.display(),
            err = dir.path().join("stderr").display(),
            code = dir.path().join("code").display(),
            stty = dir.path().join("stty").display(),
        ),
    );
    wait_for("the capture to be ready", 20, || ready.exists());
    // Enough of the incast, looped, for a few bins of one second.
    let mut senders = std::collections::BTreeSet::new();
    let mut modelled = std::collections::BTreeSet::new();
    let mut last = String::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while Instant::now() < deadline && (senders.len() < 4 || modelled.len() < 4) {
        ns.replay(&pcap, 20);
        std::thread::sleep(Duration::from_millis(1200));
        last = pane.screen();
        for ((src, dst), (cnps, model)) in rows(&last) {
            if dst == "10.0.0.5" && cnps != "0" && cnps != "-" {
                senders.insert(src.clone());
            }
            if dst == "10.0.0.5" && model.is_some() {
                modelled.insert(src);
            }
        }
    }
    assert_eq!(
        senders.len(),
        4,
        "the four senders with CNPs: {senders:?}\n{last}"
    );
    assert_eq!(
        modelled.len(),
        4,
        "the four senders' models: {modelled:?}\n{last}"
    );
    assert!(last.contains("engine pcap"), "{last}");
    eprintln!("the screen live:\n{last}");
    pane.keys("q");
    assert_eq!(exited(&pane, dir.path()), 0);
    // The file was written as `capture` writes it.
    let frames = common::frames(&written).0;
    assert!(frames.len() > 1000, "{} frames written", frames.len());
}

/// Without a terminal (a pipe, CI), a replay prints the capture's line per bin, labelled with its capture
/// time, and nothing of the screen.
#[test]
fn top_without_a_terminal_prints_a_line_per_bin() {
    let out = Command::new(TRACER)
        .args(["top", "--speed", "max", "--bin", "500us", "--replay"])
        .arg(common::sample("incast_dcqcn"))
        .output()
        .expect("top runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    // 2.994 ms of capture in bins of 500 µs: six, the last one partial.
    assert_eq!(lines.len(), 6, "{text}");
    assert!(lines[0].starts_with("[+0.000000 s] frames"), "{text}");
    assert!(lines[5].starts_with("[+0.002500 s] frames"), "{text}");
    assert!(
        lines.iter().any(|l| !l.contains("CNP/s        0")),
        "CNPs per second shown: {text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "no escape sequence on a pipe: {text:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1714 frames"), "{stderr}");
}

/// A capture that cannot start (no such interface, or no privileges) ends `top` at once with its error and
/// exit code 2, the terminal given back.
#[test]
fn top_on_a_capture_that_cannot_start_says_why_and_exits_2() {
    if !require(
        "top_on_a_capture_that_cannot_start_says_why_and_exits_2",
        have("tmux"),
        "needs tmux to run top in a terminal (apt-get install tmux; cargo xtask install)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pane = Pane::start("fails", &line(dir.path(), "", "-i rocetrace-none0"));
    assert_eq!(exited(&pane, dir.path()), 2);
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
    assert!(
        stderr.contains("roce-tracer: error: top's capture:"),
        "{stderr}"
    );
}
