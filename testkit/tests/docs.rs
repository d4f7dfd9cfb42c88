//! The documentation keeps its shape: the README stays a short guide that opens with the two commands a
//! newcomer runs first, and no relative link in the project's Markdown points at a file or a heading that is
//! gone. Pages move and get renamed as the code does; a dead link is found here, not by a reader.
//!
//! It lives in testkit because testkit is a default member with no dependencies: `cargo test --workspace`
//! runs it, and it costs no build.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The README is a first page, not a manual: past this the reference belongs in `docs/`.
const README_MAX_BYTES: usize = 15 * 1024;

/// What the README's first code block must say, line by line (each line may carry a trailing comment).
const FIRST_COMMANDS: [&str; 2] = [
    "cargo run -p analyzer -- report samples/captures/incast_dcqcn.pcapng -o report",
    "cargo xtask test",
];

#[test]
fn readme_is_a_short_guide() {
    let path = testkit::workspace().join("README.md");
    let text = fs::read_to_string(&path).expect("README.md is readable");
    assert!(
        text.len() <= README_MAX_BYTES,
        "README.md is {} bytes, above {README_MAX_BYTES}: move reference material into docs/",
        text.len()
    );
}

#[test]
fn readme_starts_with_the_two_commands() {
    let text =
        fs::read_to_string(testkit::workspace().join("README.md")).expect("README.md is readable");
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let title = lines.next().unwrap_or_default();
    assert!(
        title.starts_with("# "),
        "README.md must open with its title, found {title:?}"
    );
    let fence = lines.next().unwrap_or_default();
    assert!(
        fence.starts_with("```"),
        "the first thing after the README's title must be the code block of the two commands, found {fence:?}"
    );
    for want in FIRST_COMMANDS {
        let line = lines.next().unwrap_or_default();
        let command = line.split('#').next().unwrap_or_default().trim();
        assert_eq!(
            command, want,
            "the README's first code block must list the two commands in order"
        );
    }
    let close = lines.next().unwrap_or_default();
    assert!(
        close.starts_with("```"),
        "the first code block holds only the two commands, found {close:?}"
    );
}

#[test]
fn every_relative_link_resolves() {
    let root = testkit::workspace();
    let pages = markdown_pages(&root);
    assert!(
        pages.iter().any(|p| p.ends_with("README.md"))
            && pages.iter().any(|p| p.starts_with(root.join("docs"))),
        "found no README or docs pages under {}",
        root.display()
    );
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = fs::read_to_string(page).expect("a Markdown page is readable");
        for target in links(&text) {
            if is_external(&target) {
                continue;
            }
            checked += 1;
            if let Err(why) = resolve(page, &target) {
                broken.push(format!(
                    "{}: ({target}) {why}",
                    page.strip_prefix(&root).unwrap_or(page).display()
                ));
            }
        }
    }
    assert!(
        checked > 0,
        "no relative links found: the link parser is broken"
    );
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
}

/// The pages a reader reaches from the README: the root's Markdown files, everything under `docs/`, and each
/// top-level directory's README.
fn markdown_pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = Vec::new();
    for entry in fs::read_dir(root)
        .expect("the workspace is readable")
        .flatten()
    {
        let path = entry.path();
        if is_markdown(&path) {
            pages.push(path);
        } else if path.is_dir() {
            let readme = path.join("README.md");
            if readme.is_file() && !path.ends_with("target") {
                pages.push(readme);
            }
        }
    }
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for path in entries.flatten().map(|e| e.path()) {
            if path.is_dir() {
                dirs.push(path);
            } else if is_markdown(&path) {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages.dedup();
    pages
}

fn is_markdown(p: &Path) -> bool {
    p.is_file() && p.extension().is_some_and(|e| e == "md")
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// The targets of the inline links and images of a page (`[text](target)`, `![alt](target)`), leaving out
/// fenced code blocks and code spans, where brackets are code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in outside_fences(text) {
        let prose = without_code_spans(line);
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            // `[text](target "title")`: the target ends at the first space.
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            let target = target.trim_start_matches('<').trim_end_matches('>');
            if !target.is_empty() {
                out.push(target.to_string());
            }
            rest = &after[end..];
        }
    }
    out
}

/// The lines of a page that are not inside a fenced code block (nor its fences).
fn outside_fences(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

fn without_code_spans(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// Checks that `target`, relative to `page`, names an existing file or directory and, with `#anchor`, a
/// heading of that Markdown page.
fn resolve(page: &Path, target: &str) -> Result<(), String> {
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().expect("a page has a directory").join(path)
    };
    if !file.exists() {
        return Err(format!("{} does not exist", file.display()));
    }
    let Some(anchor) = anchor else { return Ok(()) };
    if !is_markdown(&file) {
        return Ok(());
    }
    let text = fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    if heading_anchors(&text).contains(anchor) {
        Ok(())
    } else {
        Err(format!(
            "{} has no heading with the anchor #{anchor}",
            file.display()
        ))
    }
}

/// The anchors a Markdown renderer gives a page's headings, the way GitHub makes them: lower case, spaces as
/// hyphens, punctuation other than `-` and `_` dropped, and `-1`, `-2`... for repeats.
fn heading_anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for line in outside_fences(text).filter(|l| l.starts_with('#')) {
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                '-' | '_' => Some(c),
                c if c.is_alphanumeric() => Some(c),
                _ => None,
            })
            .flat_map(char::to_lowercase)
            .collect();
        let mut anchor = slug.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

#[test]
fn anchors_follow_the_renderer() {
    let anchors = heading_anchors(
        "# A `decode` page\n## Building it\n## Building it\n```\n# not a heading\n```\n",
    );
    let want: HashSet<String> = ["a-decode-page", "building-it", "building-it-1"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(anchors, want);
}

#[test]
fn links_skip_code() {
    let found = links(
        "see [a](a.md) and `[b](b.md)`\n```\n[c](c.md)\n```\n![img](x.png \"t\") [e](https://x.org)",
    );
    assert_eq!(found, ["a.md", "x.png", "https://x.org"]);
}
