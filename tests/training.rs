//! The training view of `rocemon analyze`: rhythms of known parameters (the generator's truth)
//! and RDMA message sizes against tshark (`infiniband.reth.dmalen`, opcodes, payload lengths).

use rocemon_testkit::training::{self, Job};
use rocemon_testkit::{require_tshark, TempDir};
use serde_json::Value;
use std::process::Command;

fn analyze(path: &std::path::Path) -> Value {
    rocemon_testkit::analyze_json(env!("CARGO_BIN_EXE_rocemon"), &[], &[path])
}

fn run(job: Job) -> Value {
    let dir = TempDir::new("rocemon-training").unwrap();
    let p = training::capture("job", job).write(dir.path()).unwrap();
    analyze(&p)["training"].clone()
}

const BASE: Job = Job::steady(60);

/// Two jobs on one link (`training::interleaved`): 100 ms steps from 10.78.0.1, and 170 ms
/// steps with 30 ms bursts from 10.78.0.3.
const ONE_OF_TWO: Job = Job { steps: 120, ..BASE };
const TWO_OF_TWO: Job = Job {
    period_ms: 170,
    comm_ms: 30,
    steps: 70,
    ..BASE
};

/// The capture of [`ONE_OF_TWO`] and [`TWO_OF_TWO`] on one link, written in `dir`.
fn two_jobs(dir: &std::path::Path) -> std::path::PathBuf {
    training::interleaved("two", ONE_OF_TWO, TWO_OF_TWO)
        .write(dir)
        .unwrap()
}

fn period(t: &Value) -> f64 {
    t["period_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("no period: {t}"))
}

#[test]
fn a_100_ms_rhythm_and_its_duty() {
    let t = run(BASE);
    assert!((period(&t) - 0.100).abs() < 0.003, "{t}");
    let duty = t["duty_ratio"].as_f64().unwrap();
    assert!((duty - 0.2).abs() < 0.05, "{duty}");
    assert_eq!(t["slow_steps"], 0);
    assert_eq!(t["steps"].as_array().unwrap().len(), 59);
}

#[test]
fn a_50_ms_rhythm_with_jitter() {
    let t = run(Job {
        period_ms: 50,
        comm_ms: 8,
        jitter_ms: 3,
        steps: 200,
        ..BASE
    });
    assert!((period(&t) - 0.050).abs() < 0.0025, "{}", period(&t));
}

#[test]
fn a_2_s_rhythm() {
    let t = run(Job {
        period_ms: 2000,
        comm_ms: 200,
        steps: 12,
        ..BASE
    });
    assert!((period(&t) - 2.0).abs() < 0.06, "{}", period(&t));
}

#[test]
fn a_slow_step_is_found_where_it_ran() {
    let t = run(Job {
        slow_at: Some(40),
        ..BASE
    });
    assert_eq!(t["slow_steps"], 1, "{t}");
    let steps = t["steps"].as_array().unwrap();
    assert!((steps[40]["seconds"].as_f64().unwrap() - 0.2).abs() < 0.005);
}

#[test]
fn a_missing_step_makes_one_long_step() {
    let t = run(Job {
        missing_at: Some(30),
        ..BASE
    });
    assert!((period(&t) - 0.100).abs() < 0.003);
    assert_eq!(t["slow_steps"], 1, "{t}");
}

#[test]
fn steady_traffic_reports_no_rhythm() {
    let dir = TempDir::new("rocemon-training-steady").unwrap();
    let p = training::steady(20).write(dir.path()).unwrap();
    let t = &analyze(&p)["training"];
    assert!(t["period_seconds"].is_null(), "{t}");
    assert!(t["duty_ratio"].is_null());
    assert_eq!(t["steps"].as_array().unwrap().len(), 0);
}

#[test]
fn the_table_shows_the_rhythm_and_the_sizes() {
    let dir = TempDir::new("rocemon-training-table").unwrap();
    let p = training::capture("table", BASE).write(dir.path()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .args(["analyze", "--no-progress"])
        .arg(&p)
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("Training    period 100."), "{s}");
    assert!(s.contains("Messages    rdma_write "), "{s}");
}

/// Two jobs from different hosts share the link: each source host keeps its own period, and
/// the link as a whole claims no false one (none, or one of the two).
#[test]
fn two_interleaved_jobs_keep_their_own_periods() {
    let dir = TempDir::new("rocemon-training-two").unwrap();
    let p = two_jobs(dir.path());
    let j = analyze(&p);
    let sources = j["training_sources"].as_array().unwrap();
    assert_eq!(sources.len(), 2, "{j}");
    let of = |src: &str| {
        let s = sources
            .iter()
            .find(|s| s["src"] == src)
            .unwrap_or_else(|| panic!("{src} in {sources:?}"));
        period(s)
    };
    assert!(
        (of("10.78.0.1") - 0.100).abs() < 0.003,
        "{}",
        of("10.78.0.1")
    );
    assert!(
        (of("10.78.0.3") - 0.170).abs() < 0.005,
        "{}",
        of("10.78.0.3")
    );
    if let Some(p) = j["training"]["period_seconds"].as_f64() {
        assert!(
            (p - 0.100).abs() < 0.003 || (p - 0.170).abs() < 0.005,
            "the link's period {p} is neither job's"
        );
    }
}

/// One job alone: no per-source list (the link's rhythm is the job's).
#[test]
fn one_job_lists_no_sources() {
    let dir = TempDir::new("rocemon-training-one").unwrap();
    let p = training::capture("one", BASE).write(dir.path()).unwrap();
    assert_eq!(analyze(&p)["training_sources"], serde_json::json!([]));
}

/// The message counts and bytes, the histogram buckets (powers of four from 1 KiB) and each
/// flow's messages, against the messages rebuilt from tshark's fields.
#[test]
fn messages_histogram_and_per_flow_messages_equal_tshark() {
    require_tshark();
    let dir = TempDir::new("rocemon-training-msg").unwrap();
    let p = training::capture("messages", Job { steps: 5, ..BASE })
        .write(dir.path())
        .unwrap();
    let want = training::tshark_messages(&p).unwrap();
    assert!(want.histogram.len() >= 3, "{want:?}");
    let j = analyze(&p);
    let mut got = training::TsharkMessages::default();
    for m in j["roce"]["messages"].as_array().unwrap() {
        let op = m["op"].as_str().unwrap().to_string();
        assert_eq!(
            (
                m["messages"].as_u64().unwrap(),
                m["bytes"].as_u64().unwrap()
            ),
            want.total(&op),
            "{op} vs tshark"
        );
        for b in m["buckets"].as_array().unwrap() {
            got.histogram.insert(
                (op.clone(), b["le"].as_u64().unwrap()),
                b["messages"].as_u64().unwrap(),
            );
        }
    }
    for f in j["flows"].as_array().unwrap() {
        let qp = f["dest_qp"].as_u64().unwrap();
        for (op, m) in f["messages"].as_object().unwrap() {
            let v = (
                m["messages"].as_u64().unwrap(),
                m["bytes"].as_u64().unwrap(),
            );
            if v.0 > 0 {
                got.flows.insert((qp, op.clone()), v);
            }
        }
    }
    assert_eq!(got.histogram, want.histogram, "histogram vs tshark");
    assert_eq!(got.flows, want.flows, "per-flow messages vs tshark");
}

/// The HTML report shows the rhythm, the size distribution and the per-source rhythms.
#[test]
fn the_html_report_shows_the_rhythm_sizes_and_sources() {
    let dir = TempDir::new("rocemon-training-html").unwrap();
    let two = Job {
        period_ms: 170,
        comm_ms: 30,
        steps: 40,
        ..BASE
    };
    let p = training::interleaved("html", BASE, two)
        .write(dir.path())
        .unwrap();
    let html = dir.path().join("r.html");
    rocemon_testkit::analyze_json(
        env!("CARGO_BIN_EXE_rocemon"),
        &["--html", html.to_str().unwrap()],
        &[&p],
    );
    let page = std::fs::read_to_string(&html).unwrap();
    for want in [
        "Training rhythm and RDMA messages",
        "up to 4 KiB",
        "up to 64 KiB",
        "Per source host",
        "10.78.0.1",
        "10.78.0.3",
        "100.0 ms",
    ] {
        assert!(page.contains(want), "{want} in the page");
    }
}

/// The job's first frame's time (`training::frames` starts there).
const JOB_T0: u64 = 1_764_547_200_000_000_000;

/// `steps` steps of the usual job (100 ms, 20 ms bursts), the ones `slow(i)` picks 200 ms
/// long, each step's PSNs going on from the one before; beside it, with `tenant`, another
/// host pair's 1 KiB WRITEs at random times (0 to 4 a millisecond, 2 on average: a light,
/// steady tenant whose milliseconds are not all alike). Returns the capture's frames and the
/// start times of the slow steps whose end is seen (the truth).
fn job_beside(
    steps: u64,
    slow: impl Fn(u64) -> bool,
    tenant: bool,
) -> (Vec<(u64, Vec<u8>)>, Vec<u64>) {
    let mut f = Vec::new();
    let mut truth = Vec::new();
    let mut t = JOB_T0;
    for i in 0..steps {
        let step = training::frames_round(Job::steady(1), "10.78.0.1", "10.78.0.2", i);
        f.extend(step.into_iter().map(|(at, fr)| (at - JOB_T0 + t, fr)));
        let len = if slow(i) { 200 } else { 100 };
        if slow(i) && i + 1 < steps {
            truth.push(t);
        }
        t += len * 1_000_000;
    }
    if tenant {
        let (a, b) = ("10.78.5.1".parse().unwrap(), "10.78.5.2".parse().unwrap());
        let mut rng = 4791u64;
        let mut psn = 0u32;
        for ms in 0..(t - JOB_T0) / 1_000_000 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            for k in 0..(rng >> 33) % 5 {
                let mut w = rocemon_testkit::frames::Roce::new(a, b, 0xC900, 0x900, 0x0A);
                w.payload = 1024;
                w.dma_len = 1024;
                w.psn = psn;
                psn += 1;
                f.push((JOB_T0 + ms * 1_000_000 + 150_000 * k + 7_000, w.frame()));
            }
        }
    }
    f.sort_by_key(|(t, _)| *t);
    (f, truth)
}

fn slow_starts(t: &Value) -> Vec<u64> {
    t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["slow"] == true)
        .map(|s| s["start_ns"].as_u64().unwrap())
        .collect()
}

fn training_of(name: &'static str, frames: Vec<(u64, Vec<u8>)>) -> Value {
    let dir = TempDir::new("rocemon-training-beside").unwrap();
    let p = rocemon_testkit::fixtures::whole(
        name,
        rocemon_testkit::fixtures::Format::PcapNanos,
        frames,
        false,
    )
    .write(dir.path())
    .unwrap();
    analyze(&p)["training"].clone()
}

/// `analyze` of the job of [`job_beside`]: its period is the normal step's (100 ms) and its
/// slow steps are the planted ones, all of them; the training section.
fn rhythm_kept(name: &'static str, steps: u64, slow: impl Fn(u64) -> bool, tenant: bool) -> Value {
    let (f, truth) = job_beside(steps, slow, tenant);
    let t = training_of(name, f);
    assert!((period(&t) - 0.100).abs() < 0.003, "{t}");
    assert_eq!(slow_starts(&t), truth, "{t}");
    assert_eq!(t["slow_steps"], truth.len());
    t
}

/// A light, steady tenant on the same link: the job's rhythm, its steps and its slow step
/// are found as without it.
#[test]
fn a_light_tenant_beside_the_job_leaves_its_rhythm_and_slow_step() {
    let t = rhythm_kept("beside-tenant", 40, |i| i == 25, true);
    assert_eq!(t["steps"].as_array().unwrap().len(), 39);
}

/// A third of the steps slow (the degraded job): the normal step's period and every slow
/// step.
#[test]
fn a_third_of_the_steps_slow_leaves_the_rhythm() {
    rhythm_kept("third-slow", 45, |i| i % 3 == 1, false);
}

/// Both at once, with half of the steps slow.
#[test]
fn half_of_the_steps_slow_beside_a_tenant_leaves_the_rhythm() {
    rhythm_kept("half-slow-beside", 40, |i| i % 2 == 0, true);
}

fn jobs(t: &Value) -> &Vec<Value> {
    t["jobs"].as_array().unwrap()
}

/// A job's frames from `src` to `dst`, `shift_ms` later than `training::frames` puts them.
fn job_at(job: Job, src: &str, dst: &str, shift_ms: u64) -> Vec<(u64, Vec<u8>)> {
    training::frames(job, src, dst, 0)
        .into_iter()
        .map(|(t, f)| (t + shift_ms * 1_000_000, f))
        .collect()
}

/// Two jobs of their own periods on one link are two jobs, each with its hosts, flows and
/// period; the larger one's rhythm leads the section.
#[test]
fn two_jobs_on_one_link_are_two_jobs() {
    let dir = TempDir::new("rocemon-training-two-jobs").unwrap();
    let p = two_jobs(dir.path());
    let t = analyze(&p)["training"].clone();
    let j = jobs(&t);
    assert_eq!(j.len(), 2, "{t:#}");
    let of = |src: &str| {
        j.iter()
            .find(|x| x["sources"] == serde_json::json!([src]))
            .unwrap_or_else(|| panic!("a job of {src}: {j:#?}"))
    };
    let (a, b) = (of("10.78.0.1"), of("10.78.0.3"));
    assert!((period(a) - 0.100).abs() < 0.003, "{a}");
    assert!((period(b) - 0.170).abs() < 0.005, "{b}");
    assert_eq!(a["hosts"], serde_json::json!(["10.78.0.1", "10.78.0.2"]));
    assert_eq!(b["hosts"], serde_json::json!(["10.78.0.3", "10.78.0.4"]));
    // The generator's three QPs per job (WRITE, SEND, READ).
    assert_eq!(
        (a["flows"].as_u64(), b["flows"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(a["id"], "job-10.78.0.1");
    assert_eq!(a["steps"].as_array().unwrap().len(), 119);
    assert_eq!(b["steps"].as_array().unwrap().len(), 69);
    // The leading rhythm is the job with the most bytes.
    let lead = &j[0];
    assert_eq!(t["period_seconds"], lead["period_seconds"], "{t:#}");
}

/// Each job's slow step is a finding named by its job, where a link carries several: the
/// smaller job's slow step is not lost behind the larger job's rhythm.
#[test]
fn each_job_s_slow_step_is_a_finding_of_its_own() {
    let dir = TempDir::new("rocemon-training-two-jobs-slow").unwrap();
    let p = training::interleaved(
        "two_slow",
        Job {
            slow_at: Some(40),
            ..ONE_OF_TWO
        },
        Job {
            slow_at: Some(30),
            ..TWO_OF_TWO
        },
    )
    .write(dir.path())
    .unwrap();
    let j = analyze(&p);
    let mut subjects: Vec<&str> = j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "slow_step")
        .filter_map(|f| f["subject"].as_str())
        .collect();
    subjects.sort();
    assert_eq!(
        subjects,
        ["step 31 of job-10.78.0.3", "step 41 of job-10.78.0.1"],
        "{:#}",
        j["findings"]
    );
}

/// Each job's RDMA messages are its own flows', as tshark decodes the frames its sources sent.
#[test]
fn each_job_s_messages_equal_tshark_s_of_its_sources() {
    require_tshark();
    let dir = TempDir::new("rocemon-training-job-messages").unwrap();
    let p = two_jobs(dir.path());
    let t = analyze(&p)["training"].clone();
    let j = jobs(&t);
    assert_eq!(j.len(), 2, "{t:#}");
    for src in ["10.78.0.1", "10.78.0.3"] {
        let job = j
            .iter()
            .find(|x| x["sources"] == serde_json::json!([src]))
            .unwrap_or_else(|| panic!("a job of {src}: {j:#?}"));
        let want = training::tshark_messages_of(&p, &format!("ip.src == {src}")).unwrap();
        for op in ["rdma_write", "rdma_read", "send"] {
            let m = job["messages"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["op"] == op)
                .unwrap_or_else(|| panic!("{op}: {job:#}"));
            let (n, bytes) = want.total(op);
            assert!(n > 0, "{src} {op}");
            assert_eq!(
                (m["messages"].as_u64(), m["bytes"].as_u64()),
                (Some(n), Some(bytes)),
                "{src} {op}"
            );
        }
    }
}

/// The text table lists each job under the leading rhythm.
#[test]
fn the_table_lists_each_job() {
    let dir = TempDir::new("rocemon-training-jobs-table").unwrap();
    let p = two_jobs(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .args(["analyze", "--no-progress"])
        .arg(&p)
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("  job-10.78.0.1  2 hosts, 3 flows, period 100.0 ms, 119 steps (0 slow)"),
        "{s}"
    );
    assert!(
        s.contains("  job-10.78.0.3  2 hosts, 3 flows, period 170.0 ms"),
        "{s}"
    );
}

/// The HTML report lists each job with its sources, hosts, flows, period and slow steps.
#[test]
fn the_html_report_lists_each_job() {
    let dir = TempDir::new("rocemon-training-jobs-html").unwrap();
    let p = two_jobs(dir.path());
    let page = dir.path().join("r.html");
    let out = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .args(["analyze", "--no-progress", "--html"])
        .arg(&page)
        .arg(&p)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("<p>2 training jobs found in the traffic:</p>"),
        "{html}"
    );
    assert!(
        html.contains("<td>job-10.78.0.1</td><td>10.78.0.1</td><td>2</td><td>3</td>"),
        "{html}"
    );
    assert!(
        html.contains("<td>100.0 ms</td><td>0 of 119</td>"),
        "{html}"
    );
    assert!(html.contains("<td>job-10.78.0.3</td>"), "{html}");
}

/// One job of three hosts writing in step, beside a steady tenant: one job of those hosts
/// and their receiver; the tenant is in none.
#[test]
fn hosts_in_step_are_one_job_and_a_steady_tenant_is_none() {
    use rocemon_testkit::findings_lab::hosts_job;
    let mut f = hosts_job(
        &["10.78.0.11", "10.78.0.12", "10.78.0.13"],
        "10.78.0.20",
        None,
    );
    let (a, b) = ("10.78.5.1".parse().unwrap(), "10.78.5.2".parse().unwrap());
    let t0 = f[0].0;
    for ms in 0..1_600u64 {
        let mut w = rocemon_testkit::frames::Roce::new(a, b, 0xC900, 0x900, 0x0A);
        w.payload = 1024;
        w.dma_len = 1024;
        w.psn = ms as u32;
        f.push((t0 + ms * 1_000_000 + 500_000, w.frame()));
    }
    f.sort_by_key(|(t, _)| *t);
    let t = training_of("job-and-tenant", f);
    let j = jobs(&t);
    assert_eq!(j.len(), 1, "{t:#}");
    assert_eq!(
        j[0]["sources"],
        serde_json::json!(["10.78.0.11", "10.78.0.12", "10.78.0.13"])
    );
    assert_eq!(
        j[0]["hosts"],
        serde_json::json!(["10.78.0.11", "10.78.0.12", "10.78.0.13", "10.78.0.20"])
    );
    assert_eq!(j[0]["flows"], 3);
    assert!((period(&j[0]) - 0.100).abs() < 0.003, "{}", j[0]);
    // The planted slow step (the 7th, 200 ms) is the job's one slow step.
    assert_eq!(j[0]["slow_steps"], 1, "{}", j[0]);
}

/// Two jobs of one period, half a step apart: two jobs, not one of twice the rate.
#[test]
fn two_jobs_of_one_period_out_of_phase_are_two_jobs() {
    let mut f = job_at(Job { steps: 60, ..BASE }, "10.78.0.1", "10.78.0.2", 0);
    f.extend(job_at(
        Job { steps: 60, ..BASE },
        "10.78.0.3",
        "10.78.0.4",
        50,
    ));
    f.sort_by_key(|(t, _)| *t);
    let t = training_of("two-phases", f);
    let j = jobs(&t);
    assert_eq!(j.len(), 2, "{t:#}");
    for x in j {
        assert!((period(x) - 0.100).abs() < 0.003, "{x}");
    }
}

/// Traffic with no rhythm has no job.
#[test]
fn steady_traffic_has_no_job() {
    let dir = TempDir::new("rocemon-training-nojob").unwrap();
    let p = training::steady(3).write(dir.path()).unwrap();
    assert_eq!(analyze(&p)["training"]["jobs"], serde_json::json!([]));
}
