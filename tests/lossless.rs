//! The lossless fabric in `rocemon analyze`: PFC, PAUSE, other MAC control frames, RoCE by
//! DSCP and priority, lossy RoCE, each against tshark's decode of the same capture (the
//! kernel programs are checked against tshark in `tests/kernel.rs`, live traffic in
//! `tests/e2e_netns.rs`).

use rocemon_testkit::{fixtures, lossless, require_tshark, tshark, TempDir};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

fn analyze(args: &[&str], path: &std::path::Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .arg("analyze")
        .args(args)
        .arg(path)
        .output()
        .expect("run rocemon");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str], path: &std::path::Path) -> Value {
    rocemon_testkit::analyze_json(env!("CARGO_BIN_EXE_rocemon"), args, &[path])
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// `[{key, packets, bytes}]` as tshark's map shape.
fn classes(v: &Value, key: &str) -> BTreeMap<u8, (u64, u64)> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|c| (u(&c[key]) as u8, (u(&c["packets"]), u(&c["bytes"]))))
        .collect()
}

/// The lossless fixture and tshark's numbers for it.
fn fixture() -> (TempDir, std::path::PathBuf, tshark::Expected) {
    require_tshark();
    let dir = TempDir::new("rocemon-lossless").unwrap();
    let p = lossless::lossless().write(dir.path()).unwrap();
    let e = tshark::expected(&p).unwrap();
    (dir, p, e)
}

#[test]
fn pfc_frames_per_priority_equal_tshark() {
    let (_d, p, e) = fixture();
    let j = json(&[], &p);
    assert_eq!(u(&j["pfc"]["frames"]), e.pfc_frames);
    assert!(e.pfc_frames > 40, "the fixture has a storm");
    let prios = j["pfc"]["priorities"].as_array().unwrap();
    assert_eq!(prios.len(), 8);
    for (i, x) in prios.iter().enumerate() {
        assert_eq!(u(&x["priority"]), i as u64, "i {i:?}, x {x:?}");
        assert_eq!(
            (u(&x["xoff"]), u(&x["xon"]), u(&x["quanta"])),
            (e.pfc[i].xoff, e.pfc[i].xon, e.pfc[i].quanta),
            "priority {i} (xoff, xon, quanta)"
        );
    }
}

#[test]
fn a_time_on_a_disabled_class_is_ignored() {
    let (_d, p, e) = fixture();
    let j = json(&[], &p);
    // Priority 5 has a time in three frames but is enabled in only one (the 0xFF vector).
    assert_eq!(e.pfc[5].xoff, 1);
    assert_eq!(u(&j["pfc"]["priorities"][5]["xoff"]), 1);
    assert_eq!(u(&j["pfc"]["priorities"][5]["quanta"]), 6);
}

#[test]
fn pause_and_other_mac_control_equal_tshark() {
    let (_d, p, e) = fixture();
    let j = json(&[], &p);
    assert_eq!(u(&j["pause"]["frames"]), e.pause_frames);
    assert_eq!(u(&j["pause"]["quanta"]), e.pause_quanta);
    assert_eq!(u(&j["pause"]["xon"]), e.pause_xon);
    assert_eq!(u(&j["pause"]["other_mac_control"]), e.mac_control_other);
    assert_eq!(
        u(&j["not_roce"]["mac_control"]),
        e.pfc_frames + e.pause_frames + e.mac_control_other
    );
}

#[test]
fn pause_seconds_follow_the_link_speed() {
    let (_d, p, e) = fixture();
    let at = |gbps: &str| {
        json(&["--link-speed", gbps], &p)["pause"]["seconds"]
            .as_f64()
            .unwrap()
    };
    let want = |gbps: f64| e.pause_quanta as f64 * 512.0 / (gbps * 1e9);
    assert!((at("100") - want(100.0)).abs() < 1e-12);
    assert!((at("400") - want(400.0)).abs() < 1e-12);
}

#[test]
fn roce_by_dscp_and_priority_equal_tshark() {
    let (_d, p, e) = fixture();
    let j = json(&[], &p);
    assert_eq!(classes(&j["roce"]["dscp"], "dscp"), e.dscp);
    assert_eq!(classes(&j["roce"]["pcp"], "pcp"), e.pcp);
    assert_eq!(
        classes(&j["roce"]["cnp_classes"]["dscp"], "dscp"),
        e.cnp_dscp
    );
    assert_eq!(classes(&j["roce"]["cnp_classes"]["pcp"], "pcp"), e.cnp_pcp);
}

#[test]
fn lossy_roce_equals_tshark_under_the_default_classes() {
    let (_d, p, e) = fixture();
    let j = json(&[], &p);
    let l = &j["roce"]["lossy"];
    assert_eq!((u(&l["packets"]), u(&l["bytes"])), e.lossy_roce);
    assert_eq!(u(&l["cnp_out_of_class"]), e.cnp_out_of_class);
    assert!(e.lossy_roce.0 > 0 && e.cnp_out_of_class > 0);
}

#[test]
fn a_configured_class_changes_what_is_lossy() {
    let (d, p, e) = fixture();
    let cfg = d.path().join("classes.toml");
    std::fs::write(
        &cfg,
        "[classes]\nroce_dscp = [0, 10, 26, 34]\nroce_priority = \"any\"\ncnp_dscp = [26, 48]\n",
    )
    .unwrap();
    let j = json(&["--config", cfg.to_str().unwrap()], &p);
    assert_eq!(u(&j["roce"]["lossy"]["packets"]), 0);
    assert_eq!(u(&j["roce"]["lossy"]["cnp_out_of_class"]), 0);
    assert!(e.lossy_roce.0 > 0);
}

#[test]
fn a_bad_class_names_the_key() {
    let (d, p, _e) = fixture();
    let cfg = d.path().join("bad.toml");
    std::fs::write(&cfg, "[classes]\nroce_dscp = [70]\n").unwrap();
    let (ok, _, err) = analyze(&["--config", cfg.to_str().unwrap()], &p);
    assert!(!ok);
    assert!(
        err.contains("classes.roce_dscp") && err.contains("0 to 63"),
        "{err}"
    );
    let (ok, _, err) = analyze(&["--link-speed", "0"], &p);
    assert!(!ok);
    assert!(err.contains("--link-speed"), "{err}");
}

#[test]
fn the_table_shows_pfc_pause_and_lossy_roce() {
    let (_d, p, _e) = fixture();
    let (ok, out, err) = analyze(&["--no-progress"], &p);
    assert!(ok, "{err}");
    for want in ["PFC ", "p3 xoff 42 xon 3", "PAUSE ", "Lossy RoCE ", "DSCP "] {
        assert!(out.contains(want), "{want:?} missing:\n{out}");
    }
}

/// Every other fixture has no MAC control frame, and its classes still equal tshark's.
#[test]
fn every_fixture_has_tsharks_classes() {
    require_tshark();
    let dir = TempDir::new("rocemon-lossless-all").unwrap();
    for fx in fixtures::all() {
        if fx.snaplen != 65535 {
            continue;
        }
        let p = fx.write(dir.path()).unwrap();
        let e = tshark::expected(&p).unwrap();
        let j = json(&[], &p);
        assert_eq!(classes(&j["roce"]["dscp"], "dscp"), e.dscp, "{}", fx.name);
        assert_eq!(classes(&j["roce"]["pcp"], "pcp"), e.pcp, "{}", fx.name);
        assert_eq!(u(&j["pfc"]["frames"]), e.pfc_frames, "{}", fx.name);
        assert_eq!(
            (
                u(&j["roce"]["lossy"]["packets"]),
                u(&j["roce"]["lossy"]["bytes"])
            ),
            e.lossy_roce,
            "{}",
            fx.name
        );
    }
}
