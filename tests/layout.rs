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
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.expect("directory entry").path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    dirs.push(p);
                }
            } else if name.ends_with(".rs") {
                let lines = std::fs::read_to_string(&p).map_or(0, |s| s.lines().count());
                if lines > 600 {
                    long.push(format!("{} ({lines} lines)", p.display()));
                }
            }
        }
    }
    assert!(long.is_empty(), "over 600 lines: {long:?}");
}
