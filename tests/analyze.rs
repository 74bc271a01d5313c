//! `rocemon analyze --format json` equals tshark on every fixture.

use rocemon_testkit::{fixtures, require_tshark, tshark, TempDir};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

fn analyze_json(path: &std::path::Path) -> Value {
    analyze_json_with(path, &[])
}

/// `rocemon analyze --format json [extra] FILE`, which must succeed.
fn analyze_json_with(path: &std::path::Path, extra: &[&str]) -> Value {
    rocemon_testkit::analyze_json(env!("CARGO_BIN_EXE_rocemon"), extra, &[path])
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
                assert_eq!(u(&f["dport"]), 4791, "p {p:?}");
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
    // Every frame but the last (30 bytes of it are gone): the whole file's count from tshark.
    assert_eq!(u(&j["frames"]), tshark::expected(&p).unwrap().frames - 1);
}

fn nak_codes_from_tshark(e: &tshark::Expected) -> ([u64; 5], u64) {
    let mut naks = [0u64; 5];
    let mut rnr = 0;
    for (s, n) in &e.aeth_syndromes {
        match (s >> 5) & 3 {
            3 if (s & 0x1F) < 5 => naks[(s & 0x1F) as usize] += n,
            1 => rnr += n,
            _ => {}
        }
    }
    (naks, rnr)
}

#[test]
fn psn_and_nak_counts_are_exact() {
    require_tshark();
    let dir = TempDir::new("rocemon-psn").unwrap();
    let p = fixtures::psn_health().write(dir.path()).unwrap();
    let j = analyze_json(&p);
    let h = &j["health"];
    assert_eq!(u(&h["psn_gaps"]), 2);
    assert_eq!(u(&h["retransmits"]), 4);
    assert_eq!(u(&h["rnr_naks"]), 3);
    let naks = [
        "psn_sequence_error",
        "invalid_request",
        "remote_access_error",
        "remote_operational_error",
        "invalid_rd_request",
    ];
    let ours: Vec<u64> = naks.iter().map(|k| u(&h["naks"][k])).collect();
    assert_eq!(ours, vec![2, 1, 1, 1, 1]);
    // The NAK codes as tshark decodes the AETH syndromes of the same capture.
    let (theirs, rnr) = nak_codes_from_tshark(&tshark::expected(&p).unwrap());
    assert_eq!(ours, theirs.to_vec(), "NAK codes vs tshark");
    assert_eq!(rnr, 3, "RNR NAKs vs tshark");
    // Per flow.
    let flows = j["flows"].as_array().unwrap();
    let by_sport = |sp: u64, qp: u64| {
        flows
            .iter()
            .find(|f| u(&f["sport"]) == sp && u(&f["dest_qp"]) == qp)
            .unwrap()
    };
    let f1 = by_sport(0xC101, 0x500);
    assert_eq!((u(&f1["psn_gaps"]), u(&f1["retransmits"])), (1, 3));
    let f2 = by_sport(0xC102, 0x500);
    assert_eq!((u(&f2["psn_gaps"]), u(&f2["retransmits"])), (1, 0));
    let f3 = by_sport(0xC103, 0x500);
    assert_eq!((u(&f3["psn_gaps"]), u(&f3["retransmits"])), (0, 1));
    let acks = by_sport(0xC101, 0x400);
    assert_eq!(u(&acks["rnr_naks"]), 3);
    assert_eq!(u(&acks["naks"]["psn_sequence_error"]), 2);
}

#[test]
fn elephants_flagged_within_duration_and_released_after_hysteresis() {
    let dir = TempDir::new("rocemon-eleph").unwrap();
    let p = fixtures::elephant_timeline().write(dir.path()).unwrap();
    let cfg = dir.path().join("rocemon.toml");
    std::fs::write(
        &cfg,
        "rate_window_seconds = 1\n[elephant]\nthreshold_bytes_per_second = 500000\nexit_ratio = 0.5\nmin_duration_seconds = 2\nrelease_seconds = 2\n",
    )
    .unwrap();
    let j = analyze_json_with(&p, &["--config", cfg.to_str().unwrap()]);
    let el = j["elephants"].as_array().unwrap();
    assert_eq!(el.len(), 1, "only the heavy flow: {el:?}");
    assert_eq!(u(&el[0]["sport"]), 0xC201);
    let periods = el[0]["periods"].as_array().unwrap();
    assert_eq!(periods.len(), 1);
    let started = periods[0]["started_s"].as_f64().unwrap();
    let ended = periods[0]["ended_s"].as_f64().expect("released");
    // flagged once it stayed above the threshold for the minimum duration (2 s, 1 s ticks)
    assert!((2.0..=3.0).contains(&started), "started at {started}");
    // the flow stops at 10 s; the smoothed rate falls below the exit threshold within a
    // couple of ticks, and the release takes 2 s more
    assert!((12.0..=15.0).contains(&ended), "ended at {ended}");
    let peak = periods[0]["peak_bytes_per_second"].as_f64().unwrap();
    assert!((0.9e6..=1.1e6).contains(&peak), "peak {peak}");
    // The table shows it too.
    let out = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .args(["analyze", "--config", cfg.to_str().unwrap()])
        .arg(&p)
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(
        t.contains("ELEPHANTS 1") && t.contains("sport 49665"),
        "{t}"
    );
}

#[test]
fn predicted_ecmp_and_entropy_in_analyze() {
    let dir = TempDir::new("rocemon-pred").unwrap();
    let p = fixtures::rc_ipv4().write(dir.path()).unwrap();
    let cfg = dir.path().join("rocemon.toml");
    std::fs::write(&cfg, "[ecmp.hash]\nfunction = \"crc16-8005\"\npaths = 4\n").unwrap();
    let j = analyze_json_with(&p, &["--config", cfg.to_str().unwrap()]);
    let pred = &j["ecmp"]["predicted"];
    assert_eq!(pred["members"].as_array().unwrap().len(), 4);
    let placed: u64 = pred["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| u(&m["flows"]))
        .sum();
    assert_eq!(placed, 12, "every flow gets a predicted path");
    // rc_ipv4: each connection uses one source port both ways, one QP per direction
    assert_eq!(j["ecmp"]["shared_5tuples"].as_array().unwrap().len(), 0);
    assert_eq!(j["ecmp"]["source_ports"].as_array().unwrap().len(), 12);
    let pairs = j["ecmp"]["source_ports"].as_array().unwrap();
    assert!(!pairs.is_empty());
    assert!(pairs.iter().all(|h| u(&h["source_ports"]) == 1));
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[ecmp.hash]\nfunction = \"crc16-8005\"\npaths = 0\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .args(["analyze", "--config", bad.to_str().unwrap()])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ecmp.hash.paths 0 is out of range"));
}

#[test]
fn mirrored_and_tunnelled_roce_is_counted_as_fabric_traffic() {
    require_tshark();
    let dir = TempDir::new("rocemon-tun").unwrap();
    let p = fixtures::tunnels().write(dir.path()).unwrap();
    let j = analyze_json(&p);
    let t = &j["roce"]["tunnels"];
    // 12 packets in each of VXLAN, GRE (Ethernet and IP: 24), ERSPAN II, ERSPAN III, plain;
    // 6 IPv6 packets in each of VXLAN, GRE (IP) and ERSPAN II over IPv4; plus the VXLAN
    // without I flag and the GRE version 1 frame, both decoded.
    assert_eq!(u(&t["vxlan"]), 19);
    assert_eq!(u(&t["gre"]), 31);
    assert_eq!(u(&t["erspan2"]), 18);
    assert_eq!(u(&t["erspan3"]), 12);
    assert_eq!(u(&t["none"]), 12);
    assert_eq!(u(&j["malformed"]["truncated_erspan"]), 1);
    assert_eq!(u(&j["not_roce"]["gre_other_protocol"]), 1);
    // every encapsulated copy lands in the inner flows (tshark agrees: analyze_equals_tshark)
    let e = tshark::expected(&p).unwrap();
    assert_eq!(j["flows"].as_array().unwrap().len(), e.flows.len());
    // mirror sessions and tunnel ids, against tshark's decode of the outer headers
    let sessions: std::collections::BTreeMap<(String, u32), u64> = j["roce"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                (
                    s["tunnel"].as_str().unwrap().to_string(),
                    u(&s["id"]) as u32,
                ),
                u(&s["packets"]),
            )
        })
        .collect();
    assert!(sessions.len() >= 5, "{sessions:?}");
    assert_eq!(sessions, e.sessions);
    // The table says the same.
    let out = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .arg("analyze")
        .arg(&p)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    let mirrored: u64 = e.sessions.values().sum();
    assert!(
        table.contains(&format!("Mirrored    {mirrored:>12}")),
        "{table}"
    );
    for ((kind, id), n) in &e.sessions {
        let line = format!("  session {kind:<8} {id:<10} {n:>10} packets");
        assert!(table.contains(&line), "{line:?} missing from:\n{table}");
    }
}

/// The RETH DMA lengths the shared parser reads (RDMA WRITE and READ requests) sum to
/// tshark's `infiniband.reth.dmalen` on every whole fixture, for RC and UC packets (tshark 4.0
/// misplaces RD extension headers and does not decode XRC's, see `tshark.rs`).
#[test]
fn reth_dma_lengths_equal_tshark() {
    use agent_common::{parse, LinkType, SliceReader};
    require_tshark();
    let dir = TempDir::new("rocemon-reth").unwrap();
    let mut checked = 0;
    for fx in fixtures::all() {
        if fx.snaplen != 65535 {
            continue;
        }
        let link = match fx.link {
            fixtures::Link::Ethernet => LinkType::Ethernet,
            fixtures::Link::Sll => LinkType::LinuxSll,
            fixtures::Link::Sll2 => LinkType::LinuxSll2,
        };
        let ours: u64 = fx
            .records()
            .filter_map(|(_, _, data)| {
                let i = parse(&SliceReader(&data), link).ok()?;
                if i.bth.opcode >= 0x40 {
                    return None;
                }
                i.reth_dma_len
            })
            .map(u64::from)
            .sum();
        let e = tshark::expected(&fx.write(dir.path()).unwrap()).unwrap();
        assert_eq!(ours, e.reth_dma_len_sum, "{}: RETH DMA lengths", fx.name);
        checked += u64::from(e.reth_dma_len_sum > 0);
    }
    assert!(checked >= 3, "fixtures with RETH: {checked}");
}

/// `--max-flows`: the table holds at most that many flows, by its stated policy (a full table
/// makes room by evicting the flow quiet the longest): many_flows sends each flow's packets
/// together, so the table holds exactly the last 100 flows in the order of their first packet,
/// each with tshark's counts, and the ones that left are counted with their totals.
#[test]
fn max_flows_bounds_the_table_and_keeps_every_total() {
    require_tshark();
    let dir = TempDir::new("rocemon-maxflows").unwrap();
    let p = fixtures::many_flows().write(dir.path()).unwrap();
    let e = tshark::expected(&p).unwrap();
    let j = analyze_json_with(&p, &["--max-flows", "100"]);
    let held = j["flows"].as_array().unwrap();
    let (gone, last) = e.flow_order.split_at(e.flow_order.len() - 100);
    let got: std::collections::BTreeMap<_, _> = held
        .iter()
        .map(|f| {
            let key = (
                f["src"].as_str().unwrap().to_string(),
                f["dst"].as_str().unwrap().to_string(),
                u(&f["sport"]) as u16,
                u(&f["dest_qp"]) as u32,
            );
            (key, (u(&f["packets"]), u(&f["bytes"])))
        })
        .collect();
    let want: std::collections::BTreeMap<_, _> = last
        .iter()
        .map(|k| (k.clone(), (e.flows[k].packets, e.flows[k].bytes)))
        .collect();
    assert_eq!(got, want, "the last 100 flows, exactly");
    let ev = &j["flows_evicted"];
    assert_eq!(u(&ev["flows"]), gone.len() as u64);
    assert_eq!(
        u(&ev["packets"]),
        gone.iter().map(|k| e.flows[k].packets).sum::<u64>()
    );
    assert_eq!(
        u(&ev["bytes"]),
        gone.iter().map(|k| e.flows[k].bytes).sum::<u64>()
    );
    assert_eq!(u(&j["roce"]["packets"]), e.roce_packets);
    assert_eq!(u(&j["roce"]["cnp"]), e.cnp);
    // Unbounded enough: nothing leaves.
    let all = analyze_json(&p);
    assert_eq!(u(&all["flows_evicted"]["flows"]), 0);
    assert_eq!(all["flows"].as_array().unwrap().len(), e.flows.len());
}

/// A capture shorter than the elephant minimum duration (3 s by default) still shows its
/// elephants: the flows whose mean rate over the capture reaches the entry threshold. Here 1 ms
/// of traffic: three heavy writers (about 160 MB/s each) among twenty mice.
#[test]
fn a_one_millisecond_capture_shows_its_heavy_writers_as_elephants() {
    use rocemon_testkit::fixtures::{whole, Format};
    use rocemon_testkit::frames::Roce;
    let dir = TempDir::new("rocemon-short").unwrap();
    let (a, b) = ("10.80.0.1".parse().unwrap(), "10.80.0.2".parse().unwrap());
    let mut frames = Vec::new();
    let t0 = 1_764_460_800_000_000_000u64;
    for i in 0..120u64 {
        // 40 packets of 4 KiB per heavy writer over 1 ms, round robin.
        let heavy = (i % 3) as u16;
        let mut r = Roce::new(a, b, 0xC000 + heavy, 0x100 + u32::from(heavy), 0x07);
        r.payload = 4096;
        r.psn = (i / 3) as u32;
        frames.push((t0 + i * 8_000, r.frame()));
    }
    for m in 0..20u16 {
        let mut r = Roce::new(b, a, 0xD000 + m, 0x200 + u32::from(m), 0x04);
        r.payload = 64;
        frames.push((t0 + 50_000 * u64::from(m) % 960_000 + 1, r.frame()));
    }
    frames.sort_by_key(|f| f.0);
    let p = whole("short", Format::PcapNanos, frames, true)
        .write(dir.path())
        .unwrap();
    let j = analyze_json(&p);
    assert!(j["duration_seconds"].as_f64().unwrap() < 0.002);
    let mut sports: Vec<u64> = j["elephants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| u(&e["sport"]))
        .collect();
    sports.sort_unstable();
    assert_eq!(sports, [0xC000, 0xC001, 0xC002], "{}", j["elephants"]);
}

/// In one millisecond, a flow of 25 CNPs and a flow of 20 WRITEs of 4 KiB have mean rates far
/// above a 1 Mb/s threshold, but neither is large in the capture (under 32 packets): no
/// elephant.
#[test]
fn a_few_packets_in_a_short_capture_are_no_elephant() {
    use rocemon_testkit::fixtures::{whole, Format};
    use rocemon_testkit::frames::Roce;
    let dir = TempDir::new("rocemon-short-mice").unwrap();
    let (a, b) = ("10.81.0.1".parse().unwrap(), "10.81.0.2".parse().unwrap());
    let t0 = 1_764_460_800_000_000_000u64;
    let mut frames = Vec::new();
    for i in 0..25u64 {
        frames.push((t0 + i * 40_000, Roce::cnp(b, a, 0xC777, 0x100).frame()));
    }
    for i in 0..20u64 {
        let mut r = Roce::new(a, b, 0xC001, 0x101, 0x0A);
        r.payload = 4096;
        r.dma_len = 4096;
        r.psn = i as u32;
        frames.push((t0 + i * 50_000 + 1, r.frame()));
    }
    frames.sort_by_key(|f| f.0);
    let p = whole("short-mice", Format::PcapNanos, frames, true)
        .write(dir.path())
        .unwrap();
    // A threshold every one of them passes by mean rate (1 Mb/s).
    let j = analyze_json_with(&p, &["--elephant-bps", "1M"]);
    assert!(j["duration_seconds"].as_f64().unwrap() < 0.002);
    assert_eq!(j["elephants"], serde_json::json!([]), "{}", j["elephants"]);
}
