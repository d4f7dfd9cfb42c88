//! The page: one HTML file with its CSS and charts inside, so it can be mailed, attached to a ticket or
//! opened on an air-gapped jump host and still show everything.

use std::fmt::Write;

/// Escapes text for HTML element content and quoted attribute values. Everything taken from a capture goes
/// through here: interface names, file names and finding texts are attacker-controlled in a capture
/// somebody else recorded.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Prepares plotters' SVG for inlining: HTML5 needs no namespace declaration, and dropping it keeps the page
/// free of any URL at all, which makes "references nothing outside" checkable with a plain search.
pub fn inline_svg(svg: &str) -> String {
    svg.replace(" xmlns=\"http://www.w3.org/2000/svg\"", "")
}

const CSS: &str = "
body { font-family: 'DejaVu Sans', Arial, sans-serif; margin: 24px auto; max-width: 1260px; color: #222; }
h1 { font-size: 26px; margin-bottom: 4px; }
h2 { font-size: 20px; border-bottom: 2px solid #ddd; padding-bottom: 4px; margin-top: 32px; }
.meta { color: #555; font-size: 14px; }
.headline { background: #f2f6fa; border: 1px solid #cddcea; padding: 8px 14px; margin: 10px 0; }
.verdict { font-size: 19px; font-weight: bold; margin: 4px 0 6px 0; }
.facts { font-size: 14px; margin: 0; }
.facts span { margin-right: 20px; white-space: nowrap; }
.note { color: #555; font-size: 14px; }
figure { margin: 12px 0; }
figure svg { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 13px; color: #555; }
.finding { border-left: 6px solid #999; background: #f7f7f7; padding: 8px 12px; margin: 10px 0; }
.finding.problem { border-color: #c62828; }
.finding.warning { border-color: #ef8f00; }
.finding.info { border-color: #1565c0; }
.finding h3 { margin: 0 0 4px 0; font-size: 16px; }
.sev { display: inline-block; min-width: 64px; font-size: 12px; text-transform: uppercase; font-weight: bold; }
.problem .sev { color: #c62828; } .warning .sev { color: #b36b00; } .info .sev { color: #1565c0; }
.code { font-family: 'DejaVu Sans Mono', monospace; font-size: 12px; color: #666; }
.finding ul { margin: 4px 0 0 0; font-size: 13px; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 6px; text-align: right; white-space: nowrap; }
th { background: #f0f0f0; }
td.t { text-align: left; font-family: 'DejaVu Sans Mono', monospace; }
tr.rest td { font-style: italic; background: #fafafa; }
";

/// Builds the page from sections whose bodies are already HTML (escaped where needed by their builders).
#[derive(Debug, Default)]
pub(crate) struct Page {
    body: String,
}

impl Page {
    pub fn h1(&mut self, text: &str) {
        let _ = writeln!(self.body, "<h1>{}</h1>", escape(text));
    }

    pub fn section(&mut self, id: &str, title: &str) {
        let _ = writeln!(
            self.body,
            "<h2 id=\"{}\">{}</h2>",
            escape(id),
            escape(title)
        );
    }

    /// A paragraph of plain text (escaped here).
    pub fn para(&mut self, class: &str, text: &str) {
        let _ = writeln!(
            self.body,
            "<p class=\"{}\">{}</p>",
            escape(class),
            escape(text)
        );
    }

    /// Raw HTML built by the caller from escaped pieces.
    pub fn raw(&mut self, html: &str) {
        self.body.push_str(html);
        self.body.push('\n');
    }

    /// An inline chart with a caption and a link to its PNG twin beside the page.
    pub fn figure(&mut self, svg: &str, caption: &str, png_name: &str) {
        let _ = writeln!(
            self.body,
            "<figure>{}<figcaption>{} <a href=\"{}\">PNG</a></figcaption></figure>",
            inline_svg(svg),
            escape(caption),
            escape(png_name)
        );
    }

    pub fn finish(self, title: &str) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n\
             <style>{CSS}</style>\n</head>\n<body>\n{}</body>\n</html>\n",
            escape(title),
            self.body
        )
    }
}

/// A table from a header and rows of cells; `text_cols` are left-aligned monospace (addresses, names).
/// Cells are escaped here.
pub fn table(
    header: &[&str],
    rows: &[Vec<String>],
    text_cols: &[usize],
    rest: Option<&[String]>,
) -> String {
    let mut s = String::from("<table>\n<tr>");
    for h in header {
        let _ = write!(s, "<th>{}</th>", escape(h));
    }
    s.push_str("</tr>\n");
    let mut row = |cells: &[String], class: &str| {
        let _ = write!(s, "<tr{class}>");
        for (i, c) in cells.iter().enumerate() {
            let cls = if text_cols.contains(&i) {
                " class=\"t\""
            } else {
                ""
            };
            let _ = write!(s, "<td{cls}>{}</td>", escape(c));
        }
        s.push_str("</tr>\n");
    };
    for r in rows {
        row(r, "");
    }
    if let Some(r) = rest {
        row(r, " class=\"rest\"");
    }
    s.push_str("</table>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(escape("10.0.0.1 → QP 0x11"), "10.0.0.1 → QP 0x11");
    }

    #[test]
    fn table_cells_are_escaped() {
        let t = table(&["a<b"], &[vec!["<i>".into()]], &[0], None);
        assert!(t.contains("<th>a&lt;b</th>"));
        assert!(t.contains("<td class=\"t\">&lt;i&gt;</td>"));
    }
}
