//! IPFIX flow records, offline: `rocemon analyze --ipfix-file` decoded by tshark's IPFIX
//! dissector and `rocemon analyze --ipfix` received by pmacct's nfacctd (a real collector),
//! both equal to tshark's count of the capture and to rocemon's own flow table.
//! The live agent's export is in `tests/ipfix_live.rs`.

use rocemon_testkit::ipfix::{self, Message, Nfacctd};
use rocemon_testkit::{fixtures, require_tshark, tshark, TempDir};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");

type Key = (String, String, u16, u32);

/// What the records of one flow add up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sums {
    records: u64,
    packets: u64,
    bytes: u64,
    ce: u64,
    cnp: u64,
    becn: u64,
    psn_gaps: u64,
    retransmits: u64,
    naks: u64,
    /// send, write, read_request, read_response, ack, atomic, other
    ops: [u64; 7],
}

fn sums(messages: &[Message]) -> BTreeMap<Key, Sums> {
    let mut out: BTreeMap<Key, Sums> = BTreeMap::new();
    for m in messages {
        for r in &m.records {
            assert_eq!(r.dport, 4791, "{r:?}");
            assert_eq!(r.protocol, 17, "{r:?}");
            assert_eq!(r.roce.len(), 15, "15 RoCE elements: {r:?}");
            let s = out
                .entry((r.src.clone(), r.dst.clone(), r.sport, r.roce(1) as u32))
                .or_default();
            s.records += 1;
            s.packets += r.packets;
            s.bytes += r.octets;
            for (i, op) in s.ops.iter_mut().enumerate() {
                *op += r.roce(2 + i);
            }
            s.ce += r.roce(9);
            s.cnp += r.roce(10);
            s.becn += r.roce(11);
            s.psn_gaps += r.roce(12);
            s.retransmits += r.roce(13);
            s.naks += r.roce(14);
        }
    }
    out
}

/// `rocemon analyze --format json --ipfix-file F [extra] capture`: the report and the
/// file's messages as tshark decodes them (and the raw messages).
fn export(capture: &Path, extra: &[&str], dir: &Path) -> (Value, Vec<Message>, Vec<Vec<u8>>) {
    let out_file = dir.join(format!(
        "{}.ipfix",
        capture.file_name().unwrap().to_string_lossy()
    ));
    let mut args = vec!["--ipfix-file", out_file.to_str().unwrap()];
    args.extend_from_slice(extra);
    let report = rocemon_testkit::analyze_json(BIN, &args, &[capture]);
    let raw = ipfix::split(&std::fs::read(&out_file).unwrap()).unwrap();
    let decoded = ipfix::decode_messages(&raw, dir).unwrap();
    (report, decoded, raw)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The report's flow table as the records' sums should be.
fn table(report: &Value) -> BTreeMap<Key, Sums> {
    report["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let key = (
                f["src"].as_str().unwrap().to_string(),
                f["dst"].as_str().unwrap().to_string(),
                u(&f["sport"]) as u16,
                u(&f["dest_qp"]) as u32,
            );
            let naks: u64 =
                f["naks"].as_object().unwrap().values().map(u).sum::<u64>() + u(&f["rnr_naks"]);
            let ops = [
                "send",
                "write",
                "read_request",
                "read_response",
                "ack",
                "atomic",
                "other",
            ]
            .map(|k| u(&f["ops"][k]));
            (
                key,
                Sums {
                    records: 0,
                    packets: u(&f["packets"]),
                    bytes: u(&f["bytes"]),
                    ce: u(&f["ecn_ce"]),
                    cnp: u(&f["cnp"]),
                    becn: u(&f["becn"]),
                    psn_gaps: u(&f["psn_gaps"]),
                    retransmits: u(&f["retransmits"]),
                    naks,
                    ops,
                },
            )
        })
        .collect()
}

/// Every record counted in its message's sequence: each message's number is the records
/// before it; the first message opens with the templates.
fn check_sequence(messages: &[Message], what: &str) {
    assert!(messages[0].templates, "{what}: templates first");
    let mut seq = 0u32;
    for m in messages {
        assert_eq!(m.sequence, seq, "{what}: sequence numbers");
        seq = seq.wrapping_add(m.records.len() as u32);
    }
}

fn file_case(fx: fixtures::Fixture) {
    require_tshark();
    let dir = TempDir::new("rocemon-ipfix").unwrap();
    let path = fx.write(dir.path()).unwrap();
    let expected = tshark::expected(&path).unwrap();
    let (report, messages, _) = export(&path, &[], dir.path());
    check_sequence(&messages, fx.name);
    let got = sums(&messages);
    // Against tshark's count of the capture: per flow, packets, bytes, CE marks, CNPs.
    let keys: Vec<&Key> = got.keys().collect();
    let want_keys: Vec<&Key> = expected.flows.keys().collect();
    assert_eq!(keys, want_keys, "{}: the flows", fx.name);
    for (k, e) in &expected.flows {
        let s = got[k];
        assert_eq!(
            (s.packets, s.bytes, s.ce, s.cnp),
            (e.packets, e.bytes, e.ecn_ce, e.cnp),
            "{}: flow {k:?}",
            fx.name
        );
    }
    // Against rocemon's own flow table: every RoCE field.
    let mut flows = table(&report);
    for (k, s) in &got {
        let t = flows.get_mut(k).expect("the flow is in the table");
        t.records = s.records;
        assert_eq!(s, t, "{}: flow {k:?}", fx.name);
    }
}

#[test]
fn records_of_rc_ipv4_decode_cleanly_and_equal_tshark_and_the_flow_table() {
    file_case(fixtures::rc_ipv4());
}

#[test]
fn records_of_ipv6_and_vlans_decode_cleanly_and_equal_tshark_and_the_flow_table() {
    file_case(fixtures::mixed_ipv6_vlan());
}

#[test]
fn records_of_psn_gaps_and_naks_decode_cleanly_and_equal_tshark_and_the_flow_table() {
    file_case(fixtures::psn_health());
}

#[test]
fn records_of_tunnelled_roce_decode_cleanly_and_equal_tshark_and_the_flow_table() {
    file_case(fixtures::tunnels());
}

#[test]
fn an_export_larger_than_a_message_is_split_with_no_record_lost() {
    require_tshark();
    let dir = TempDir::new("rocemon-ipfix-split").unwrap();
    let path = fixtures::many_flows().write(dir.path()).unwrap();
    let expected = tshark::expected(&path).unwrap();
    let (report, messages, raw) = export(&path, &[], dir.path());
    assert!(raw.len() > 5, "{} messages", raw.len());
    assert!(raw.iter().all(|m| m.len() <= 1400), "the default size");
    check_sequence(&messages, "many flows");
    assert_eq!(
        messages.iter().map(|m| m.records.len()).sum::<usize>(),
        report["flows"].as_array().unwrap().len(),
        "one record per flow (no flow lasts an active timeout)"
    );
    let got = sums(&messages);
    assert_eq!(got.len(), expected.flows.len());
    for (k, e) in &expected.flows {
        assert_eq!(
            (got[k].packets, got[k].bytes),
            (e.packets, e.bytes),
            "{k:?}"
        );
    }
}

/// A flood of flows through a table of 50: the flows pushed out give their last record at
/// once (lack of resources), the table stays bounded, and no packet is lost on the way.
#[test]
fn a_flood_of_flows_past_max_flows_ends_the_pushed_out_ones_and_loses_no_packet() {
    require_tshark();
    let dir = TempDir::new("rocemon-ipfix-flood").unwrap();
    let path = fixtures::many_flows().write(dir.path()).unwrap();
    let expected = tshark::expected(&path).unwrap();
    let (report, messages, _) = export(&path, &["--max-flows", "50"], dir.path());
    check_sequence(&messages, "a flood past --max-flows");
    let held = report["flows"].as_array().unwrap().len();
    assert!(held <= 50, "the table holds {held} flows");
    let reasons: Vec<u8> = messages
        .iter()
        .flat_map(|m| &m.records)
        .map(|r| r.end_reason)
        .collect();
    let pushed = reasons.iter().filter(|r| **r == 5).count() as u64;
    // Each of the 400 flows sends its packets in one run: one record per flow, ended for
    // lack of resources or (the ones still held) by the end of the capture.
    assert_eq!(reasons.len(), expected.flows.len(), "{reasons:?}");
    assert_eq!(
        pushed,
        u(&report["flows_evicted"]["flows"]),
        "the report's count"
    );
    assert!(
        pushed >= expected.flows.len() as u64 - 50,
        "{pushed} pushed out"
    );
    assert_eq!(
        reasons.len() as u64 - pushed,
        held as u64,
        "the held ones at the end"
    );
    let got = sums(&messages);
    assert_eq!(got.len(), expected.flows.len());
    for (k, e) in &expected.flows {
        assert_eq!(
            (got[k].packets, got[k].bytes, got[k].ce, got[k].cnp),
            (e.packets, e.bytes, e.ecn_ce, e.cnp),
            "{k:?}"
        );
    }
}

#[test]
fn a_smaller_message_size_from_the_config_file_makes_more_messages_and_loses_none() {
    require_tshark();
    let dir = TempDir::new("rocemon-ipfix-size").unwrap();
    let path = fixtures::many_flows().write(dir.path()).unwrap();
    let conf = dir.path().join("rocemon.toml");
    // Its collectors are not `analyze`'s: only the command line sends a capture anywhere.
    std::fs::write(
        &conf,
        "[ipfix]\ncollectors = [\"127.0.0.1:9\"]\nmax_message_bytes = 700\nobservation_domain_id = 77\n",
    )
    .unwrap();
    let (report, messages, raw) = export(&path, &["--config", conf.to_str().unwrap()], dir.path());
    assert!(raw.iter().all(|m| m.len() <= 700));
    assert!(messages.iter().all(|m| m.domain == 77));
    check_sequence(&messages, "700-byte messages");
    assert_eq!(
        messages.iter().map(|m| m.records.len()).sum::<usize>(),
        report["flows"].as_array().unwrap().len()
    );
}

#[test]
fn a_flow_longer_than_the_active_timeout_gives_a_record_each_timeout_that_add_up() {
    require_tshark();
    let dir = TempDir::new("rocemon-ipfix-active").unwrap();
    let path = fixtures::elephant_timeline().write(dir.path()).unwrap();
    let expected = tshark::expected(&path).unwrap();
    let (_, messages, _) = export(&path, &["--ipfix-active-timeout-seconds", "3"], dir.path());
    let got = sums(&messages);
    for (k, e) in &expected.flows {
        assert_eq!(
            (got[k].packets, got[k].bytes),
            (e.packets, e.bytes),
            "{k:?}"
        );
    }
    // The heavy flow sends for 10 s, the light one for 20 s (capture time).
    let reasons = |sport: u16| -> Vec<u8> {
        messages
            .iter()
            .flat_map(|m| &m.records)
            .filter(|r| r.sport == sport)
            .map(|r| r.end_reason)
            .collect()
    };
    let heavy = reasons(0xC201);
    let light = reasons(0xC202);
    // Heavy: at 3, 6, 9 and 12 s (the last with what it sent from 9 to 10 s); light: at 3,
    // 6, ..., 18 s.
    assert_eq!(heavy.iter().filter(|r| **r == 2).count(), 4, "{heavy:?}");
    assert_eq!(light.iter().filter(|r| **r == 2).count(), 6, "{light:?}");
    let last_heavy = messages
        .iter()
        .flat_map(|m| &m.records)
        .rfind(|r| r.sport == 0xC201)
        .unwrap();
    assert_eq!(
        last_heavy.packets, 0,
        "nothing since its last active record"
    );
    // The last record of each: the capture ended (forced end), well within the idle timeout.
    assert_eq!(heavy.last(), Some(&4));
    assert_eq!(light.last(), Some(&4));
}

#[test]
fn a_captures_records_reach_nfacctd_whose_totals_per_flow_and_qp_equal_tshark() {
    require_tshark();
    assert!(
        ipfix::nfacctd_available(),
        "pmacct's nfacctd is not installed (Debian package pmacct; `cargo xtask setup`)"
    );
    let dir = TempDir::new("rocemon-ipfix-nfacctd").unwrap();
    let port = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let collector = Nfacctd::start(None, port, dir.path()).unwrap();
    let mut want: ipfix::Totals = BTreeMap::new();
    for fx in [
        fixtures::rc_ipv4(),
        fixtures::mixed_ipv6_vlan(),
        fixtures::many_flows(),
    ] {
        let path = fx.write(dir.path()).unwrap();
        for (k, e) in tshark::expected(&path).unwrap().flows {
            let w = want.entry(k).or_default();
            w.0 += e.packets;
            w.1 += e.bytes;
        }
        rocemon_testkit::analyze_json(BIN, &["--ipfix", &collector.addr], &[path.as_path()]);
    }
    let got = collector.totals().unwrap();
    assert_eq!(got, want);
}

#[test]
fn a_bad_ipfix_destination_names_the_fix() {
    let dir = TempDir::new("rocemon-ipfix-bad").unwrap();
    let path = fixtures::rc_ipv4().write(dir.path()).unwrap();
    for (args, want) in [
        (
            vec!["--ipfix", "sctp://127.0.0.1:4739"],
            "use udp://HOST:PORT or tcp://HOST:PORT",
        ),
        (
            vec!["--ipfix", "127.0.0.1:notaport"],
            "is not HOST:PORT or does not resolve",
        ),
        (
            vec!["--ipfix-file", "/nonexistent-dir/out.ipfix"],
            "check the path given to --ipfix-file",
        ),
        (
            vec!["--ipfix-active-timeout-seconds", "5"],
            "add --ipfix HOST:PORT",
        ),
    ] {
        let out = std::process::Command::new(BIN)
            .arg("analyze")
            .args(&args)
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
