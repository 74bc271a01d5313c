//! The drawing parts of the HTML report: escaping, line charts with real axes (ticks,
//! gridlines, units, time from the capture's first frame), shaded spans, numbers as a person
//! reads them, tables.

use std::fmt::Write as _;

pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

pub(crate) const W: f64 = 900.0;
const H: f64 = 220.0;
const PAD: f64 = 84.0;

/// What a line chart shows besides its series.
pub(crate) struct Axes<'a> {
    pub title: &'a str,
    /// The y unit: `b/s` (bits per second), `%` (values in percent), `/s`, or "" (a share).
    pub unit: &'a str,
    /// Seconds per bucket, and the first bucket's time from the capture's first frame.
    pub dt: f64,
    pub t0: f64,
    /// What an all-zero chart says (e.g. "no CE marks in this capture").
    pub empty: &'a str,
}

/// Ticks on each axis (and gridlines across).
const TICKS: usize = 4;

/// A line chart: `series` of (name, colour, values per bucket), y from 0 to a round value at
/// or above the maximum, with ticks at round values, gridlines and labels on both axes (time
/// from the capture's first frame). No data: one sentence instead (no empty frame).
pub(crate) fn line_chart(a: &Axes<'_>, series: &[(&str, &str, Vec<f64>)]) -> String {
    let n = series.iter().map(|s| s.2.len()).max().unwrap_or(0);
    let max = series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .fold(0.0f64, f64::max);
    if n == 0 || max <= 0.0 || !max.is_finite() {
        // Nothing to draw: a sentence, not an empty frame.
        return format!(
            "<p class=\"no-data\">{}: {}.</p>",
            esc(a.title),
            esc(a.empty)
        );
    }
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<figure><figcaption>{}</figcaption><svg viewBox="0 0 {W} {H}" width="100%" preserveAspectRatio="xMinYMin meet" role="img" aria-label="{}">"#,
        esc(a.title),
        esc(a.title)
    );
    let (x0, y0, x1, y1) = (PAD, H - 24.0, W - 8.0, 8.0);
    let _ = write!(
        svg,
        r##"<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#888"/><line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#888"/>"##
    );
    // The y axis: 0 to the first round value at or above the maximum, in round steps (1, 2
    // or 5 times a power of ten), each with a gridline and its value.
    let ystep = nice_step(if max > 0.0 { max } else { 1.0 }, TICKS);
    let top = (max / ystep).ceil().max(1.0) * ystep;
    let yticks = (top / ystep).round() as usize;
    let yfmt = Scale::new(top, ystep, a.unit);
    for k in 0..=yticks {
        let v = ystep * k as f64;
        let y = y0 - (y0 - y1) * v / top;
        if k > 0 {
            let _ = write!(
                svg,
                r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#e4e4e4"/>"##
            );
        }
        let _ = write!(
            svg,
            r#"<text x="{}" y="{:.1}" class="ax tick y" text-anchor="end">{}</text>"#,
            x0 - 4.0,
            y + 4.0,
            esc(&yfmt.label(v))
        );
    }
    // The x axis: time from the capture's first frame, at round times. The first bucket is at
    // the left end, the last at the right (as the lines and the shaded spans).
    let span = (n.max(2) - 1) as f64 * a.dt;
    let xstep = nice_step(span.max(1e-9), TICKS + 1);
    let mut t = (a.t0 / xstep).ceil() * xstep;
    while t <= a.t0 + span + xstep * 1e-9 {
        let x = x0 + (x1 - x0) * (t - a.t0) / span.max(1e-9);
        let anchor = if x - x0 < 20.0 {
            "start"
        } else if x1 - x < 20.0 {
            "end"
        } else {
            "middle"
        };
        let _ = write!(
            svg,
            r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{}" stroke="#888"/><text x="{x:.1}" y="{}" class="ax tick x" text-anchor="{anchor}">{}</text>"##,
            y0 + 4.0,
            H - 6.0,
            time_label(t, xstep, a.t0 + span)
        );
        t += xstep;
    }
    let sx = (x1 - x0) / (n.max(2) - 1) as f64;
    for (name, colour, values) in series {
        let pts: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", x0 + i as f64 * sx, y0 - v / top * (y0 - y1)))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"><title>{}</title></polyline>"#,
            pts.join(" "),
            esc(name)
        );
        if let [only] = &pts[..] {
            // One bucket: a line of one point is invisible.
            let (x, y) = only.split_once(',').unwrap_or(("0", "0"));
            let _ = write!(svg, r#"<circle cx="{x}" cy="{y}" r="3" fill="{colour}"/>"#);
        }
    }
    svg.push_str("</svg><div class=\"legend\">");
    for (name, colour, _) in series {
        let _ = write!(
            svg,
            r#"<span><i style="background:{colour}"></i>{}</span>"#,
            esc(name)
        );
    }
    svg.push_str("</div></figure>");
    svg
}

/// A count as a person reads it: thousands separated (13,382,400).
pub(crate) use crate::export::report::thousands as count;

/// Bytes as a person reads them (13.4 MB), the exact number on hover. The cell is HTML.
pub(crate) fn bytes(n: u64) -> String {
    format!(
        r#"<span title="{} bytes">{}</span>"#,
        count(n),
        crate::export::report::human_bytes(n as f64)
    )
}

/// A network rate in bits per second as a person reads it (12.3 Mb/s), the exact number on
/// hover. The cell is HTML.
pub(crate) fn rate(bytes_per_second: f64) -> String {
    format!(
        r#"<span title="{} b/s">{}</span>"#,
        count((bytes_per_second * 8.0).round() as u64),
        crate::detect::findings::bits_per_second(bytes_per_second)
    )
}

/// Makes every `table.sortable` sortable by a click (or Enter) on a column heading: numbers by
/// value (a cell's exact value on hover where it has one, so 1.2 GB sorts above 900 MB; hex
/// QPs by value), text by the reader's collation; a second click reverses. Inline, so the page
/// stays one file with no network access.
pub(crate) const SORT_SCRIPT: &str = r#"<script>
(function(){
function key(c){
  var t=c.querySelector('[title]'), s=(t?t.getAttribute('title'):c.textContent).trim();
  if(/^0x[0-9a-f]+$/i.test(s)) return parseInt(s,16);
  var m=s.replace(/,/g,'').match(/^-?\d+(\.\d+)?(e[+-]?\d+)?/i);
  return m?parseFloat(m[0]):s.toLowerCase();
}
function cmp(a,b){
  if(typeof a==='number'&&typeof b==='number') return a-b;
  if(typeof a==='number') return -1;
  if(typeof b==='number') return 1;
  return a.localeCompare(b);
}
document.querySelectorAll('table.sortable').forEach(function(t){
  var hs=t.tHead?t.tHead.rows[0].cells:[];
  Array.prototype.forEach.call(hs,function(th,i){
    th.tabIndex=0;th.title='sort by this column';
    function go(){
      var asc=th.getAttribute('aria-sort')!=='ascending';
      Array.prototype.forEach.call(hs,function(h){h.removeAttribute('aria-sort');});
      th.setAttribute('aria-sort',asc?'ascending':'descending');
      var b=t.tBodies[0],rows=Array.prototype.slice.call(b.rows);
      rows.sort(function(x,y){var d=cmp(key(x.cells[i]),key(y.cells[i]));return asc?d:-d;});
      rows.forEach(function(r){b.appendChild(r);});
    }
    th.addEventListener('click',go);
    th.addEventListener('keydown',function(e){if(e.key==='Enter')go();});
  });
});
})();
</script>"#;

/// A round step (1, 2 or 5 times a power of ten) that cuts `span` into about `parts`.
pub(crate) fn nice_step(span: f64, parts: usize) -> f64 {
    let raw = span / parts as f64;
    let p = 10f64.powf(raw.log10().floor());
    let f = raw / p;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * p
}

/// The decimals a round `step` needs so that its multiples read apart.
fn decimals(step: f64) -> usize {
    (-step.log10().floor()).max(0.0) as usize
}

/// A time on the x axis: seconds (milliseconds on an axis that ends before a tenth of a
/// second), with the decimals the step needs, so that no two ticks read the same.
fn time_label(t: f64, step: f64, end: f64) -> String {
    let t = if t.abs() < step * 1e-6 { 0.0 } else { t };
    if end < 0.1 {
        format!("{:.*} ms", decimals(step * 1e3), t * 1e3)
    } else {
        format!("{:.*} s", decimals(step), t)
    }
}

/// How a y axis writes its values: one unit prefix for the whole axis (from its top), the
/// decimals its step needs.
struct Scale<'a> {
    unit: &'a str,
    div: f64,
    prefix: &'static str,
    decimals: usize,
}

impl<'a> Scale<'a> {
    fn new(top: f64, step: f64, unit: &'a str) -> Scale<'a> {
        let (div, prefix) = match unit {
            "%" | "" | "ms" => (1.0, ""),
            _ if top >= 1e9 => (1e9, "G"),
            _ if top >= 1e6 => (1e6, "M"),
            _ if top >= 1e3 => (1e3, "k"),
            _ => (1.0, ""),
        };
        Scale {
            unit,
            div,
            prefix,
            decimals: decimals(step / div),
        }
    }

    fn label(&self, v: f64) -> String {
        let x = format!("{:.*}", self.decimals, v / self.div);
        match self.unit {
            "%" => format!("{x}%"),
            "" => x,
            "ms" => format!("{x} ms"),
            u => format!("{x} {}{u}", self.prefix),
        }
    }
}

/// Shades time spans `(from_s, to_s, label)` on a [`line_chart`] of `n` buckets of `dt`
/// (seconds from its first bucket), behind its lines.
pub(crate) fn with_spans(chart: String, n: usize, dt: f64, spans: &[(f64, f64, String)]) -> String {
    if spans.is_empty() || n == 0 || dt <= 0.0 {
        return chart;
    }
    let (x0, x1, y0, y1) = (PAD, W - 8.0, H - 24.0, 8.0);
    let sx = (x1 - x0) / (n.max(2) - 1) as f64;
    let at = |t: f64| (x0 + t / dt * sx).clamp(x0, x1);
    let mut rects = String::new();
    for (a, b, label) in spans {
        let (xa, xb) = (at(*a), at(*b));
        let _ = write!(
            rects,
            r##"<rect class="slow-step" x="{xa:.1}" y="{y1}" width="{:.1}" height="{}" fill="#e15759" fill-opacity="0.18"><title>{}</title></rect>"##,
            (xb - xa).max(1.0),
            y0 - y1,
            esc(label)
        );
    }
    // Behind the lines: right after the axes.
    match chart.find("<polyline") {
        Some(i) => format!("{}{rects}{}", &chart[..i], &chart[i..]),
        None => chart,
    }
}

/// A bucket width in words.
pub(crate) fn duration(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.0} ms", s * 1e3)
    } else {
        format!("{s:.0} s")
    }
}

/// Table rows of an ECMP group's members: member, flows, elephants, collision.
pub(crate) fn member_rows(members: &[crate::detect::ecmp::MemberView]) -> Vec<Vec<String>> {
    members
        .iter()
        .map(|m| {
            vec![
                m.member.clone(),
                m.flows.to_string(),
                m.elephants.to_string(),
                if m.colliding { "collision" } else { "" }.to_string(),
            ]
        })
        .collect()
}

pub(crate) fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let escaped: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| esc(c)).collect())
        .collect();
    table_html(head, &escaped)
}

/// A table whose cells are HTML already (numbers rocemon formatted, with their exact value
/// on hover).
pub(crate) fn table_html(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut t = String::from("<table class=\"sortable\"><thead><tr>");
    for h in head {
        let _ = write!(t, "<th>{}</th>", esc(h));
    }
    t.push_str("</tr></thead><tbody>");
    for r in rows {
        t.push_str("<tr>");
        for c in r {
            let _ = write!(t, "<td>{c}</td>");
        }
        t.push_str("</tr>");
    }
    t.push_str("</tbody></table>");
    t
}

#[cfg(test)]
mod tick_tests {
    use super::*;

    /// The tick labels of one axis of a chart: (x, y).
    fn ticks(svg: &str) -> (Vec<String>, Vec<String>) {
        let grab = |class: &str| -> Vec<String> {
            svg.split(&format!("class=\"ax tick {class}\""))
                .skip(1)
                .filter_map(|p| Some(p.split_once('>')?.1.split_once('<')?.0.to_string()))
                .collect()
        };
        (grab("x"), grab("y"))
    }

    fn chart(t0: f64, dt: f64, unit: &str, values: Vec<f64>) -> String {
        line_chart(
            &Axes {
                title: "t",
                unit,
                dt,
                t0,
                empty: "nothing",
            },
            &[("a", "#000", values)],
        )
    }

    #[test]
    fn steps_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_step(1.0, 4), 0.5);
        assert_eq!(nice_step(180.2e6, 4), 50e6);
        assert_eq!(nice_step(0.98, 5), 0.2);
        assert_eq!(nice_step(0.05, 5), 0.01);
    }

    #[test]
    fn a_short_capture_late_in_the_file_has_distinct_round_times() {
        // 50 ms of buckets from 17.8 s: every tick used to read "17.8 s".
        let (x, _) = ticks(&chart(17.8, 0.001, "b/s", vec![1.0; 51]));
        assert_eq!(
            x,
            ["17.80 s", "17.81 s", "17.82 s", "17.83 s", "17.84 s", "17.85 s"]
        );
    }

    #[test]
    fn rates_tick_at_round_values_in_one_unit() {
        let (_, y) = ticks(&chart(0.0, 1.0, "b/s", vec![0.0, 180.2e6, 135.1e6]));
        assert_eq!(y, ["0 Mb/s", "50 Mb/s", "100 Mb/s", "150 Mb/s", "200 Mb/s"]);
        let (x, _) = ticks(&chart(0.0, 0.98, "b/s", vec![1.0, 2.0, 3.0]));
        assert_eq!(x, ["0.0 s", "0.5 s", "1.0 s", "1.5 s"]);
    }

    #[test]
    fn shares_tick_at_round_percentages() {
        let (_, y) = ticks(&chart(0.0, 1.0, "%", vec![0.0, 3.7, 1.0]));
        assert_eq!(y, ["0%", "1%", "2%", "3%", "4%"]);
    }

    #[test]
    fn a_chart_without_data_is_a_sentence() {
        let c = chart(0.0, 1.0, "/s", vec![0.0; 10]);
        assert_eq!(c, "<p class=\"no-data\">t: nothing.</p>");
    }
}
