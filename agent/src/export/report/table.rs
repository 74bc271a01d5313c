//! `analyze`'s text table: the findings first, then totals, opcodes, ECN, CNPs, parse
//! outcomes and the top flows.

use super::{human_bytes, thousands as t, Opcode, Report};
use crate::export::report::lossless;
use std::fmt::Write as _;

fn pct(n: u64, d: u64) -> String {
    if d == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * n as f64 / d as f64)
    }
}

/// The summary table: totals, opcodes, ECN, CNPs, parse outcomes and the top flows.
pub fn table(r: &Report<'_>, top: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Verdict     {}", r.verdict);
    super::findings::table(&mut s, &r.findings);
    let _ = writeln!(
        s,
        "Frames      {:>12}   {} over {:.3} s",
        t(r.frames),
        human_bytes(r.bytes as f64),
        r.duration_seconds
    );
    let _ = writeln!(
        s,
        "RoCEv2      {:>12}   {}  ({} of frames)",
        t(r.roce.packets),
        human_bytes(r.roce.bytes as f64),
        pct(r.roce.packets, r.frames)
    );
    let _ = writeln!(
        s,
        "CNPs        {:>12}   BECN {}  FECN {}",
        t(r.roce.cnp),
        t(r.roce.becn),
        t(r.roce.fecn)
    );
    let e = &r.roce.ecn;
    let p = r.roce.packets;
    let _ = writeln!(
        s,
        "ECN         not-ECT {} ({})  ECT(0) {} ({})  ECT(1) {} ({})  CE {} ({})",
        t(e.not_ect),
        pct(e.not_ect, p),
        t(e.ect0),
        pct(e.ect0, p),
        t(e.ect1),
        pct(e.ect1, p),
        t(e.ce),
        pct(e.ce, p)
    );
    let encapsulated: u64 = r
        .roce
        .tunnels
        .iter()
        .filter(|(k, _)| **k != "none")
        .map(|(_, v)| v)
        .sum();
    if encapsulated > 0 {
        let kinds: Vec<String> = r
            .roce
            .tunnels
            .iter()
            .filter(|(k, v)| **k != "none" && **v > 0)
            .map(|(k, v)| format!("{k} {}", t(*v)))
            .collect();
        let _ = writeln!(
            s,
            "Mirrored    {:>12}   {}",
            t(encapsulated),
            kinds.join("  ")
        );
        for x in &r.roce.sessions {
            let _ = writeln!(
                s,
                "  session {:<8} {:<10} {:>10} packets  {:>10}  CE {}  CNP {}",
                x.tunnel,
                x.id,
                t(x.packets),
                human_bytes(x.bytes as f64),
                t(x.ce_packets),
                t(x.cnp_packets)
            );
        }
    }
    lossless::table(&mut s, &r.pfc, &r.pause, &r.roce.dscp, &r.roce.lossy);
    crate::export::report::training::table(&mut s, &r.training, &r.roce.messages);
    let other: u64 = r.not_roce.values().sum();
    let bad: u64 = r.malformed.values().sum();
    let tail = if r.truncated_tail {
        "   (file ends inside a record)"
    } else {
        ""
    };
    let _ = writeln!(
        s,
        "Not RoCE    {:>12}   Malformed {}{tail}",
        t(other),
        t(bad)
    );
    for (k, v) in r.malformed.iter().filter(|(_, v)| **v > 0) {
        let _ = writeln!(s, "  malformed {k:<28} {}", t(*v));
    }
    let ct = &r.capture_time;
    if let Some(first) = ct.discontinuities.first() {
        let _ = writeln!(
            s,
            "Capture clock jumped {} time(s) (first at frame {}, {:+.0} s): time runs on across each jump instead of spanning it",
            ct.discontinuities_total, first.frame, first.jump_seconds
        );
    }
    if ct.frames_stepped_back > 0 {
        let _ = writeln!(
            s,
            "Frames dated back in time (under 1 s): {}, taken at the time already reached",
            ct.frames_stepped_back
        );
    }
    let h = &r.health;
    let nak_total: u64 = h.naks.values().sum();
    let _ = writeln!(
        s,
        "PSN gaps    {:>12}   retransmissions {}   NAKs {}   RNR NAKs {}",
        t(h.psn_gaps),
        t(h.retransmits),
        t(nak_total),
        t(h.rnr_naks)
    );
    for (k, v) in h.naks.iter().filter(|(_, v)| **v > 0) {
        let _ = writeln!(s, "  NAK {k:<34} {}", t(*v));
    }

    let _ = writeln!(s, "\n{:<36} {:>12} {:>12}", "OPCODE", "PACKETS", "BYTES");
    let mut ops: Vec<&Opcode> = r.roce.opcodes.iter().collect();
    ops.sort_by(|a, b| b.packets.cmp(&a.packets).then(a.opcode.cmp(&b.opcode)));
    for o in ops {
        let name = format!("{} (0x{:02x})", o.name, o.opcode);
        let _ = writeln!(s, "{name:<36} {:>12} {:>12}", t(o.packets), t(o.bytes));
    }

    let _ = writeln!(s, "\nELEPHANTS {}", r.elephants.len());
    for e in &r.elephants {
        for p in &e.periods {
            let end = p
                .ended_s
                .map(|t| format!("{t:.1} s"))
                .unwrap_or_else(|| "end".into());
            let _ = writeln!(
                s,
                "  {} -> {} sport {} qp 0x{:x}: {:.1} s .. {end}, peak {}",
                e.src,
                e.dst,
                e.sport,
                e.dest_qp,
                p.started_s,
                crate::detect::findings::bits_per_second(p.peak_bytes_per_second)
            );
        }
    }
    if let Some(p) = &r.ecmp.predicted {
        let verdict = if p.collision {
            "COLLISION"
        } else {
            "no collision"
        };
        let _ = writeln!(s, "\nPREDICTED ECMP ({} paths): {verdict}", p.members.len());
        for m in p.members.iter().filter(|m| m.flows > 0) {
            let mark = if m.colliding { "  <- collision" } else { "" };
            let _ = writeln!(
                s,
                "  path {:>4}: {:>5} flows {:>3} elephants{mark}",
                m.member, m.flows, m.elephants
            );
        }
    }
    let _ = writeln!(
        s,
        "\nSHARED 5-TUPLES {} (flows no 5-tuple hash can separate)",
        r.ecmp.shared_5tuple_groups
    );
    for t in r.ecmp.shared_5tuples.iter().take(top) {
        let _ = writeln!(
            s,
            "  {} -> {} sport {}: {} QPs",
            t.src,
            t.dst,
            t.sport,
            t.dest_qps.len()
        );
    }

    let _ = writeln!(
        s,
        "\nTOP {} OF {} FLOWS",
        top.min(r.flows.len()),
        r.flows.len()
    );
    if r.flows_evicted.flows > 0 {
        let _ = writeln!(
            s,
            "({} more flows left the table, --max-flows: {} packets, {} bytes; in every total)",
            t(r.flows_evicted.flows),
            t(r.flows_evicted.packets),
            t(r.flows_evicted.bytes)
        );
    }
    let _ = writeln!(
        s,
        "{:<42} {:>6} {:>8} {:>10} {:>12} {:>12} {:>7} {:>5} {:>5} {:>5}",
        "SRC -> DST",
        "SPORT",
        "DEST_QP",
        "PACKETS",
        "BYTES",
        "MEAN RATE",
        "CE",
        "CNP",
        "GAPS",
        "NAKS"
    );
    for f in r.flows.iter().take(top) {
        let _ = writeln!(
            s,
            "{:<42} {:>6} {:>8} {:>10} {:>12} {:>12} {:>7} {:>5} {:>5} {:>5}{}",
            format!("{} -> {}", f.src, f.dst),
            f.sport,
            format!("0x{:x}", f.dest_qp),
            t(f.packets),
            t(f.bytes),
            crate::detect::findings::bits_per_second(f.mean_bytes_per_second),
            t(f.ecn_ce),
            t(f.cnp),
            t(f.psn_gaps),
            t(f.naks.values().sum::<u64>() + f.rnr_naks),
            if f.elephant { "  elephant" } else { "" }
        );
    }
    s
}
