//! BENCHMARKS.md, where each bench keeps one section between `<!-- bench:NAME -->` markers and rewrites only
//! that one, so the prose around the sections stays as people wrote it.

use anyhow::Result;

use crate::workspace::root;

/// Replaces the section `name` of BENCHMARKS.md with `body`. A section not there yet is appended, after
/// `intro` (a heading and a word on how it was measured) unless that is empty.
pub fn update(name: &str, body: &str, intro: &str) -> Result<()> {
    let md = root().join("BENCHMARKS.md");
    let old = std::fs::read_to_string(&md).unwrap_or_default();
    let old = if intro.is_empty() || old.contains(&open(name)) {
        old
    } else {
        format!("{}\n\n{intro}", old.trim_end())
    };
    std::fs::write(&md, splice(&old, name, body))?;
    eprintln!("xtask: updated {}", md.display());
    Ok(())
}

fn open(name: &str) -> String {
    format!("<!-- bench:{name} -->")
}

/// Replaces the section between `<!-- bench:NAME -->` markers, or appends it.
fn splice(doc: &str, name: &str, body: &str) -> String {
    let open = open(name);
    let close = format!("<!-- /bench:{name} -->");
    let section = format!("{open}\n{body}{close}");
    match (doc.find(&open), doc.find(&close)) {
        (Some(a), Some(b)) if b > a => {
            format!("{}{}{}", &doc[..a], section, &doc[b + close.len()..])
        }
        _ => format!("{}\n{}\n", doc.trim_end(), section),
    }
}

#[cfg(test)]
mod tests {
    use super::splice;

    #[test]
    fn a_section_is_replaced_in_place_and_the_rest_kept() {
        let doc = "# B\n\nintro\n<!-- bench:a -->\nold\n<!-- /bench:a -->\nafter\n";
        assert_eq!(
            splice(doc, "a", "new\n"),
            "# B\n\nintro\n<!-- bench:a -->\nnew\n<!-- /bench:a -->\nafter\n"
        );
    }

    #[test]
    fn a_missing_section_is_appended() {
        let doc = "# B\n<!-- bench:a -->\nx\n<!-- /bench:a -->\n\n";
        assert_eq!(
            splice(doc, "b", "y\n"),
            "# B\n<!-- bench:a -->\nx\n<!-- /bench:a -->\n<!-- bench:b -->\ny\n<!-- /bench:b -->\n"
        );
    }
}
