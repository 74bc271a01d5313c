//! The agent's rooms import each other one way: sources and the kernel side, the pipeline, the
//! detectors, the exporters, and the commands that wire them on top (see the module map in
//! `lib.rs`). Read from the sources, so an import that closes a cycle fails here, named.

use rocemon_testkit::layers;

#[test]
fn the_rooms_import_each_other_one_way() {
    let g = layers::graph(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    for room in ["sources", "kernel", "pipeline", "detect", "export", "cmd"] {
        assert!(g.contains_key(room), "{room} in {g:?}");
    }
    if let Some(c) = layers::cycle(&g) {
        panic!("import cycle: {}\n{g:#?}", c.join(" -> "));
    }
    // The commands sit on top: nothing else imports them.
    for (m, deps) in &g {
        assert!(m == "cmd" || !deps.contains("cmd"), "{m} imports cmd");
    }
}

/// Small files named for what they hold: no Rust file of the workspace is over 600 lines
/// (the one that grows past it is split by what it holds).
#[test]
fn no_rust_file_is_over_600_lines() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut long = Vec::new();
    for (p, text) in rust_sources(&root, &[""]) {
        let lines = text.lines().count();
        if lines > 600 {
            long.push(format!("{} ({lines} lines)", p.display()));
        }
    }
    assert!(long.is_empty(), "over 600 lines: {long:?}");
}

/// No circle between files either: two files that import each other are one concern split
/// wrongly (or a shared part that wants a file of its own).
#[test]
fn no_import_cycle_between_files() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cycles = Vec::new();
    for krate in ["agent", "agent-common", "agent-ebpf", "xtask"] {
        cycles.extend(file_cycles(&root.join(krate).join("src")));
    }
    assert!(
        cycles.is_empty(),
        "import cycles between files:\n{}",
        cycles.join("\n")
    );
}

/// Every cycle between the files of one crate's `src/`.
fn file_cycles(src: &std::path::Path) -> Vec<String> {
    let g = layers::file_graph(src);
    assert!(g.len() > 3, "{}: {g:#?}", src.display());
    let mut cycles = Vec::new();
    let mut g2 = g.clone();
    // Every cycle, not only the first: remove an edge of each found and look again.
    while let Some(c) = layers::cycle(&g2) {
        cycles.push(format!("{}: {}", src.display(), c.join(" -> ")));
        if let Some(deps) = g2.get_mut(&c[c.len() - 2]) {
            deps.remove(&c[c.len() - 1]);
        }
    }
    cycles
}

/// Count once: outside `agent-common`, no source runs the counting steps itself; the kernel
/// programs, the AF_XDP tally, `analyze` and the fuzz targets call the one sequence
/// (`agent_common::count::count`, its `flow_step` from a store, `count_outcome`).
#[test]
fn nothing_outside_agent_common_runs_the_counting_steps() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let steps = [
        ".record_with(",
        ".record_flow(",
        ".record_roce(",
        ".record_other(",
        ".record_mac_control(",
        "SessionKey::of(",
        "counters.record(",
        "stats.record(",
    ];
    let mut found = Vec::new();
    for (p, text) in rust_sources(&root, &["agent/src", "agent-ebpf/src", "fuzz", "xtask/src"]) {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with("_tests.rs") || name == "tests.rs" {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            if line.trim_start().starts_with("//") {
                continue;
            }
            for s in steps.iter().filter(|s| line.contains(*s)) {
                found.push(format!("{}:{}: {s}", p.display(), i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "counting steps outside agent-common:\n{}",
        found.join("\n")
    );
}

/// The live agent's wiring stays readable: no function in `cmd/run/` is over 80 lines (a
/// longer one is split by what its parts do).
#[test]
fn no_function_of_the_live_wiring_is_over_80_lines() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cmd/run");
    let mut long = Vec::new();
    for e in std::fs::read_dir(&dir).expect("cmd/run") {
        let p = e.expect("entry").path();
        let text = std::fs::read_to_string(&p).expect("source");
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let t = l.trim_start();
            let is_fn = [
                "fn ",
                "pub fn ",
                "async fn ",
                "pub async fn ",
                "pub(crate) fn ",
                "pub(super) fn ",
            ]
            .iter()
            .any(|p| t.starts_with(p));
            if !is_fn {
                continue;
            }
            let indent = &l[..l.len() - t.len()];
            let close = format!("{indent}}}");
            let Some(end) = lines[i..].iter().position(|x| *x == close) else {
                continue;
            };
            if end + 1 > 80 {
                long.push(format!("{}:{} ({} lines)", p.display(), i + 1, end + 1));
            }
        }
    }
    assert!(long.is_empty(), "functions over 80 lines: {long:?}");
}

/// One per-packet vocabulary: what a packet says (CE, a NAK and its code, lossy RoCE, a CNP)
/// is decided in `agent-common/src/facts.rs` (and the CNP in its opcode), and every other
/// source file asks there. Read by meaning: the rules' own expressions (comparing the ECN
/// codepoint to 3, reading the AETH syndrome's kind, checking a class, comparing an opcode
/// to 0x81) found anywhere else are a second copy.
#[test]
fn the_per_packet_rules_are_written_once() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // (what the rule decides, a piece of its expression).
    let rules: [(&str, &str); 9] = [
        ("CE", "ecn() == 3"),
        ("CE", "ecn() & 3 == 3"),
        ("CE", ".ecn == 3"),
        ("NAK", "ack_syndrome("),
        ("NAK", "nak_slot("),
        ("NAK", "is_rnr_nak("),
        ("lossy", "roce_in_class("),
        ("CNP", "== 0x81"),
        ("CNP", "OPCODE_CNP"),
    ];
    // Where the rules are defined: the facts, and the primitives they are made of.
    let home = [
        "agent-common/src/facts.rs",
        "agent-common/src/psn.rs",
        "agent-common/src/classes.rs",
        "agent-common/src/opcode.rs",
        "agent-common/src/record.rs",
        "agent-common/src/info.rs",
    ];
    let mut found = Vec::new();
    for (p, text) in rust_sources(&root, &["agent/src", "agent-common/src", "agent-ebpf/src"]) {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let rel = p.strip_prefix(&root).unwrap_or(&p).display().to_string();
        if name.ends_with("_tests.rs")
            || name == "tests.rs"
            || home.iter().any(|h| rel.ends_with(h))
        {
            continue;
        }
        for (i, line) in rocemon_testkit::layers::non_test_lines(&text)
            .iter()
            .enumerate()
        {
            let code = line.split("//").next().unwrap_or("");
            for (what, piece) in rules.iter().filter(|(_, piece)| code.contains(piece)) {
                found.push(format!("{rel}:{}: the {what} rule again ({piece})", i + 1));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// The settings are a bottom room: `config/` owns every config-file section and its checks,
/// and imports no other room (each room reads its section from there).
#[test]
fn the_settings_import_no_other_room() {
    let g = layers::graph(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let deps = g.get("config").expect("config in the graph");
    let rooms: Vec<&String> = deps.iter().filter(|d| d.as_str() != "error").collect();
    assert!(rooms.is_empty(), "config imports {rooms:?}");
}

/// One findings engine: every kind of finding is raised in one place, the engine's judgement
/// (`detect/engine/judge.rs`; the "N more" finding of a flooded kind where the engine holds
/// them), whichever source the evidence came from. A builder of `detect/findings.rs` called
/// anywhere else (a second kitchen: the live agent's, the report's) fails here, named.
#[test]
fn every_finding_kind_is_raised_in_one_place() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let text = std::fs::read_to_string(src.join("detect/findings.rs")).expect("findings.rs");
    let builders = finding_builders(&text);
    for b in [
        "pfc_storm",
        "congestion",
        "cnp_missing",
        "slow_step",
        "link_down",
        "more",
    ] {
        assert!(builders.contains(&b.to_string()), "{b} in {builders:?}");
    }
    let homes = [
        ("detect/engine/judge.rs", ""),
        ("detect/engine/held.rs", "more"),
    ];
    let mut found = Vec::new();
    for (p, text) in rust_sources(&src, &[""]) {
        let rel = p.strip_prefix(&src).unwrap_or(&p).display().to_string();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with("_tests.rs") || rel == "detect/findings.rs" {
            continue;
        }
        for (i, line) in layers::non_test_lines(&text).iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for b in &builders {
                let home = homes
                    .iter()
                    .any(|(h, only)| rel == *h && (only.is_empty() || only == b));
                if !home && code.contains(&format!("::{b}(")) {
                    found.push(format!("{rel}:{}: raises {b} outside the engine", i + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// The builders of `detect/findings.rs`: its public functions that return a finding.
fn finding_builders(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("pub fn ") {
        let rest = &text[i + "pub fn ".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let signature = rest.split('{').next().unwrap_or("");
        if signature.contains("-> Finding") || signature.contains("-> Option<Finding>") {
            out.push(name);
        }
    }
    out
}

/// The exporters are sinks: the report, `/metrics`, the API, the page and `top` read what
/// the engine judged and judge nothing themselves (no ranking, no loss folding, no slow-step
/// causes, no engine call in `export/`).
#[test]
fn the_exporters_judge_nothing() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let judging = [
        "engine::judge",
        "engine::rank",
        "incidents::incidents",
        "incidents::verdict",
        "recovery::incidents",
        "slow_steps::causes",
        "pipeline::findings::judge",
        "training_view::",
    ];
    let mut found = Vec::new();
    for (p, text) in rust_sources(&src, &["export"]) {
        let rel = p.strip_prefix(&src).unwrap_or(&p).display().to_string();
        for (i, line) in layers::non_test_lines(&text).iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for j in judging.iter().filter(|j| code.contains(*j)) {
                found.push(format!("{rel}:{}: judges ({j})", i + 1));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// One rule per judgement: a storm is a pause without a break longer than the threshold, in
/// the pause tracker (`detect/pause.rs`), for a capture's frames, the live kernel's frames
/// and the counters' paused intervals alike; a sender ignored a burst of CNPs by the
/// reaction rule (`detect/engine/reaction.rs`), per packet in a capture and per poll live.
/// A threshold of either compared anywhere else is a second rule.
#[test]
fn each_judgement_threshold_is_compared_in_one_place() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // (a piece of the threshold's name, where it is compared).
    let rules = [
        ("storm_ns", "detect/pause.rs"),
        ("storm_s", "detect/pause.rs"),
        ("IGNORED_RATIO", "detect/engine/reaction.rs"),
        ("MIN_BEFORE_PACKETS", "detect/engine/reaction.rs"),
    ];
    let mut found = Vec::new();
    for (p, text) in rust_sources(&src, &[""]) {
        let rel = p.strip_prefix(&src).unwrap_or(&p).display().to_string();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with("_tests.rs") || rel.starts_with("config/") {
            continue;
        }
        for (i, line) in layers::non_test_lines(&text).iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let compares = [">", "<"].iter().any(|op| code.contains(op));
            for (piece, home) in &rules {
                if rel != *home && compares && code.contains(piece) {
                    found.push(format!("{rel}:{}: {}", i + 1, code.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// Every Rust source file under `dirs` (of the workspace root), skipping `target` and hidden
/// folders, each with its text.
fn rust_sources(root: &std::path::Path, dirs: &[&str]) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut todo: Vec<_> = dirs.iter().map(|d| root.join(d)).collect();
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.expect("entry").path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if p.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    todo.push(p);
                }
            } else if name.ends_with(".rs") {
                let text = std::fs::read_to_string(&p).expect("read");
                out.push((p, text));
            }
        }
    }
    out
}
