//! Diagnosis phase: precision and recall of the slow-step answers over 500 scenarios drawn
//! from seeds (`rocemon_testkit::scenarios`: one or two jobs on a link beside a tenant, slow
//! steps with none, one or two planted causes of the job's own, unrelated trouble at the same
//! times), each written as a capture and read by `rocemon analyze`. The truth is the
//! generator's. Goal: precision at least 0.95 and recall at least 0.9 for slow steps and for
//! every cause. The suite runs the first 50 of the same seeds (`tests/diagnosis.rs`).

use super::*;
use rocemon_testkit::scenarios::{self, Counts, Score};

const SCENARIOS: u64 = 500;

fn row(what: &str, c: &Counts) -> Value {
    json!({
        "what": what,
        "true_positives": c.tp,
        "false_positives": c.fp,
        "false_negatives": c.fn_,
        "precision": c.precision(),
        "recall": c.recall(),
    })
}

pub(crate) fn diagnosis_bench(tmp: &Path) -> Result<Value> {
    let mut total = Score::default();
    let (mut steps, mut frames) = (0usize, 0usize);
    let started = Instant::now();
    for seed in 0..SCENARIOS {
        let sc = scenarios::draw(seed);
        steps += sc.steps;
        frames += sc.frames.len();
        let dir = tmp.join(format!("scenario-{seed}"));
        std::fs::create_dir_all(&dir)?;
        let p = whole("scenario", Format::PcapNanos, sc.frames.clone(), false).write(&dir)?;
        let out = Command::new(BIN)
            .args([
                "analyze",
                "--format",
                "json",
                "--no-progress",
                "--link-speed",
                "100",
            ])
            .arg(&p)
            .output()?;
        if !out.status.success() {
            bail!(
                "rocemon analyze of scenario {seed}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let j: Value = serde_json::from_slice(&out.stdout)?;
        total.add(&scenarios::score(&j, &sc));
        std::fs::remove_dir_all(&dir)?;
    }
    let mut rows = vec![row("slow steps", &total.slow_steps)];
    for (k, c) in &total.causes {
        rows.push(row(&format!("cause {k}"), c));
    }
    rows.push(row("no cause: unexplained", &total.unexplained));
    // The findings besides the slow steps: what each is about (a receiver, a flow's source,
    // the priority, the classes) against the generator's own counts; `other`: any kind the
    // scenarios never plant.
    for (k, c) in &total.findings {
        rows.push(row(&format!("finding {k}"), c));
    }
    Ok(json!({
        "scenarios": SCENARIOS,
        "steps": steps,
        "frames": frames,
        "seconds": started.elapsed().as_secs_f64(),
        "rows": rows,
    }))
}

/// The report's section.
pub(crate) fn markdown(d: &Value, s: &mut String) {
    use std::fmt::Write as _;
    let _ = writeln!(
        s,
        "\n## Diagnosis: precision and recall ({} scenarios, {} steps, {} frames)\n\nGoal: precision at least 0.95 and recall at least 0.9 for every row. Scenarios drawn from seeds 0..{}: one or two jobs on a link beside a light tenant, slow steps with none, one or two planted causes of the job's own, and unrelated trouble at the same times (the tenant's CE marks, NAKs and lossy packets, pauses of another priority). A slow step matches within 3 ms of its planted start; a cause counts as named from 5% of the extra time. A finding counts by what it is about (a receiver, a flow's source, the priority, the classes), its truth the findings' rules over the generator's own counts; `finding other` is any kind the scenarios never plant (every one a false positive).\n\n| what | true + | false + | false - | precision | recall | goal |\n| --- | --- | --- | --- | --- | --- | --- |",
        d["scenarios"], d["steps"], d["frames"], d["scenarios"]
    );
    for r in d["rows"].as_array().into_iter().flatten() {
        let (p, rc) = (
            r["precision"].as_f64().unwrap_or(0.0),
            r["recall"].as_f64().unwrap_or(0.0),
        );
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {p:.3} | {rc:.3} | {} |",
            r["what"].as_str().unwrap_or(""),
            r["true_positives"],
            r["false_positives"],
            r["false_negatives"],
            if p >= 0.95 && rc >= 0.9 {
                "met"
            } else {
                "**missed**"
            }
        );
    }
}
