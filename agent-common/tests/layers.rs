//! The crate's modules import each other one way: from the leaves of the shared vocabulary
//! (outcome, hook, flow key, headers, reader) through the parse result and the parsers up to
//! counting, never back. Read from the sources, so a new import that closes a cycle fails
//! here with the cycle named.

use rocemon_testkit::layers;

#[test]
fn modules_import_each_other_one_way() {
    let g = layers::graph(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(g.len() > 15, "{g:?}");
    if let Some(c) = layers::cycle(&g) {
        panic!("import cycle: {}\n{g:#?}", c.join(" -> "));
    }
    // The counting sits on top: nothing below it imports it.
    for (m, deps) in &g {
        assert!(
            m == "counters" || !deps.contains("counters"),
            "{m} imports counters"
        );
    }
}

/// The crate root defines nothing: modules and re-exports only. A constant or a function
/// defined there is one every module reaches by climbing back up to the root (the kernel
/// contract's names live in `contract/`, a leaf).
#[test]
fn the_crate_root_holds_only_modules_and_re_exports() {
    let lib = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"),
    )
    .expect("lib.rs");
    let mut code = Vec::new();
    let mut in_use = false;
    for l in lib.lines() {
        let t = l.trim();
        if t.is_empty() || t.starts_with("//") || t.starts_with("#!") || t.starts_with("#[") {
            continue;
        }
        // A `pub use` may span lines until its `;`.
        if in_use || t.starts_with("pub use ") {
            in_use = !t.ends_with(';');
            continue;
        }
        if t.starts_with("pub mod ") || t.starts_with("mod ") {
            continue;
        }
        code.push(t.to_string());
    }
    assert!(code.is_empty(), "defined in the crate root: {code:#?}");
}
