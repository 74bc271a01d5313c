//! `rocemon top` prints what an agent's API answers, and the API is whatever answers at the
//! address: a fake agent whose strings carry terminal escapes (window title, screen clear,
//! bell) must not reach the terminal through `top --once`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rocemon");

/// Escapes a hostile agent would put in its strings.
const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[31meth0\r\u{9b}31m";

/// The fake agent's answer to `path`.
fn answer(path: &str) -> serde_json::Value {
    let flow = serde_json::json!({
        "iface": HOSTILE, "direction": "ingress", "hook": HOSTILE,
        "src": HOSTILE, "dst": "10.0.0.2", "sport": 4791, "dest_qp": 17,
        "packets": 10, "bytes": 1000, "rate_bytes_per_second": 1e6,
        "rate_packets_per_second": 10.0, "elephant": true, "ecn_ce": 1, "cnp": 0,
        "psn_gaps": 0, "naks": 0
    });
    if path.starts_with("/api/v1/flows") {
        serde_json::json!({"flows_total": 1, "elephants_total": 1, "flows": [flow]})
    } else if path.starts_with("/api/v1/findings") {
        serde_json::json!({"active": [{
            "kind": "congestion", "severity": "warning", "start_s": 0.0, "end_s": 1.0,
            "subject": HOSTILE, "summary": HOSTILE, "evidence": {}, "runbook": HOSTILE
        }], "recent": []})
    } else if path.starts_with("/api/v1/summary") {
        serde_json::json!({"interfaces": 1, "rx_bits_per_second": 1e9, "tx_bits_per_second": 0.0,
            "findings_active": 1, "flow_maps": [{"iface": HOSTILE, "map": "FLOWS4",
            "entries": 16, "max_entries": 16, "fill_ratio": 1.0, "pushed_out_total": 5}]})
    } else if path.starts_with("/api/v1/ecmp") {
        serde_json::json!({"groups": [{"name": HOSTILE, "members": []}]})
    } else if path.starts_with("/api/v1/training") {
        serde_json::json!({"interfaces": [{"iface": HOSTILE, "period_seconds": 0.1,
            "duty_ratio": 0.2, "step_bytes": 1e6, "slow_steps": 1, "lost_seconds": 0.0,
            "steps": []}]})
    } else {
        serde_json::Value::Null
    }
}

/// Serves every request on `l` with [`answer`] until the listener goes.
fn serve(l: TcpListener) {
    for s in l.incoming() {
        let Ok(mut s) = s else { return };
        let mut line = String::new();
        let mut r = BufReader::new(s.try_clone().unwrap());
        if r.read_line(&mut line).is_err() {
            continue;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        // The rest of the request head.
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).map_or(true, |n| n == 0) || h == "\r\n" {
                break;
            }
        }
        let body = answer(&path).to_string();
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

#[test]
fn top_once_prints_no_terminal_escapes_from_the_agent() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || serve(l));
    let out = Command::new(BIN)
        .args(["top", "--once", "--addr", &addr.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("eth0"), "the strings are shown: {text}");
    for bad in ['\u{1b}', '\u{7}', '\r', '\u{9b}'] {
        assert!(
            !text.contains(bad),
            "{bad:?} reached the terminal: {text:?}"
        );
    }
    assert!(text.contains("FLOW MAPS FULL"), "{text}");
}
