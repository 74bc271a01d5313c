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
