//! Reading a chart back from its SVG, as a reader of the page sees it: its shapes, its legend, and the
//! axes' scales from their tick labels. The report's tests use it to check what a chart shows against
//! the analysis, so that a snapshot accepted again cannot hide a wrong chart.

/// One SVG element: its name, attributes, and the text inside it (for `<text>`).
#[derive(Debug, Clone)]
pub struct Element {
    pub name: String,
    attrs: Vec<(String, String)>,
    pub text: String,
}

impl Element {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A numeric attribute; panics when it is missing, since every shape the tests read has its geometry.
    pub fn num(&self, key: &str) -> f64 {
        self.attr(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{} without a numeric {key}: {self:?}", self.name))
    }

    /// A polyline's vertices, in pixels.
    pub fn points(&self) -> Vec<(f64, f64)> {
        self.attr("points")
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| {
                let (x, y) = p.split_once(',')?;
                Some((x.parse().ok()?, y.parse().ok()?))
            })
            .collect()
    }

    /// A rectangle's horizontal extent, in pixels.
    pub fn x_extent(&self) -> (f64, f64) {
        let x = self.num("x");
        (x, x + self.num("width"))
    }

    /// Whether a rectangle's vertical band holds pixel row `y`.
    pub fn spans_row(&self, y: f64) -> bool {
        let top = self.num("y");
        (top..=top + self.num("height")).contains(&y)
    }
}

/// A linear map between a chart's values and pixels on one axis, fitted through its tick labels.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    at_zero: f64,
    per_unit: f64,
}

impl Scale {
    pub fn pixel(&self, value: f64) -> f64 {
        self.at_zero + self.per_unit * value
    }

    pub fn value(&self, pixel: f64) -> f64 {
        (pixel - self.at_zero) / self.per_unit
    }

    /// Least squares through (value, pixel) pairs.
    fn fit(ticks: &[(f64, f64)]) -> Scale {
        assert!(ticks.len() >= 2, "an axis needs two tick labels: {ticks:?}");
        let n = ticks.len() as f64;
        let mv = ticks.iter().map(|t| t.0).sum::<f64>() / n;
        let mp = ticks.iter().map(|t| t.1).sum::<f64>() / n;
        let cov: f64 = ticks.iter().map(|t| (t.0 - mv) * (t.1 - mp)).sum();
        let var: f64 = ticks.iter().map(|t| (t.0 - mv).powi(2)).sum();
        let per_unit = cov / var;
        Scale {
            at_zero: mp - per_unit * mv,
            per_unit,
        }
    }
}

/// A chart's SVG, parsed.
#[derive(Debug)]
pub struct Svg {
    pub elements: Vec<Element>,
}

impl Svg {
    /// Parses the flat SVG plotters writes: one element after another, no nesting but `<text>`'s content.
    pub fn parse(svg: &str) -> Svg {
        let mut elements = Vec::new();
        let mut rest = svg;
        while let Some(open) = rest.find('<') {
            rest = &rest[open + 1..];
            let Some(close) = rest.find('>') else { break };
            let tag = &rest[..close];
            rest = &rest[close + 1..];
            if tag.starts_with('/') {
                continue;
            }
            let self_closing = tag.ends_with('/');
            let tag = tag.trim_end_matches('/');
            let (name, attrs) = tag.split_once(char::is_whitespace).unwrap_or((tag, ""));
            let text = if self_closing {
                String::new()
            } else {
                let end = rest.find('<').unwrap_or(rest.len());
                unescape(rest[..end].trim())
            };
            elements.push(Element {
                name: name.to_string(),
                attrs: attributes(attrs),
                text,
            });
        }
        Svg { elements }
    }

    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.elements.iter().filter(move |e| e.name == name)
    }

    /// Every text on the chart.
    pub fn texts(&self) -> Vec<&str> {
        self.named("text").map(|e| e.text.as_str()).collect()
    }

    /// The x axis's scale, from the numeric labels under the plot (centred, on one row).
    pub fn x_scale(&self) -> Scale {
        let ticks = self.numeric_labels("middle");
        let row = ticks
            .iter()
            .map(|t| t.0.num("y") as i64)
            .max_by_key(|y| ticks.iter().filter(|t| t.0.num("y") as i64 == *y).count())
            .expect("x tick labels");
        let ticks: Vec<(f64, f64)> = ticks
            .iter()
            .filter(|t| t.0.num("y") as i64 == row)
            .map(|t| (t.1, t.0.num("x")))
            .collect();
        Scale::fit(&ticks)
    }

    /// The left y axis's scale, from the numeric labels right-aligned beside the plot.
    pub fn y_scale(&self) -> Scale {
        let ticks: Vec<(f64, f64)> = self
            .numeric_labels("end")
            .iter()
            .map(|t| (t.1, t.0.num("y")))
            .collect();
        Scale::fit(&ticks)
    }

    fn numeric_labels(&self, anchor: &str) -> Vec<(&Element, f64)> {
        self.named("text")
            .filter(|e| e.attr("text-anchor") == Some(anchor) && e.attr("transform").is_none())
            .filter_map(|e| Some((e, e.text.parse().ok()?)))
            .collect()
    }

    /// The legend's glyph for the entry `label`: the shape drawn just left of that text.
    pub fn legend_glyph(&self, label: &str) -> &Element {
        let text = self
            .named("text")
            .find(|e| e.text == label)
            .unwrap_or_else(|| panic!("no legend entry {label:?} in {:?}", self.texts()));
        // The text's y is its top (plotters writes dy="0.76em"); the glyph sits on its middle row, about six
        // pixels lower, and ends a little left of it. The nearest such shape is the entry's glyph.
        let (tx, row) = (text.num("x"), text.num("y") + 6.0);
        self.elements
            .iter()
            .filter_map(|e| {
                // A glyph is small: a short line or a box, not the legend's background.
                let (x, y) = match e.name.as_str() {
                    "rect" if e.num("width") < 30.0 && e.num("height") < 20.0 => {
                        (e.num("x"), e.num("y") + e.num("height") / 2.0)
                    }
                    "polyline" if e.points().len() == 2 => e.points()[0],
                    _ => return None,
                };
                let beside = tx - x > 0.0 && tx - x <= 40.0 && (y - row).abs() <= 8.0;
                beside.then_some((e, (y - row).abs()))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(e, _)| e)
            .unwrap_or_else(|| panic!("no glyph beside the legend entry {label:?}"))
    }

    /// The colour the legend gives `label` (a line's stroke, a filled box's fill, an outline's stroke).
    pub fn legend_color(&self, label: &str) -> String {
        let glyph = self.legend_glyph(label);
        match glyph.attr("fill") {
            Some(fill) if fill != "none" => fill.to_string(),
            _ => glyph.attr("stroke").unwrap_or_default().to_string(),
        }
    }

    /// The `<name>` shapes painted (filled or stroked) in the legend's colour for `label` on the plot,
    /// the legend's own glyph left out.
    pub fn shapes(&self, label: &str, name: &str) -> Vec<&Element> {
        let glyph = self.legend_glyph(label);
        let color = self.legend_color(label);
        let color = Some(color.as_str());
        self.elements
            .iter()
            .filter(|e| e.name == name && !std::ptr::eq(*e, glyph))
            .filter(|e| e.attr("fill") == color || e.attr("stroke") == color)
            .collect()
    }

    /// The solid line drawn for the legend entry `label`: the one polyline of its colour with more than
    /// two points.
    pub fn line(&self, label: &str) -> Vec<(f64, f64)> {
        let lines: Vec<Vec<(f64, f64)>> = self
            .shapes(label, "polyline")
            .into_iter()
            .map(Element::points)
            .filter(|p| p.len() > 2)
            .collect();
        assert_eq!(lines.len(), 1, "one line for {label:?}");
        lines.into_iter().next().unwrap_or_default()
    }
}

fn attributes(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(eq) = rest.find("=\"") {
        let key = rest[..eq].trim().to_string();
        let after = &rest[eq + 2..];
        let Some(end) = after.find('"') else { break };
        out.push((key, unescape(&after[..end])));
        rest = &after[end + 1..];
    }
    out
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The figures of a report page: each inline chart's SVG and its caption.
pub fn figures(html: &str) -> Vec<(String, String)> {
    html.split("<figure>")
        .skip(1)
        .filter_map(|f| {
            let svg_end = f.find("</svg>")? + "</svg>".len();
            let svg = f[f.find("<svg")?..svg_end].to_string();
            let cap = &f[f.find("<figcaption>")? + "<figcaption>".len()..];
            let cap = &cap[..cap.find("</figcaption>")?];
            // The caption without the link to the chart's PNG.
            let cap = cap.split(" <a href=").next().unwrap_or(cap);
            Some((unescape(cap), svg))
        })
        .collect()
}
