//! `rocemon analyze --html`: the page opens in a real headless browser (Debian's Chromium)
//! without a network: it renders, logs no console error, requests nothing (the browser's net
//! log shows no request the page made), and holds tshark's numbers of the same capture. A
//! screenshot is taken. (`html_browser.rs` drives the browser through the DevTools protocol:
//! widths, ticks, sorting.)

use rocemon_testkit::{assert_ok, fixtures, TempDir};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");

fn chromium(dir: &Path, extra: &[&str], page: &Path) -> std::process::Output {
    Command::new("chromium")
        .arg("--headless")
        .args(rocemon_testkit::CHROMIUM_QUIET)
        .args(["--enable-logging=stderr", "--v=0"])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium is not installed: run `cargo xtask setup` (Debian package chromium)")
}

/// A count with thousands separated, written here from the rule (13,382,400).
fn thousands(n: u64) -> String {
    let d = n.to_string();
    d.chars()
        .enumerate()
        .flat_map(|(i, c)| {
            let sep = i > 0 && (d.len() - i).is_multiple_of(3);
            sep.then_some(',').into_iter().chain(std::iter::once(c))
        })
        .collect()
}

#[test]
fn the_html_report_renders_offline_with_tsharks_numbers() {
    rocemon_testkit::require_tshark();
    let dir = TempDir::new("rocemon-html").unwrap();
    let capture = fixtures::rc_ipv4().write(dir.path()).unwrap();
    let page = dir.path().join("report.html");
    // Every flow an elephant (1 B/s), so the timeline section has bars.
    let j = rocemon_testkit::analyze_json(
        BIN,
        &["--elephant-bps", "1", "--html", page.to_str().unwrap()],
        &[&capture],
    );
    let html = std::fs::read_to_string(&page).unwrap();

    // Self-contained: the one script (table sorting) inline, and nothing fetched from
    // elsewhere.
    assert_eq!(html.matches("<script>").count(), 1, "one inline script");
    assert_eq!(html.matches("<script").count(), 1, "no script from a file");
    for needle in ["src=", "url(", "@import", "<link"] {
        assert!(!html.contains(needle), "the page refers to {needle}");
    }
    // The one kind of address: a link for the reader to follow (the runbook), never
    // anything the page loads.
    for (i, _) in html.match_indices("http") {
        assert!(
            html[..i].ends_with("<a href=\""),
            "the page refers to {}",
            &html[i..(i + 60).min(html.len())]
        );
    }

    // Rendered by a real browser: the DOM after load, the net log, the console.
    let netlog = dir.path().join("net.json");
    let dumped = chromium(
        dir.path(),
        &["--dump-dom", &format!("--log-net-log={}", netlog.display())],
        &page,
    );
    assert_ok(&dumped, "chromium --dump-dom");
    let dom = String::from_utf8_lossy(&dumped.stdout).into_owned();
    let log = String::from_utf8_lossy(&dumped.stderr).into_owned();
    assert!(
        !log.lines()
            .any(|l| l.contains(":CONSOLE") || l.contains("Uncaught")),
        "console messages: {log}"
    );
    // Requests the page made would have the page as initiator; the browser's own (update
    // checks and the like) have none ("not an origin").
    let net: Value = serde_json::from_slice(&std::fs::read(&netlog).unwrap()).unwrap();
    let from_page: Vec<String> = net["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            let p = &e["params"];
            let url = p["url"].as_str()?;
            let initiator = p["initiator"].as_str().unwrap_or("not an origin");
            (initiator != "not an origin" && !url.starts_with("file://"))
                .then(|| format!("{url} (from {initiator})"))
        })
        .collect();
    assert!(
        from_page.is_empty(),
        "the page made requests: {from_page:?}"
    );

    // tshark's numbers of the capture, in the rendered page.
    let want = rocemon_testkit::tshark::expected(&capture).unwrap();
    for (what, v) in [
        ("frames", want.frames),
        ("RoCE packets", want.roce_packets),
        ("CNPs", want.cnp),
        ("ECN CE", want.ecn[3]),
    ] {
        let cell = format!("<td>{what}</td><td>{}</td>", thousands(v));
        assert!(dom.contains(&cell), "{what} = {v} (tshark) not in the page");
    }
    // Bytes as a person reads them, the exact number on hover.
    assert!(
        dom.contains(&format!(
            r#"<td>RoCE bytes</td><td><span title="{} bytes">"#,
            thousands(want.roce_bytes)
        )),
        "RoCE bytes {} (tshark) on hover",
        want.roce_bytes
    );
    // A page for any screen; every chart with ticks on both axes; no chart says there is no
    // traffic where there is.
    assert!(dom.contains(r#"<meta name="viewport" content="width=device-width, initial-scale=1">"#));
    let charts: Vec<&str> = dom.split("<svg viewBox").skip(1).collect();
    assert!(charts.len() >= 3, "{} charts", charts.len());
    for c in charts.iter().filter(|c| c.contains("<polyline")) {
        let c = &c[..c.find("</svg>").unwrap()];
        // Ticks at round values: as many as the round step gives (three to seven).
        let y = c.matches("class=\"ax tick y\"").count();
        let x = c.matches("class=\"ax tick x\"").count();
        assert!((3..=7).contains(&y), "{y} y ticks: {c}");
        assert!((3..=7).contains(&x), "{x} x ticks: {c}");
    }
    assert!(want.roce_packets > 0);
    assert!(!dom.contains("no RoCE traffic"), "RoCE is in the capture");
    if want.ecn[3] > 0 {
        assert!(
            !dom.contains("no CE marks"),
            "{} CE marks (tshark)",
            want.ecn[3]
        );
    }
    assert!(
        dom.contains(&format!("of {} flows", want.flows.len())),
        "{} flows (tshark)",
        want.flows.len()
    );
    // The flow with the most bytes (tshark) is in the flows table.
    let ((src, dst, _, _), _) = want
        .flows
        .iter()
        .max_by_key(|(_, f)| f.bytes)
        .expect("flows");
    assert!(dom.contains(&format!("{src} → {dst}")), "{src} → {dst}");
    // The elephant timeline draws one bar per period the report lists (the elephants are
    // rocemon's own judgement: the page agrees with its own JSON here, nothing more).
    let elephants = j["elephants"].as_array().unwrap();
    assert!(!elephants.is_empty());
    assert!(dom.contains(&format!("Elephants ({})", elephants.len())));
    assert_eq!(
        dom.matches("<rect ").count(),
        elephants
            .iter()
            .map(|e| e["periods"].as_array().unwrap().len())
            .sum::<usize>(),
        "one bar per elephant period"
    );
    assert!(dom.contains("<polyline"), "the charts have lines");

    // A screenshot, as a person would look at it.
    let shot = dir.path().join("report.png");
    let s = chromium(
        dir.path(),
        &[
            "--window-size=1000,2000",
            &format!("--screenshot={}", shot.display()),
        ],
        &page,
    );
    assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.len() > 10_000 && png.starts_with(b"\x89PNG"),
        "screenshot of {} bytes",
        png.len()
    );
    // Keep it for a look after the run.
    let keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report.png");
    let _ = std::fs::copy(&shot, keep);
}

/// The lossless fabric, the training rhythm with message sizes, and the switches' view have
/// their sections when the capture holds them (one capture of three files).
#[test]
fn the_report_shows_the_lossless_training_and_sflow_sections() {
    use rocemon_testkit::{lossless, sflow, training};
    let dir = TempDir::new("rocemon-html-views").unwrap();
    let a = lossless::lossless().write(dir.path()).unwrap();
    let b = training::capture(
        "job",
        training::Job {
            slow_at: Some(20),
            ..training::Job::steady(40)
        },
    )
    .write(dir.path())
    .unwrap();
    let d = rocemon_testkit::sflow::Datagram {
        agent: "192.0.2.1".parse().unwrap(),
        sub_agent: 0,
        sequence: 1,
        uptime_ms: 0,
        samples: vec![sflow::Sample::Counters {
            expanded: false,
            sequence: 1,
            if_index: 3,
            speed: 1,
            in_octets: 1,
            out_octets: 1,
            ethernet: false,
        }],
    }
    .encode();
    let c = sflow::capture("sflow_one", &[d]).write(dir.path()).unwrap();
    let page = dir.path().join("views.html");
    let j = rocemon_testkit::analyze_json(BIN, &["--html", page.to_str().unwrap()], &[&a, &b, &c]);
    let html = std::fs::read_to_string(&page).unwrap();
    for want in [
        "<h2>Training rhythm and RDMA messages</h2>",
        "step period",
        "rdma_write",
        "<h2>Lossless fabric</h2>",
        "PFC frames",
        "Lossy RoCE",
        "<h2>Switches (sFlow)</h2>",
        "counter samples",
    ] {
        assert!(html.contains(want), "{want:?} missing from the page");
    }
    assert_eq!(j["training"]["slow_steps"], 1, "{}", j["training"]);
    assert!(!html.contains("<script src"));
}

/// The charts' time is seconds from the capture's first frame, not from the first RoCE packet:
/// a PFC frame at 0 s, RoCE from 1 s to 1.5 s, so the first tick of the throughput chart says
/// 1.000 s and its last 1.500 s (the generator's times).
#[test]
fn the_time_axis_counts_from_the_captures_first_frame() {
    use rocemon_testkit::fixtures::{whole, Format};
    use rocemon_testkit::frames::{self, Roce};
    let dir = TempDir::new("rocemon-html-axis").unwrap();
    let t0 = 1_764_460_800_000_000_000u64;
    let mut f = vec![(t0, frames::pfc(0x08, [0, 0, 0, 10, 0, 0, 0, 0]))];
    for k in 0..=500u64 {
        let mut r = Roce::new(
            "10.82.0.1".parse().unwrap(),
            "10.82.0.2".parse().unwrap(),
            0xC100,
            0x100,
            0x0A,
        );
        r.psn = k as u32;
        r.payload = 512;
        r.dma_len = 512;
        f.push((t0 + 1_000_000_000 + k * 1_000_000, r.frame()));
    }
    let p = whole("late-roce", Format::PcapNanos, f, false)
        .write(dir.path())
        .unwrap();
    let page = dir.path().join("axis.html");
    rocemon_testkit::analyze_json(BIN, &["--html", page.to_str().unwrap()], &[&p]);
    let html = std::fs::read_to_string(&page).unwrap();
    let chart = html
        .split("<svg viewBox")
        .find(|c| c.contains("aria-label=\"bits per second by operation class"))
        .expect("the throughput chart");
    let ticks: Vec<&str> = chart
        .split("class=\"ax tick x\"")
        .skip(1)
        .map(|t| &t[t.find('>').unwrap() + 1..t.find('<').unwrap()])
        .collect();
    assert_eq!(ticks.first(), Some(&"1.0 s"), "{ticks:?}");
    // Round times a tenth of a second apart up to the last bucket's (1.499 s).
    assert_eq!(ticks, ["1.0 s", "1.1 s", "1.2 s", "1.3 s", "1.4 s"]);
}
