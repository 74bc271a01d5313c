//! The table's FINDINGS section: a sink over the findings the engine raised
//! ([`crate::pipeline::findings`]).

use crate::detect::findings::Finding;

/// The table's FINDINGS section, first: one line per finding, most serious first.
pub fn table(s: &mut String, findings: &[Finding]) {
    use std::fmt::Write as _;
    if findings.is_empty() {
        let _ = writeln!(
            s,
            "FINDINGS    none: no storm, congestion, loss or collision found\n"
        );
        return;
    }
    let _ = writeln!(s, "FINDINGS    {}", findings.len());
    for x in findings {
        let _ = writeln!(
            s,
            "  {:<8} {:<15} {:>8.3}-{:<8.3} s  {}",
            x.severity.name().to_uppercase(),
            x.kind,
            x.start_s,
            x.end_s,
            x.summary
        );
    }
    let _ = writeln!(
        s,
        "  (what each means and what to check next: docs/runbook.md)\n"
    );
}
