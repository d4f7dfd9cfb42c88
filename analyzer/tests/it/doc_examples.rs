//! The examples in the README, the samples' README and docs/annotate.md print what the binary prints today.
//!
//! Every line `$ roce-analyzer ARGS` in a fenced block is run, and the lines after it (up to the next `$` line or
//! the end of the block) must be its output, line for line, where a line `...` stands for any number of lines.
//! A page whose example drifted from the binary fails here, with both texts.

use std::path::Path;

use crate::common::{analyzer, run, workspace};

/// One example: the command's arguments and the lines it must print.
#[derive(Debug)]
struct Example {
    line: usize,
    args: Vec<String>,
    expected: Vec<String>,
}

/// Splits a command line as a shell would for these examples: words, and "double" or 'single' quoted words.
fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

fn examples(page: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut in_block = false;
    let mut current: Option<Example> = None;
    for (i, l) in page.lines().enumerate() {
        if l.starts_with("```") {
            in_block = !in_block;
            out.extend(current.take());
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(cmd) = l.strip_prefix("$ ") {
            out.extend(current.take());
            let w = words(cmd);
            if w.first().map(String::as_str) == Some("roce-analyzer") {
                current = Some(Example {
                    line: i + 1,
                    args: w[1..].to_vec(),
                    expected: Vec::new(),
                });
            }
        } else if let Some(e) = &mut current {
            e.expected.push(l.trim_end().to_string());
        }
    }
    out.extend(current);
    out
}

/// Whether `got` is `want` with each `...` line standing for any run of lines.
fn matches(want: &[String], got: &[&str]) -> bool {
    match want.split_first() {
        None => got.is_empty(),
        Some((w, rest)) if w == "..." => (0..=got.len()).any(|k| matches(rest, &got[k..])),
        Some((w, rest)) => got.first().is_some_and(|g| g == w) && matches(rest, &got[1..]),
    }
}

/// Runs every example of `page`, in a scratch directory where `links` (name → file) make the paths the page
/// uses resolve, and returns a description of each that differs.
fn check_page(page: &Path, links: &[(String, std::path::PathBuf)]) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap();
    let list = examples(&text);
    assert!(!list.is_empty(), "{}: no example found", page.display());
    let dir = tempfile::tempdir().unwrap();
    for (name, target) in links {
        std::os::unix::fs::symlink(target, dir.path().join(name)).unwrap();
    }
    let mut bad = Vec::new();
    for e in list {
        let out = run(analyzer().current_dir(dir.path()).args(&e.args));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let got: Vec<&str> = stdout.lines().map(str::trim_end).collect();
        if !out.status.success() || !matches(&e.expected, &got) {
            bad.push(format!(
                "{}:{}: roce-analyzer {}\n--- the page says:\n{}\n--- the binary prints (exit {:?}):\n{}{}",
                page.display(),
                e.line,
                e.args.join(" "),
                e.expected.join("\n"),
                out.status.code(),
                stdout,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    bad
}

#[test]
fn the_readmes_examples_print_what_the_binary_prints() {
    let root = workspace();
    let mut bad = check_page(
        &root.join("README.md"),
        &[("samples".to_string(), root.join("samples"))],
    );
    let captures = root.join("samples/captures");
    let links: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(&captures)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), p)
        })
        .collect();
    bad.extend(check_page(&root.join("samples/README.md"), &links));
    bad.extend(check_page(
        &root.join("docs/annotate.md"),
        &[("samples".to_string(), root.join("samples"))],
    ));
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
}

#[test]
fn the_example_matcher_takes_ellipses_and_quotes() {
    let want: Vec<String> = ["a", "...", "d"].iter().map(|s| s.to_string()).collect();
    assert!(matches(&want, &["a", "b", "c", "d"]));
    assert!(matches(&want, &["a", "d"]));
    assert!(!matches(&want, &["a", "b"]));
    assert!(!matches(&want, &["x", "d"]));
    assert_eq!(
        words(r#"decode -Y "roce and ecn == ce" -c 2 x.pcapng"#),
        ["decode", "-Y", "roce and ecn == ce", "-c", "2", "x.pcapng"]
    );
}
