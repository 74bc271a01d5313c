//! The HTML report in a real browser driven through the DevTools protocol (Debian's
//! Chromium, headless, no network): at 500 px and at 1280 px wide the page has no horizontal
//! overflow, every chart has tick labels on both axes, no chart says there is no traffic
//! where tshark counts it, no console message or exception, and a click on a table's heading
//! sorts it (the top flows by bytes: each row's exact bytes equal tshark's for that flow).
//! Screenshots at both widths are kept under `target/test-artifacts/html/`.

use headless_chrome::protocol::cdp::types::Event;
use headless_chrome::protocol::cdp::Emulation::SetDeviceMetricsOverride;
use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::{Browser, LaunchOptions, Tab};
use rocemon_testkit::{fixtures, lossless, training, TempDir};
use serde_json::Value;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");
const CHROMIUM: &str = "/usr/bin/chromium";

fn browser(profile: &Path) -> Browser {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: run `cargo xtask setup` (Debian package chromium)"
    );
    // The sandbox is the launcher's own setting (`sandbox(false)`).
    let args: Vec<&OsStr> = rocemon_testkit::CHROMIUM_QUIET[1..]
        .iter()
        .map(OsStr::new)
        .collect();
    let opts = LaunchOptions::default_builder()
        .path(Some(PathBuf::from(CHROMIUM)))
        .headless(true)
        .sandbox(false)
        .user_data_dir(Some(profile.to_path_buf()))
        .idle_browser_timeout(Duration::from_secs(120))
        .args(args)
        .build()
        .expect("launch options");
    Browser::new(opts).expect("start chromium")
}

/// Evaluates `js` in the page; its JSON value.
fn eval(tab: &Tab, js: &str) -> Value {
    tab.evaluate(js, false)
        .unwrap_or_else(|e| panic!("{js}: {e}"))
        .value
        .unwrap_or(Value::Null)
}

fn viewport(tab: &Tab, width: u32) {
    tab.call_method(SetDeviceMetricsOverride {
        width,
        height: 900,
        device_scale_factor: 1.0,
        mobile: width < 600,
        scale: None,
        screen_width: None,
        screen_height: None,
        position_x: None,
        position_y: None,
        dont_set_visible_size: None,
        screen_orientation: None,
        viewport: None,
        display_feature: None,
        device_posture: None,
    })
    .expect("set the viewport");
}

fn keep_screenshot(tab: &Tab, name: &str) {
    let png = tab
        .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
        .expect("screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "{name}");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("..")
        .join("test-artifacts")
        .join("html");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(name), png);
}

/// What the page must hold at any width.
fn check_layout(tab: &Tab, width: u32) {
    viewport(tab, width);
    let overflow = eval(
        tab,
        "document.documentElement.scrollWidth - document.documentElement.clientWidth",
    );
    assert_eq!(
        overflow.as_f64(),
        Some(0.0),
        "horizontal overflow at {width} px"
    );
    // Every chart with lines has tick labels on both axes, each with text.
    let charts = eval(
        tab,
        r#"JSON.stringify(Array.from(document.querySelectorAll('svg')).filter(s => s.querySelector('polyline')).map(s => [
            s.getAttribute('aria-label'),
            Array.from(s.querySelectorAll('.tick.x')).filter(t => t.textContent.trim()).length,
            Array.from(s.querySelectorAll('.tick.y')).filter(t => t.textContent.trim()).length]))"#,
    );
    let charts: Vec<(Value, u64, u64)> =
        serde_json::from_str(charts.as_str().expect("a string")).expect("charts");
    assert!(charts.len() >= 3, "{} charts with lines", charts.len());
    for (label, x, y) in &charts {
        assert!(*x >= 2 && *y >= 2, "{label}: {x} x ticks, {y} y ticks");
    }
    // Chart text stays legible: the charts scroll sideways rather than shrink their labels.
    let smallest = eval(
        tab,
        "Math.min(...Array.from(document.querySelectorAll('figure svg .tick')).map(t => t.getBoundingClientRect().height))",
    );
    let smallest = smallest.as_f64().expect("tick heights");
    assert!(
        smallest >= 9.0,
        "tick labels {smallest} px high at {width} px"
    );
}

/// Tick values read from their labels (`150 Mb/s`, `1.25 s`, `2%`, `1,000 /s`).
fn numbers(labels: &[String]) -> Vec<f64> {
    labels
        .iter()
        .map(|l| {
            let n: String = l
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
                .filter(|c| *c != ',')
                .collect();
            n.parse::<f64>()
                .unwrap_or_else(|_| panic!("{l}: no number"))
        })
        .collect()
}

/// Evenly spaced by 1, 2 or 5 times a power of ten.
fn round_steps(v: &[f64]) -> bool {
    if v.len() < 2 {
        return false;
    }
    let d = v[1] - v[0];
    let even = v.windows(2).all(|w| ((w[1] - w[0]) - d).abs() <= d * 1e-6);
    let m = d / 10f64.powf(d.log10().floor());
    even && [1.0, 2.0, 5.0, 10.0].iter().any(|r| (m - r).abs() < 1e-6)
}

/// The first screen answers, every chart has data at round ticks, and the findings read as
/// text.
fn check_answers_first(tab: &Tab) {
    viewport(tab, 1280);
    let first: Value = serde_json::from_str(
        eval(
            tab,
            r#"JSON.stringify({
                cards: document.querySelectorAll('.cards .card').length,
                verdict: document.querySelector('p.verdict').getBoundingClientRect().bottom,
                cardsBottom: document.querySelector('.cards').getBoundingClientRect().bottom,
                finding: document.querySelector('table.findings tr:nth-child(2)').getBoundingClientRect().top,
                totals: Array.from(document.querySelectorAll('h2')).find(h => h.textContent == 'Totals').getBoundingClientRect().top
            })"#,
        )
        .as_str()
        .expect("positions"),
    )
    .expect("positions");
    assert!(first["cards"].as_u64() >= Some(5), "{first}");
    for k in ["verdict", "cardsBottom", "finding"] {
        assert!(
            first[k].as_f64() < Some(900.0),
            "{k} below the first screen: {first}"
        );
    }
    assert!(
        first["finding"].as_f64() < first["totals"].as_f64(),
        "{first}"
    );
    // No frame without data.
    let empty = eval(
        tab,
        "Array.from(document.querySelectorAll('figure svg')).filter(s => !s.querySelector('polyline, rect')).map(s => s.getAttribute('aria-label')).join()",
    );
    assert_eq!(empty.as_str(), Some(""), "charts without data");
    // Ticks at round values, evenly spaced, each label different.
    let ticks: Vec<(String, Vec<String>, Vec<String>)> = serde_json::from_str(
        eval(
            tab,
            r#"JSON.stringify(Array.from(document.querySelectorAll('figure svg')).map(s => [
                s.getAttribute('aria-label'),
                Array.from(s.querySelectorAll('.tick.x')).map(t => t.textContent),
                Array.from(s.querySelectorAll('.tick.y')).map(t => t.textContent)]))"#,
        )
        .as_str()
        .expect("ticks"),
    )
    .expect("ticks");
    assert!(ticks.len() >= 3, "{ticks:?}");
    for (chart, x, y) in &ticks {
        assert!(round_steps(&numbers(x)), "{chart}: x ticks {x:?}");
        assert!(round_steps(&numbers(y)), "{chart}: y ticks {y:?}");
    }
    // Evidence is text with units, never JSON.
    let evidence = eval(
        tab,
        "Array.from(document.querySelectorAll('table.findings td.evidence')).map(t => t.textContent).join('\\n')",
    );
    let evidence = evidence.as_str().unwrap_or_default();
    assert!(!evidence.is_empty(), "no evidence shown");
    for raw in ['{', '[', '"'] {
        assert!(
            !evidence.contains(raw),
            "raw JSON in the evidence: {evidence}"
        );
    }
}

#[test]
fn the_report_reads_at_500_and_1280_px_and_its_tables_sort() {
    rocemon_testkit::require_tshark();
    let dir = TempDir::new("rocemon-html-cdp").unwrap();
    let captures = [
        fixtures::rc_ipv4().write(dir.path()).unwrap(),
        fixtures::many_flows().write(dir.path()).unwrap(),
        lossless::lossless().write(dir.path()).unwrap(),
        training::capture(
            "job",
            training::Job {
                slow_at: Some(15),
                ..training::Job::steady(30)
            },
        )
        .write(dir.path())
        .unwrap(),
    ];
    let mut want = rocemon_testkit::tshark::Expected::default();
    for c in &captures {
        want.add(rocemon_testkit::tshark::expected(c).unwrap());
    }
    let page = dir.path().join("report.html");
    let refs: Vec<&Path> = captures.iter().map(PathBuf::as_path).collect();
    rocemon_testkit::analyze_json(BIN, &["--html", page.to_str().unwrap()], &refs);

    let browser = browser(&dir.path().join("profile"));
    let tab = browser.new_tab().expect("a tab");
    let messages: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = messages.clone();
    tab.add_event_listener(Arc::new(move |e: &Event| {
        let m = match e {
            Event::RuntimeConsoleAPICalled(c) => {
                Some(format!("console.{:?}: {:?}", c.params.Type, c.params.args))
            }
            Event::RuntimeExceptionThrown(x) => {
                Some(format!("exception: {:?}", x.params.exception_details))
            }
            Event::LogEntryAdded(l) => Some(format!(
                "log {:?}: {} {:?}",
                l.params.entry.level, l.params.entry.text, l.params.entry.url
            )),
            _ => None,
        };
        if let (Some(m), Ok(mut v)) = (m, seen.lock()) {
            v.push(m);
        }
    }))
    .expect("listen");
    tab.enable_runtime().expect("runtime events");
    tab.enable_log().expect("log events");
    tab.navigate_to(&format!("file://{}", page.display()))
        .and_then(|t| t.wait_until_navigated())
        .expect("open the page");

    // Charts with traffic where tshark counts it.
    let text = eval(&tab, "document.body.innerText");
    let text = text.as_str().unwrap_or_default();
    assert!(want.roce_packets > 0 && !text.contains("no RoCE traffic"));
    assert!(
        want.ecn[3] > 0 && !text.contains("no CE marks"),
        "{} CE",
        want.ecn[3]
    );
    assert!(
        want.cnp > 0 && !text.contains("no CNPs"),
        "{} CNPs",
        want.cnp
    );

    check_answers_first(&tab);
    check_layout(&tab, 500);
    keep_screenshot(&tab, "report-500px.png");
    check_layout(&tab, 1280);
    keep_screenshot(&tab, "report-1280px.png");

    // The top flows sorted by bytes: a click ascending, a second descending, each row's exact
    // bytes (on hover) tshark's for that flow.
    let sort = |times: usize| -> Vec<(String, u64)> {
        let js = format!(
            r#"(() => {{
                const t = Array.from(document.querySelectorAll('table.sortable'))
                    .find(t => t.tHead.rows[0].cells[0].textContent.startsWith('flow'));
                const th = Array.from(t.tHead.rows[0].cells).find(c => c.textContent.startsWith('bytes'));
                for (let i = 0; i < {times}; i++) th.click();
                return JSON.stringify(Array.from(t.tBodies[0].rows).map(r => [
                    r.cells[0].textContent + ' ' + r.cells[1].textContent + ' ' + r.cells[2].textContent,
                    r.cells[4].querySelector('[title]').getAttribute('title')]));
            }})()"#
        );
        let rows: Vec<(String, String)> =
            serde_json::from_str(eval(&tab, &js).as_str().expect("rows")).expect("rows");
        rows.into_iter()
            .map(|(f, b)| {
                let n = b.trim_end_matches(" bytes").replace(',', "");
                (f, n.parse().unwrap_or_else(|_| panic!("{b}")))
            })
            .collect()
    };
    let up = sort(1);
    let down = sort(1);
    assert!(up.len() >= 10, "{} rows", up.len());
    assert!(up.windows(2).all(|w| w[0].1 <= w[1].1), "ascending: {up:?}");
    assert!(
        down.windows(2).all(|w| w[0].1 >= w[1].1),
        "descending: {down:?}"
    );
    for (flow, bytes) in &down {
        // "src → dst sport 0xqp"
        let p: Vec<&str> = flow.split(' ').collect();
        let key = (
            p[0].to_string(),
            p[2].to_string(),
            p[3].parse::<u16>().expect("sport"),
            u32::from_str_radix(p[4].trim_start_matches("0x"), 16).expect("QP"),
        );
        let t = want
            .flows
            .get(&key)
            .unwrap_or_else(|| panic!("{flow}: not a flow tshark saw"));
        assert_eq!(*bytes, t.bytes, "{flow}: bytes (tshark)");
    }
    let aria = eval(
        &tab,
        "Array.from(document.querySelectorAll('th[aria-sort]')).map(h => h.textContent + ' ' + h.getAttribute('aria-sort')).join()",
    );
    assert_eq!(aria.as_str(), Some("bytes descending"));

    std::thread::sleep(Duration::from_millis(200));
    let messages = messages.lock().map(|v| v.clone()).unwrap_or_default();
    assert!(messages.is_empty(), "console: {messages:#?}");
}
