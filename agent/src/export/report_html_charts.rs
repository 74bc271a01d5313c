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

/// A line chart: `series` of (name, colour, values per bucket), y from 0 to the maximum, with
/// ticks, gridlines and labels on both axes (time from the capture's first frame).
pub(crate) fn line_chart(a: &Axes<'_>, series: &[(&str, &str, Vec<f64>)]) -> String {
    let n = series.iter().map(|s| s.2.len()).max().unwrap_or(0);
    let max = series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .fold(0.0f64, f64::max);
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
    // The y axis: 0 to the maximum in TICKS steps, each with a gridline and its value.
    let top = if max > 0.0 { max } else { 1.0 };
    for k in 0..=TICKS {
        let v = top * k as f64 / TICKS as f64;
        let y = y0 - (y0 - y1) * k as f64 / TICKS as f64;
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
            esc(&axis_label(v, a.unit))
        );
    }
    // The x axis: time from the capture's first frame.
    let span = n as f64 * a.dt;
    for k in 0..=TICKS {
        let x = x0 + (x1 - x0) * k as f64 / TICKS as f64;
        let anchor = match k {
            0 => "start",
            TICKS => "end",
            _ => "middle",
        };
        let _ = write!(
            svg,
            r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{}" stroke="#888"/><text x="{x:.1}" y="{}" class="ax tick x" text-anchor="{anchor}">{}</text>"##,
            y0 + 4.0,
            H - 6.0,
            seconds(a.t0 + span * k as f64 / TICKS as f64)
        );
    }
    if n > 0 && max > 0.0 {
        let sx = (x1 - x0) / (n.max(2) - 1) as f64;
        for (name, colour, values) in series {
            let pts: Vec<String> = values
                .iter()
                .enumerate()
                .map(|(i, v)| format!("{:.1},{:.1}", x0 + i as f64 * sx, y0 - v / max * (y0 - y1)))
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
    } else {
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" class="ax" text-anchor="middle">{}</text>"#,
            (x0 + x1) / 2.0,
            H / 2.0,
            esc(a.empty)
        );
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
pub(crate) fn count(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

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

/// A time on the x axis: seconds, with the precision the span needs.
fn seconds(t: f64) -> String {
    if t == 0.0 {
        "0 s".into()
    } else if t < 0.01 {
        format!("{:.2} ms", t * 1e3)
    } else if t < 10.0 {
        format!("{t:.3} s")
    } else {
        format!("{t:.1} s")
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

fn axis_label(max: f64, unit: &str) -> String {
    match unit {
        "b/s" => crate::detect::findings::bits_per_second(max / 8.0),
        "%" => format!("{max:.1}%"),
        "" => format!("{max:.3}"),
        _ if max >= 1e6 => format!("{:.1} M{unit}", max / 1e6),
        _ if max >= 1e3 => format!("{:.1} k{unit}", max / 1e3),
        _ => format!("{max:.0} {unit}"),
    }
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
