//! Helpers of the end-to-end tests: the agent's flows keyed as tshark's, and captures cut into
//! chunks an AF_XDP socket takes whole.

use crate::netns::http_get_in;
use crate::tshark;
use std::collections::BTreeMap;

/// Frames sent to an AF_XDP socket before waiting for it to take them: under its ring's
/// 2,048, so nothing can be dropped for want of room, however slow the machine.
pub const AFXDP_CHUNK: usize = 1_000;

/// The captures in chunks of at most [`AFXDP_CHUNK`] frames (editcap, Wireshark's own
/// splitter), each with what its AF_XDP socket must take (tshark: RoCE, port 4791 without a
/// BTH, mirror encapsulations cut in their header).
pub fn afxdp_chunks(
    sent: &[std::path::PathBuf],
    dir: &std::path::Path,
) -> Vec<(std::path::PathBuf, u64)> {
    let mut out = Vec::new();
    for (i, p) in sent.iter().enumerate() {
        let stem = dir.join(format!("chunk{i}.pcap"));
        let ok = std::process::Command::new("editcap")
            .args(["-F", "pcap", "-c", &AFXDP_CHUNK.to_string()])
            .arg(p)
            .arg(&stem)
            .status()
            .expect("editcap (Debian package wireshark-common, with tshark)");
        assert!(ok.success(), "editcap {}", p.display());
        let mut parts: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|x| {
                x.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("chunk{i}_")))
            })
            .collect();
        parts.sort();
        for part in parts {
            let e = tshark::expected(&part).unwrap();
            out.push((
                part,
                e.roce_packets + e.port_4791_without_bth + e.broken_mirrors,
            ));
        }
    }
    out
}

/// Per flow, from the agent's JSON API, the flows seen at `hook`: packets, bytes, CE marks
/// and CNPs, keyed as tshark's.
pub fn api_flows(
    ns: &str,
    addr: &str,
    hook: &str,
) -> BTreeMap<(String, String, u16, u32), tshark::FlowExpect> {
    let (status, flows_json) = http_get_in(ns, addr, "/api/v1/flows").unwrap();
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_str(&flows_json).unwrap();
    doc["flows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["hook"] == hook)
        .map(|f| {
            let n = |k: &str| f[k].as_u64().unwrap();
            (
                (
                    f["src"].as_str().unwrap().to_string(),
                    f["dst"].as_str().unwrap().to_string(),
                    n("sport") as u16,
                    n("dest_qp") as u32,
                ),
                tshark::FlowExpect {
                    packets: n("packets"),
                    bytes: n("bytes"),
                    ecn_ce: n("ecn_ce"),
                    cnp: n("cnp"),
                },
            )
        })
        .collect()
}

/// The agent's flows at `hook` once they equal `want` (the agent hands its flows to the API
/// at its polls), or what they are after 20 seconds.
pub fn wait_api_flows(
    ns: &str,
    addr: &str,
    hook: &str,
    want: &BTreeMap<(String, String, u16, u32), tshark::FlowExpect>,
) -> BTreeMap<(String, String, u16, u32), tshark::FlowExpect> {
    let t = std::time::Instant::now();
    loop {
        let got = api_flows(ns, addr, hook);
        if &got == want || t.elapsed() > std::time::Duration::from_secs(20) {
            return got;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A scrape's RoCE packets, bytes and packets by ECN codepoint under `labels`, equal to
/// tshark's `e`.
pub fn assert_totals_equal(body: &str, labels: &[(&str, &str)], e: &tshark::Expected) {
    let f = |name: &str, extra: &[(&str, &str)]| {
        let mut l = labels.to_vec();
        l.extend_from_slice(extra);
        crate::netns::metric_sum(body, name, &l) as u64
    };
    assert_eq!(f("rocemon_packets_total", &[]), e.roce_packets, "packets");
    assert_eq!(f("rocemon_bytes_total", &[]), e.roce_bytes, "bytes");
    for (i, cp) in ["not_ect", "ect1", "ect0", "ce"].iter().enumerate() {
        assert_eq!(
            f("rocemon_ecn_packets_total", &[("codepoint", cp)]),
            e.ecn[i],
            "packets of ECN codepoint {cp}"
        );
    }
}
