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
