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

const BASE: Job = Job {
    period_ms: 100,
    comm_ms: 20,
    jitter_ms: 0,
    steps: 60,
    slow_at: None,
    missing_at: None,
};

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

/// WRITE and READ messages by their RETH DMA length, SEND messages by their packets'
/// payloads, each against tshark's decode.
#[test]
fn message_sizes_equal_tshark() {
    require_tshark();
    let dir = TempDir::new("rocemon-training-msg").unwrap();
    let p = training::capture("messages", Job { steps: 5, ..BASE })
        .write(dir.path())
        .unwrap();
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(&p)
        .args([
            "-T",
            "fields",
            "-E",
            "separator=/t",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.reth.dmalen",
            "-e",
            "data.len",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let (mut write, mut read, mut send) = ((0u64, 0u64), (0u64, 0u64), (0u64, 0u64));
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let c: Vec<&str> = line.split('\t').collect();
        // tshark prints the opcode in decimal
        let op: u8 = c[0].parse().unwrap();
        let n = |s: &str| s.parse::<u64>().unwrap_or(0);
        match op {
            0x06 | 0x0A | 0x0B => {
                write.0 += 1;
                write.1 += n(c[1]);
            }
            0x0C => {
                read.0 += 1;
                read.1 += n(c[1]);
            }
            0x00..=0x05 => {
                // data.len is the payload (tshark shows the ICRC apart)
                send.1 += n(c[2]);
                if matches!(op, 0x02..=0x05) {
                    send.0 += 1;
                }
            }
            _ => {}
        }
    }
    let j = analyze(&p);
    let m = j["roce"]["messages"].as_array().unwrap();
    let get = |op: &str| {
        let x = m.iter().find(|x| x["op"] == op).unwrap();
        (
            x["messages"].as_u64().unwrap(),
            x["bytes"].as_u64().unwrap(),
        )
    };
    assert!(write.0 > 0 && read.0 > 0 && send.0 > 0);
    assert_eq!(get("rdma_write"), write, "WRITE vs tshark");
    assert_eq!(get("rdma_read"), read, "READ vs tshark");
    assert_eq!(get("send"), send, "SEND vs tshark");
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
