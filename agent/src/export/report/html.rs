//! `rocemon analyze --html FILE`: the report as one self-contained HTML page (inline CSS and
//! SVG drawn here; no script, font, style or image from anywhere else, so it opens offline and
//! makes no network request). Sections: totals, RoCE throughput over time by operation class,
//! CE share and CNP rate over time, elephants on a timeline, top flows, ECMP, PSN/NAK health,
//! parse outcomes. Every number comes from the same [`Report`] the JSON output prints.

use crate::export::report::Report;
use crate::pipeline::timeline::{Bucket, Timeline};
use agent_common::opcode::OpClass;
use std::fmt::Write as _;

pub(crate) use super::html_charts::{
    bytes, count, duration, esc, line_chart, member_rows, rate, table, table_html, with_spans,
    Axes, SORT_SCRIPT, W,
};

const COLORS: [&str; OpClass::COUNT] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#76b7b2", "#9c755f", "#e15759", "#bab0ac",
];

/// The page for `report` (of `inputs`), with the charts from `timeline`; findings link their
/// runbook entries under `runbook_base` (an absolute URL: the page is read away from the
/// repository).
pub fn render(
    report: &Report<'_>,
    timeline: &Timeline,
    inputs: &[String],
    top: usize,
    runbook_base: &str,
) -> String {
    let r = report;
    let dt = timeline.bucket_seconds();
    let b: &[Bucket] = timeline.buckets();
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>rocemon report: {}</title><style>
body{{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:980px}}
h1{{font-size:22px}}h2{{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}}
table{{border-collapse:collapse;margin:8px 0}}td,th{{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}}
th{{background:#f6f6f6}}table.sortable th{{cursor:pointer;white-space:nowrap}}th[aria-sort=ascending]::after{{content:" \25B2"}}th[aria-sort=descending]::after{{content:" \25BC"}}td:first-child,th:first-child{{text-align:left}}
.ax{{font-size:11px;fill:#555}}figure{{margin:8px 0}}figcaption{{font-weight:600}}
.legend span{{margin-right:14px;font-size:12px}}.legend i{{display:inline-block;width:10px;height:10px;margin-right:4px}}
.kpi td:last-child{{font-weight:600}}table.findings th,table.findings td{{text-align:left}}td.evidence{{font-size:12px;max-width:420px}}td.when{{white-space:nowrap}}
.cards{{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}}.card{{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:130px;flex:1 1 130px}}.card .v{{font-size:20px;font-weight:600}}.card .k{{font-size:12px;color:#555}}.card.alarm{{border-color:#b00020}}.card.alarm .v{{color:#b00020}}
details.findings-group{{margin:6px 0}}details.findings-group summary{{cursor:pointer;font-weight:600}}details.critical summary{{color:#b00020}}details.warning summary{{color:#b26a00}}details.info summary{{color:#555}}
figure{{overflow-x:auto}}
table{{display:block;max-width:100%;overflow-x:auto}}svg{{max-width:100%;height:auto}}figure svg{{min-width:640px}}
@media (max-width:600px){{body{{margin:8px;font-size:13px}}td,th{{padding:2px 5px}}table.findings tr:first-child{{display:none}}table.findings,table.findings tr,table.findings td{{display:block;text-align:left!important}}table.findings tr{{border-bottom:1px solid #ccc;padding:4px 0}}table.findings td{{border:0}}}}
@media print{{body{{max-width:none}}table{{display:table}}}}
</style></head><body>"#,
        esc(&inputs.join(", "))
    );
    let _ = write!(
        s,
        "<h1>rocemon report</h1><p class=\"verdict\"><b>{}</b></p><p>{} over {}</p>",
        esc(&r.verdict),
        esc(&inputs.join(", ")),
        crate::detect::findings::duration(r.duration_seconds)
    );
    super::html_findings::cards(r, &mut s);
    super::html_findings::findings(&mut s, &r.findings, runbook_base);
    s.push_str("<h2>Totals</h2>");
    let kpi = |k: &str, v: String| vec![k.to_string(), v];
    let mut totals = vec![
        kpi("frames", count(r.frames)),
        kpi("bytes", bytes(r.bytes)),
        kpi("RoCE packets", count(r.roce.packets)),
        kpi("RoCE bytes", bytes(r.roce.bytes)),
        kpi("CNPs", count(r.roce.cnp)),
        kpi("ECN CE", count(r.roce.ecn.ce)),
        kpi("BECN", count(r.roce.becn)),
        kpi("flows", count(r.flows.len() as u64)),
        kpi("elephants", count(r.elephants.len() as u64)),
    ];
    if r.flows_evicted.flows > 0 {
        totals.push(kpi(
            "flows that left the table",
            count(r.flows_evicted.flows),
        ));
    }
    s.push_str(
        &table_html(&["", "count"], &totals)
            .replace("<table class=\"sortable\">", "<table class=\"kpi\">"),
    );

    // Throughput by operation class.
    let series: Vec<(&str, &str, Vec<f64>)> = OpClass::ALL
        .iter()
        .map(|c| {
            (
                c.name(),
                COLORS[*c as usize],
                b.iter()
                    .map(|x| x.bytes_by_class[*c as usize] as f64 * 8.0 / dt)
                    .collect::<Vec<f64>>(),
            )
        })
        .filter(|(_, _, v)| v.iter().any(|x| *x > 0.0))
        .collect();
    s.push_str("<h2>RoCE throughput over time</h2>");
    // The slow training steps, shaded on the throughput chart (times from its first bucket).
    let t0 = timeline.start_ns().unwrap_or(0);
    let slow: Vec<(f64, f64, String)> = r
        .training
        .steps
        .iter()
        .enumerate()
        .filter(|(_, x)| x.slow)
        .map(|(i, x)| {
            let a = x.start_ns.saturating_sub(t0) as f64 / 1e9;
            let why = x.causes.first().map_or("", |c| c.kind);
            (
                a,
                a + x.seconds,
                format!(
                    "slow step {}: {:.1} ms from {a:.3} s ({why})",
                    i + 1,
                    x.seconds * 1e3
                ),
            )
        })
        .collect();
    let caption = if slow.is_empty() {
        format!(
            "bits per second by operation class ({} buckets)",
            duration(dt)
        )
    } else {
        format!(
            "bits per second by operation class ({} buckets); slow training steps shaded red",
            duration(dt)
        )
    };
    // Charts start at the first RoCE packet; their time axis says seconds from the capture's
    // first frame.
    let start = t0.saturating_sub(r.first_ts_ns) as f64 / 1e9;
    let axes = |title: &'static str, unit: &'static str, empty: &'static str| Axes {
        title,
        unit,
        dt,
        t0: start,
        empty,
    };
    s.push_str(&with_spans(
        line_chart(
            &Axes {
                title: &caption,
                ..axes("", "b/s", "no RoCE traffic")
            },
            &series,
        ),
        b.len(),
        dt,
        &slow,
    ));
    s.push_str("<h2>Congestion over time</h2>");
    let ce: Vec<f64> = b
        .iter()
        .map(|x| {
            if x.packets == 0 {
                0.0
            } else {
                x.ce as f64 * 100.0 / x.packets as f64
            }
        })
        .collect();
    s.push_str(&line_chart(
        &axes(
            "share of RoCE packets marked ECN CE",
            "%",
            "no CE marks in this capture",
        ),
        &[("CE share", "#e15759", ce)],
    ));
    let cnp: Vec<f64> = b.iter().map(|x| x.cnp as f64 / dt).collect();
    s.push_str(&line_chart(
        &axes("CNPs per second", "/s", "no CNPs in this capture"),
        &[("CNPs", "#f28e2b", cnp)],
    ));
    // Pause time per priority over the same buckets: the union of its pause intervals.
    let names: Vec<String> = (0..8).map(|p| format!("priority {p}")).collect();
    let paused: Vec<(&str, &str, Vec<f64>)> = (0..8)
        .map(|p| {
            (
                names[p].as_str(),
                COLORS[p % COLORS.len()],
                r.paused_over_time
                    .iter()
                    .map(|x| x[p] * 100.0)
                    .collect::<Vec<f64>>(),
            )
        })
        .filter(|(_, _, v)| v.iter().any(|x| *x > 0.0))
        .collect();
    if !paused.is_empty() {
        s.push_str(&line_chart(
            &axes(
                "share of the time each priority was paused (PFC)",
                "%",
                "no pause",
            ),
            &paused,
        ));
    }

    // Elephants on the capture's timeline.
    let _ = write!(s, "<h2>Elephants ({})</h2>", r.elephants.len());
    if r.elephants.is_empty() {
        s.push_str("<p>No flow was an elephant.</p>");
    } else {
        let span = r.duration_seconds.max(1e-9);
        let rows = r.elephants.len().min(40);
        let h = 20.0 * rows as f64 + 20.0;
        let _ = write!(
            s,
            r#"<svg viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img" aria-label="elephants">"#
        );
        for (i, e) in r.elephants.iter().take(rows).enumerate() {
            let y = 4.0 + 20.0 * i as f64;
            let _ = write!(
                s,
                r#"<text x="0" y="{}" class="ax">{} &#8594; {} :{} qp {}</text>"#,
                y + 12.0,
                esc(&e.src),
                esc(&e.dst),
                e.sport,
                e.dest_qp
            );
            for p in &e.periods {
                let x = 300.0 + p.started_s / span * (W - 310.0);
                let end = p.ended_s.unwrap_or(span);
                let w = ((end - p.started_s) / span * (W - 310.0)).max(2.0);
                let _ = write!(
                    s,
                    r##"<rect x="{x:.1}" y="{y}" width="{w:.1}" height="14" fill="#e15759"><title>{:.3} s to {:.3} s, peak {}</title></rect>"##,
                    p.started_s,
                    end,
                    esc(&crate::detect::findings::bits_per_second(
                        p.peak_bytes_per_second
                    ))
                );
            }
        }
        s.push_str("</svg>");
    }

    // Top flows.
    let n = top.min(r.flows.len());
    let _ = write!(s, "<h2>Top {n} of {} flows</h2>", r.flows.len());
    let rows: Vec<Vec<String>> = r
        .flows
        .iter()
        .take(n)
        .map(|f| {
            vec![
                esc(&format!("{} → {}", f.src, f.dst)),
                f.sport.to_string(),
                format!("0x{:x}", f.dest_qp),
                count(f.packets),
                bytes(f.bytes),
                rate(f.mean_bytes_per_second),
                count(f.ecn_ce),
                count(f.cnp),
                count(f.psn_gaps),
                count(f.retransmits),
                count(f.naks.values().sum::<u64>() + f.rnr_naks),
            ]
        })
        .collect();
    s.push_str(&table_html(
        &[
            "flow",
            "sport",
            "dest QP",
            "packets",
            "bytes",
            "mean rate",
            "CE",
            "CNP",
            "PSN gaps",
            "retransmitted",
            "NAKs",
        ],
        &rows,
    ));

    // ECMP.
    s.push_str("<h2>ECMP</h2>");
    let e = &r.ecmp;
    let _ = write!(
        s,
        "<p>{} host pairs; {} groups of flows share one outer 5-tuple (no 5-tuple hash can separate them).</p>",
        e.host_pairs, e.shared_5tuple_groups
    );
    if let Some(p) = &e.predicted {
        let rows = member_rows(&p.members);
        let _ = write!(
            s,
            "<p>Predicted paths (hash model): imbalance {:.2}</p>",
            p.imbalance_ratio
        );
        s.push_str(&table(&["path", "flows", "elephants", ""], &rows));
    }
    let rows: Vec<Vec<String>> = e
        .source_ports
        .iter()
        .take(20)
        .map(|h| {
            vec![
                format!("{} → {}", h.src, h.dst),
                h.source_ports.to_string(),
                h.flows.to_string(),
            ]
        })
        .collect();
    s.push_str("<p>UDP source ports per host pair (fewest first):</p>");
    s.push_str(&table(&["host pair", "source ports", "flows"], &rows));

    crate::export::report::html_views::sections(r, &mut s);
    // Health and outcomes.
    s.push_str("<h2>PSN and NAK health</h2>");
    let mut rows = vec![
        kpi("PSN gaps", r.health.psn_gaps.to_string()),
        kpi("retransmissions", r.health.retransmits.to_string()),
        kpi("RNR NAKs", r.health.rnr_naks.to_string()),
    ];
    rows.extend(
        r.health
            .naks
            .iter()
            .map(|(k, v)| kpi(&format!("NAK {k}"), v.to_string())),
    );
    s.push_str(&table(&["", "count"], &rows));
    s.push_str("<h2>Parse outcomes</h2>");
    let mut rows = vec![kpi("RoCE", r.roce.packets.to_string())];
    rows.extend(
        r.not_roce
            .iter()
            .map(|(k, v)| kpi(&format!("not RoCE: {k}"), v.to_string())),
    );
    rows.extend(
        r.malformed
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| kpi(&format!("malformed: {k}"), v.to_string())),
    );
    s.push_str(&table(&["outcome", "frames"], &rows));
    s.push_str("<p>Made by rocemon analyze.</p>");
    s.push_str(SORT_SCRIPT);
    s.push_str("</body></html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
