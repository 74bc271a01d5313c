//! The report's section of the sFlow collector at rising rates against `sfacctd`, and its
//! verdicts (ahead of `sfacctd`; 200,000 datagrams per second on one core).

use serde_json::Value;
use std::fmt::Write as _;

/// The section (empty when the phase has not run).
pub(crate) fn section(r: &Value) -> String {
    let mut s = String::new();
    let x = &r["sflow_rates"];
    if x.is_null() {
        return s;
    }
    let _ = writeln!(s, "\n## 5b. The sFlow collector against sfacctd at rising rates\n\nThe same stream to each collector on CPU 1 (the sender on CPU 0): {} switches x {} ports, {} sampled RoCE headers per datagram, {} s per rate. Datagrams dropped at the collector's socket (`/proc/net/udp`), its CPU seconds per 100,000 datagrams sent, and its resident memory (every process of it). rocemon runs with the fabric view on.\n\n| datagrams/s | rocemon dropped | rocemon CPU s / 100k | sfacctd dropped | sfacctd CPU s / 100k |\n| --- | --- | --- | --- | --- |", x["switches"], x["ports"], x["samples_per_datagram"], x["seconds_per_rate"]);
    let rows = |c: &str| x[c]["rows"].as_array().cloned().unwrap_or_default();
    for (a, b) in rows("rocemon").iter().zip(rows("sfacctd").iter()) {
        let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
        let _ = writeln!(
            s,
            "| {} | {} of {} | {:.2} | {} of {} | {:.2} |",
            a["rate"],
            a["dropped"],
            a["sent"],
            f(a, "cpu_seconds_per_100k"),
            b["dropped"],
            b["sent"],
            f(b, "cpu_seconds_per_100k")
        );
    }
    let rss = |c: &str| {
        rows(c)
            .last()
            .and_then(|r| r["rss_bytes"].as_f64())
            .unwrap_or(0.0)
            / 1e6
    };
    let _ = writeln!(
        s,
        "\nResident memory after the run: rocemon {:.1} MB, sfacctd {:.1} MB.",
        rss("rocemon"),
        rss("sfacctd")
    );
    if let Some(n) = x["rocemon_series"].as_u64() {
        let _ = writeln!(
            s,
            "\nrocemon's `/metrics` after the run (what a Prometheus shard takes from a collector of this fabric): {n} series, {} of them per switch port; {:.1} MB, one scrape {:.0} ms.",
            x["rocemon_port_series"],
            x["rocemon_scrape_bytes"].as_f64().unwrap_or(0.0) / 1e6,
            x["rocemon_scrape_seconds"].as_f64().unwrap_or(0.0) * 1e3
        );
    }
    if let Some(t) = x["tables"].as_object() {
        let rows: Vec<String> = t
            .iter()
            .map(|(name, v)| {
                let n = |k: &str| v[k].as_f64().unwrap_or(0.0);
                format!(
                    "{name} {:.0} held, {:.0} refused, {:.0} pushed out",
                    n("entries"),
                    n("dropped"),
                    n("evicted")
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "\nrocemon's tables at their default sizes after the run: {}. The rhythm's table follows {} ports by design (a minute of 1 ms buckets, 480 KB a port; the configured groups' uplinks are held first): the samples of every other port are refused there and counted, and counted everywhere else.",
            rows.join("; "),
            x["tables"]["rhythm_ports"]["entries"].as_f64().unwrap_or(0.0)
        );
    }
    s
}

/// The verdict rows.
pub(crate) fn verdicts(r: &Value, verdict: impl Fn(bool) -> &'static str) -> String {
    let mut s = String::new();
    let x = &r["sflow_rates"];
    if x.is_null() {
        return s;
    }
    let clean = |c: &str| x[c]["highest_rate_without_loss"].as_u64().unwrap_or(0);
    let (r, p) = (clean("rocemon"), clean("sfacctd"));
    // Ahead of sfacctd: no more datagrams lost at any rate, and less CPU per datagram at the
    // lowest rate (where both take everything).
    let rows = |c: &str| x[c]["rows"].as_array().cloned().unwrap_or_default();
    let (ours, theirs) = (rows("rocemon"), rows("sfacctd"));
    let no_more_loss = ours
        .iter()
        .zip(&theirs)
        .all(|(a, b)| a["dropped"].as_u64() <= b["dropped"].as_u64());
    let cpu = |v: &[Value]| {
        v.first()
            .and_then(|r| r["cpu_seconds_per_100k"].as_f64())
            .unwrap_or(f64::MAX)
    };
    let (cr, cp) = (cpu(&ours), cpu(&theirs));
    let _ = writeln!(
        s,
        "| sFlow: ahead of sfacctd on the same stream (no more datagrams lost at any rate, less CPU per datagram) | highest rate without loss: rocemon {r}/s, sfacctd {p}/s; CPU per 100k at the lowest rate {cr:.2} s vs {cp:.2} s | {} |",
        verdict(no_more_loss && cr <= cp)
    );
    let _ = writeln!(
        s,
        "| sFlow: 200,000 datagrams/s on one core with the fabric view on, none lost | highest without loss {r}/s | {} |",
        verdict(r >= 200_000)
    );
    let rss = |v: &[Value]| {
        v.last()
            .and_then(|r| r["rss_bytes"].as_f64())
            .unwrap_or(f64::MAX)
            / 1e6
    };
    let (mr, mp) = (rss(&ours), rss(&theirs));
    let _ = writeln!(
        s,
        "| sFlow: resident memory at 500 switches x 64 ports no more than sfacctd's (rocemon also serves every port's Prometheus series) | rocemon {mr:.0} MB, sfacctd {mp:.0} MB | {} |",
        verdict(mr <= mp)
    );
    s
}
