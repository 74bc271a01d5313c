//! `rocemon analyze --format json` equals tshark on every fixture.

use rocemon_testkit::{fixtures, require_tshark, tshark, TempDir};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

fn analyze_json(path: &std::path::Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .args(["analyze", "--format", "json"])
        .arg(path)
        .output()
        .expect("run rocemon");
    assert!(
        out.status.success(),
        "rocemon analyze failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn analyze_equals_tshark_on_every_fixture() {
    require_tshark();
    let dir = TempDir::new("rocemon-analyze").unwrap();
    let paths = fixtures::generate_all(dir.path()).unwrap();
    assert!(paths.len() >= 8);
    for p in paths {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let e = tshark::expected(&p).unwrap();
        let j = analyze_json(&p);
        assert_eq!(u(&j["frames"]), e.frames, "{name}: frames");
        let r = &j["roce"];
        assert_eq!(u(&r["packets"]), e.roce_packets, "{name}: roce.packets");
        assert_eq!(u(&r["bytes"]), e.roce_bytes, "{name}: roce.bytes");
        assert_eq!(u(&r["cnp"]), e.cnp, "{name}: roce.cnp");
        let ecn = &r["ecn"];
        assert_eq!(
            [
                u(&ecn["not_ect"]),
                u(&ecn["ect1"]),
                u(&ecn["ect0"]),
                u(&ecn["ce"])
            ],
            e.ecn,
            "{name}: ecn"
        );
        let ops: BTreeMap<u8, (u64, u64)> = r["opcodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (u(&o["opcode"]) as u8, (u(&o["packets"]), u(&o["bytes"]))))
            .collect();
        assert_eq!(ops, e.opcodes, "{name}: opcodes");
        let flows: BTreeMap<(String, String, u16, u32), tshark::FlowExpect> = j["flows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                assert_eq!(u(&f["dport"]), 4791);
                (
                    (
                        f["src"].as_str().unwrap().to_string(),
                        f["dst"].as_str().unwrap().to_string(),
                        u(&f["sport"]) as u16,
                        u(&f["dest_qp"]) as u32,
                    ),
                    tshark::FlowExpect {
                        packets: u(&f["packets"]),
                        bytes: u(&f["bytes"]),
                        ecn_ce: u(&f["ecn_ce"]),
                        cnp: u(&f["cnp"]),
                    },
                )
            })
            .collect();
        assert_eq!(flows, e.flows, "{name}: flows");
        // Every frame is accounted for exactly once.
        let other: u64 = j["not_roce"].as_object().unwrap().values().map(u).sum();
        let bad: u64 = j["malformed"].as_object().unwrap().values().map(u).sum();
        assert_eq!(
            u(&r["packets"]) + other + bad,
            e.frames,
            "{name}: accounting"
        );
        // Frames to port 4791 without a complete BTH are malformed for us too.
        assert!(
            bad >= e.port_4791_without_bth,
            "{name}: malformed {bad} < {}",
            e.port_4791_without_bth
        );
    }
}

#[test]
fn fixtures_cover_what_the_issue_asks() {
    require_tshark();
    let dir = TempDir::new("rocemon-cover").unwrap();
    let mut all = tshark::Expected::default();
    for p in fixtures::generate_all(dir.path()).unwrap() {
        let e = tshark::expected(&p).unwrap();
        for (op, (n, _)) in e.opcodes {
            all.opcodes.entry(op).or_default().0 += n;
        }
        for i in 0..4 {
            all.ecn[i] += e.ecn[i];
        }
        all.cnp += e.cnp;
        all.flows.extend(e.flows);
        for (s, n) in e.aeth_syndromes {
            *all.aeth_syndromes.entry(s).or_default() += n;
        }
    }
    // every RC opcode, UD, CNP, all ECN codepoints, many flows, NAK codes, RNR NAK
    for op in (0x00..=0x14).chain([0x16, 0x17, 0x64, 0x65, 0x81]) {
        assert!(
            all.opcodes.contains_key(&op),
            "no fixture has opcode {op:#x}"
        );
    }
    assert!(all.ecn.iter().all(|&n| n > 0));
    assert!(all.flows.len() > 400);
    for code in 0..5u8 {
        assert!(
            all.aeth_syndromes.contains_key(&(0x60 | code)),
            "NAK code {code}"
        );
    }
    assert!(
        all.aeth_syndromes.keys().any(|s| s & 0x60 == 0x20),
        "RNR NAK"
    );
}

#[test]
fn table_output_and_bad_files() {
    let dir = TempDir::new("rocemon-table").unwrap();
    let p = fixtures::rc_ipv4().write(dir.path()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .arg("analyze")
        .arg(&p)
        .output()
        .unwrap();
    assert!(out.status.success());
    let t = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "RoCEv2",
        "RC_RDMA_WRITE_ONLY (0x0a)",
        "CNP (0x81)",
        "TOP 10 OF 12 FLOWS",
        "ECN",
    ] {
        assert!(t.contains(needle), "table lacks {needle:?}:\n{t}");
    }
    // Not a capture; unsupported link type; missing file: clear errors, exit 2.
    let junk = dir.path().join("junk.pcap");
    std::fs::write(&junk, b"this is not a capture file at all").unwrap();
    let mut raw = vec![
        0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0,
    ];
    raw.extend_from_slice(&147u32.to_le_bytes()); // LINKTYPE_USER0
    let user0 = dir.path().join("user0.pcap");
    std::fs::write(&user0, &raw).unwrap();
    for (f, msg) in [
        (junk.as_path(), "not a pcap or pcapng file"),
        (user0.as_path(), "link type 147 is not supported"),
        (dir.path().join("missing.pcap").as_path(), "No such file"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rocemon"))
            .arg("analyze")
            .arg(f)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", f.display());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(msg), "{}: {err}", f.display());
    }
    // A capture cut inside its last record: everything before it is counted.
    let bytes = std::fs::read(&p).unwrap();
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() - 30]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .args(["analyze", "--format", "json"])
        .arg(&cut)
        .output()
        .unwrap();
    assert!(out.status.success());
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["truncated_tail"], Value::Bool(true));
    assert_eq!(u(&j["frames"]), 623);
}
