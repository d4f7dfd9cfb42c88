//! The rules of the house that a newcomer relies on, held by tests: every source file is a room of one job
//! that fits in one read (at most 900 lines before its inline tests), and the modules of a crate lean on each
//! other one way (no circle of `use` between sibling modules), so that each can be read on top of the ones it
//! uses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use testkit::workspace;

/// Lines a source file may hold before its `#[cfg(test)]` module.
const MAX_LINES: usize = 900;

/// The crates whose `src/` trees the rules cover (fuzz is a workspace of its own, its targets are one file each).
const CRATES: [&str; 10] = [
    "roce-wire",
    "roce-capture",
    "roce-core",
    "analyzer",
    "samples",
    "tracer",
    "tracer-common",
    "tracer-ebpf",
    "testkit",
    "xtask",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The lines of `text` before its inline tests (a file that is all tests, such as `tests.rs`, counts none).
fn lines_before_tests(text: &str) -> usize {
    text.lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .count()
}

#[test]
fn every_source_file_fits_in_one_read() {
    let root = workspace();
    let mut over = Vec::new();
    let mut files = 0;
    for krate in CRATES {
        let mut list = Vec::new();
        rust_files(&root.join(krate).join("src"), &mut list);
        // A file of nothing but tests (`tests.rs`, declared under `#[cfg(test)]`) is no room of the house.
        list.retain(|f| f.file_name().is_none_or(|n| n != "tests.rs"));
        for f in list {
            files += 1;
            let n = lines_before_tests(&std::fs::read_to_string(&f).unwrap());
            if n > MAX_LINES {
                over.push(format!(
                    "{}: {n} lines",
                    f.strip_prefix(&root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        files > 100,
        "found only {files} source files under {}",
        root.display()
    );
    assert!(
        over.is_empty(),
        "split these by their jobs (at most {MAX_LINES} lines before the tests):\n{}",
        over.join("\n")
    );
}

/// A module's path in its crate, from its file: `src/passes/flows.rs` → `passes::flows`, `src/dcqcn/mod.rs` →
/// `dcqcn`, `src/lib.rs` and `src/main.rs` → the crate root (empty).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The modules of the crate that `text` (the file of `module`) names in its `use` lines: `crate::a::b::Item`,
/// `super::x`, `self::y`, resolved to the longest module path that exists.
fn uses(
    text: &str,
    module: &[String],
    is_dir_module: bool,
    known: &BTreeSet<Vec<String>>,
) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // A `use` may span lines; only its path prefixes matter, so each statement is read up to its `;`.
    let code: String = text
        .lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with("//") {
                ""
            } else {
                l.split(" // ").next().unwrap_or("")
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    let code = without_strings(&code);
    // Paths written in place (`crate::priority::PrioritySource` in a field's type) count as `use`s too.
    let mut statements: Vec<String> = Vec::new();
    for anchor in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(anchor) {
            let at = from + i;
            from = at + anchor.len();
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: String = code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            statements.push(format!("use {}", path.trim_end_matches(':')));
        }
    }
    for stmt in code.split(';').map(str::to_string).chain(statements) {
        let stmt = stmt.as_str();
        let s = stmt.trim();
        let Some(rest) = s
            .strip_prefix("use ")
            .or_else(|| s.strip_prefix("pub use "))
            .or_else(|| s.strip_prefix("pub(crate) use "))
            .or_else(|| s.strip_prefix("pub(super) use "))
        else {
            continue;
        };
        // A `use` path holds nothing but names, `::`, braces, commas, `*` and `as`: anything else is some
        // other text that happened to begin so (a string, a comment).
        if !rest
            .chars()
            .all(|c| c.is_alphanumeric() || c.is_whitespace() || "_:{},*".contains(c))
        {
            continue;
        }
        // The directory a relative path starts from: a `mod.rs` is its own directory.
        let here: Vec<String> = if is_dir_module {
            module.to_vec()
        } else {
            module[..module.len().saturating_sub(1)].to_vec()
        };
        for path in expand(rest.trim()) {
            let mut segs: Vec<&str> = path.split("::").map(str::trim).collect();
            let mut base: Vec<String> = match segs.first().copied() {
                Some("crate") => {
                    segs.remove(0);
                    Vec::new()
                }
                Some("super") => {
                    let mut b = module.to_vec();
                    while segs.first() == Some(&"super") {
                        segs.remove(0);
                        b.pop();
                    }
                    b
                }
                Some("self") => {
                    segs.remove(0);
                    module.to_vec()
                }
                // A sibling or child named without `self::` (edition 2018+ relative paths).
                Some(first)
                    if known.contains(&[here.clone(), vec![first.to_string()]].concat()) =>
                {
                    here.clone()
                }
                _ => continue,
            };
            let mut best = None;
            for s in segs {
                base.push(s.to_string());
                if known.contains(&base) {
                    best = Some(base.clone());
                }
            }
            if let Some(m) = best {
                out.push(m);
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `code` with the contents of its string literals (plain and raw) blanked, so that text in them is never read
/// as a path; a `'"'` character literal is not the start of a string.
fn without_strings(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' && chars.get(i + 1) == Some(&'"') && chars.get(i + 2) == Some(&'\'') {
            out.push_str("' '");
            i += 3;
            continue;
        }
        if c == 'r' && matches!(chars.get(i + 1), Some('"' | '#')) {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) == Some(&'"') {
                let close: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let body = i + 2 + hashes;
                let rest: String = chars[body..].iter().collect();
                let len = rest
                    .find(&close)
                    .map_or(rest.chars().count(), |e| rest[..e].chars().count());
                out.push_str("\"\"");
                i = body + len + close.chars().count();
                continue;
            }
        }
        if c == '"' {
            out.push_str("\"\"");
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else {
        return vec![path.split(" as ").next().unwrap_or(path).trim().to_string()];
    };
    let prefix = &path[..open];
    let close = path.rfind('}').filter(|&c| c > open).unwrap_or(path.len());
    let inner = &path[open + 1..close];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(&format!("{prefix}{p}")))
        .collect()
}

/// Whether one module is the other or contains it: a parent and its children are one room's parts.
fn related(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

#[test]
fn modules_lean_on_each_other_one_way() {
    let root = workspace();
    let mut circles = Vec::new();
    for krate in CRATES {
        let src = root.join(krate).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        // Binaries under src/bin are crates of their own.
        files.retain(|f| !f.strip_prefix(&src).unwrap().starts_with("bin"));
        let known: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(&src, f)).collect();
        let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for f in &files {
            let m = module_of(&src, f);
            let dir_module = f
                .file_name()
                .is_some_and(|n| n == "mod.rs" || n == "lib.rs" || n == "main.rs");
            let text = std::fs::read_to_string(f).unwrap();
            for to in uses(&text, &m, dir_module, &known) {
                if !related(&m, &to) {
                    edges.entry(m.clone()).or_default().insert(to);
                }
            }
        }
        // Each edge between two modules also stands for their ancestors up to their common one: a circle
        // through siblings' children is a circle of the siblings.
        let mut lifted: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (from, tos) in &edges {
            for to in tos {
                let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
                let (a, b) = (
                    from[..=common.min(from.len() - 1)].to_vec(),
                    to[..=common.min(to.len() - 1)].to_vec(),
                );
                if a != b {
                    lifted.entry(a).or_default().insert(b);
                }
            }
        }
        for (a, tos) in &lifted {
            for b in tos {
                if reaches(&lifted, b, a, &mut BTreeSet::new()) && a < b {
                    circles.push(format!("{krate}: {} ⇄ {}", a.join("::"), b.join("::")));
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "these modules use each other (directly or round a circle); make the arrows point one way:\n{}",
        circles.join("\n")
    );
}

fn reaches(
    g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    from: &Vec<String>,
    to: &Vec<String>,
    seen: &mut BTreeSet<Vec<String>>,
) -> bool {
    if from == to {
        return true;
    }
    if !seen.insert(from.clone()) {
        return false;
    }
    g.get(from)
        .is_some_and(|next| next.iter().any(|n| reaches(g, n, to, seen)))
}

#[test]
fn the_module_reader_finds_what_a_file_uses() {
    let known: BTreeSet<Vec<String>> = [vec!["a"], vec!["a", "b"], vec!["c"], vec!["c", "d"]]
        .into_iter()
        .map(|v| v.into_iter().map(String::from).collect())
        .collect();
    let text = "use crate::a::b::{X, Y};\nuse super::d::Z;\nuse std::io;\n// use crate::c;\n";
    let m: Vec<String> = vec!["c".into(), "e".into()];
    let got = uses(text, &m, false, &known);
    assert_eq!(
        got,
        vec![
            vec!["a".to_string(), "b".to_string()],
            vec!["c".to_string(), "d".to_string()],
        ]
    );
    let inline = "fn f() -> crate::c::d::T { todo!() }\nconst S: &str = \"use crate::a\";\n";
    assert_eq!(
        uses(inline, &m, false, &known),
        [vec!["c".to_string(), "d".to_string()]]
    );
    assert_eq!(lines_before_tests("a\nb\n#[cfg(test)]\nc\n"), 2);
    assert_eq!(expand("a::{b, c::{d, e}}"), ["a::b", "a::c::d", "a::c::e"]);
}
