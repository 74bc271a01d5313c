//! Findings of the ECMP views on captures: elephants, their collisions on a predicted path
//! and connections sharing a 5-tuple. The paths come from the test's own CRC-16/XMODEM (the
//! testkit's, written from the algorithm), the rates and QPs from the generator.

use rocemon_testkit::demo;
use rocemon_testkit::findings_lab::{elephant, elephants_on, v4, A, B, T0};
use rocemon_testkit::frames::Roce;
use serde_json::Value;

/// Elephants on a 4-path CRC-16/XMODEM hash, entering at once above 2 MB/s.
const CONFIG: &str = "[ecmp.hash]\nfunction = \"crc16-1021\"\npaths = 4\n\n[elephant]\nthreshold_bytes_per_second = 2000000\nmin_duration_seconds = 0\n";

fn analyze(name: &'static str, frames: Vec<(u64, Vec<u8>)>) -> Value {
    rocemon_testkit::findings_lab::analyze_frames(
        env!("CARGO_BIN_EXE_rocemon"),
        name,
        frames,
        &[],
        Some(CONFIG),
    )
}

fn findings<'a>(j: &'a Value, kind: &str) -> Vec<&'a Value> {
    rocemon_testkit::findings_lab::findings_of(j, kind)
}

#[test]
fn two_elephants_on_one_predicted_path_are_an_ecmp_collision() {
    let frames = elephants_on(2, T0, 1_500);
    // Each elephant: one frame every 100 us, in bits per second.
    let want = frames[0].1.len() as f64 * 8.0 * 10_000.0;
    let j = analyze("collide", frames);
    let c = findings(&j, "ecmp_collision");
    assert_eq!(c.len(), 1, "{:#}", j["findings"]);
    assert_eq!(c[0]["evidence"]["path"], "2", "{:#}", c[0]);
    assert_eq!(c[0]["evidence"]["elephants"], 2, "{:#}", c[0]);
    assert_eq!(c[0]["subject"], "path 2 of predicted");
    let e = findings(&j, "elephant");
    assert_eq!(e.len(), 2, "{:#}", j["findings"]);
    for x in e {
        let bps = x["evidence"]["peak_bits_per_second"].as_f64().unwrap();
        assert!((bps - want).abs() < 0.01 * want, "{want} b/s: {x:#}");
    }
}

#[test]
fn elephants_on_different_paths_are_no_collision() {
    let mut f = elephant("10.92.0.1", 0, T0, 1_500);
    f.extend(elephant("10.92.0.2", 1, T0 + 1_000, 1_500));
    let j = analyze("apart", f);
    assert!(
        findings(&j, "ecmp_collision").is_empty(),
        "{:#}",
        j["findings"]
    );
    assert_eq!(findings(&j, "elephant").len(), 2, "{:#}", j["findings"]);
}

/// A's writes to B every `every_ns` on QPs `qps`, the source port of each from `port`.
fn writes(qps: &[(u32, u16)], every_ns: u64, n: u64) -> Vec<(u64, Vec<u8>)> {
    let ip = |s: &str| s.parse().unwrap();
    let mut f = Vec::new();
    for (i, (qp, port)) in qps.iter().enumerate() {
        for k in 0..n {
            let mut d = Roce::new(ip(A), ip(B), *port, *qp, 0x0A);
            d.psn = k as u32;
            d.payload = 256;
            d.dma_len = 256;
            f.push((T0 + k * every_ns + i as u64 * 1_000, d.frame()));
        }
    }
    f
}

#[test]
fn a_flow_under_the_threshold_is_no_elephant() {
    // 322-byte frames every 1 ms: 0.3 MB/s.
    let j = analyze("mice", writes(&[(0x700, 0xC700)], 1_000_000, 1_000));
    assert!(findings(&j, "elephant").is_empty(), "{:#}", j["findings"]);
}

#[test]
fn two_qps_on_one_source_port_share_a_5tuple() {
    let j = analyze(
        "shared",
        writes(&[(0x700, 0xC700), (0x701, 0xC700)], 1_000_000, 50),
    );
    let s = findings(&j, "shared_5tuple");
    assert_eq!(s.len(), 1, "{:#}", j["findings"]);
    assert_eq!(s[0]["evidence"]["groups"], 1);
    assert!(
        s[0]["summary"]
            .as_str()
            .unwrap()
            .contains(&format!("{A} -> {B} port {}, 2 QPs", 0xC700)),
        "{}",
        s[0]["summary"]
    );
}

#[test]
fn qps_on_their_own_ports_share_nothing() {
    let j = analyze(
        "own-ports",
        writes(&[(0x700, 0xC700), (0x701, 0xC701)], 1_000_000, 50),
    );
    assert!(
        findings(&j, "shared_5tuple").is_empty(),
        "{:#}",
        j["findings"]
    );
}

/// Connection management (MADs to QP 1, the GSI) on a data connection's 5-tuple, as
/// Soft-RoCE sends it, shares nothing.
#[test]
fn connection_management_on_a_data_connections_port_shares_nothing() {
    let j = analyze(
        "cm-port",
        writes(&[(0x1, 0xC700), (0x700, 0xC700)], 1_000_000, 50),
    );
    assert!(
        findings(&j, "shared_5tuple").is_empty(),
        "{:#}",
        j["findings"]
    );
    assert_eq!(j["ecmp"]["shared_5tuple_groups"], 0);
}

/// The generator's ports are where the test's own hash says.
#[test]
fn the_elephants_ports_hash_onto_their_path() {
    let f = elephant("10.92.0.1", 3, T0, 1);
    let frame = &f[0].1;
    // Ethernet 14 + IPv4 20: the UDP source port.
    let sport = u16::from_be_bytes([frame[34], frame[35]]);
    assert_eq!(
        demo::path_among(v4("10.92.0.1"), v4("10.92.0.9"), sport, 4),
        3
    );
}
