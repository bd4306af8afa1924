//! `braid tarl`: check (positions of errors), show, list and sim.

use std::process::Command;

fn braid(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_braid")).args(args).output().expect("run braid")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn every_shipped_rule_checks_and_a_bad_file_fails_with_its_position() {
    for s in braid_tarl::algorithms::SHIPPED {
        let out = braid(&["tarl", "check", s.name]);
        assert!(out.status.success(), "{}: {}", s.name, text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.contains("ok (schema"), "{stdout}");
        let want = match s.name {
            "yao" => "geometric-directed",
            "low_delay_jump" => "tree",
            _ => "geometric",
        };
        assert!(stdout.contains(want), "{}: {stdout}", s.name);
    }
    let dir = std::env::temp_dir().join(format!("braid-tarl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad_syntax = dir.join("syntax.tarl");
    std::fs::write(&bad_syntax, "filter(\n  match(TP, Ctrl, self <- e0 -> ),\n  true)\nexecute every match:\n  at (self, TP, Ctrl) remove_neighbor(v)\n").unwrap();
    let unknown_attr = dir.join("attr.tarl");
    std::fs::write(
        &unknown_attr,
        "filter(\n  match(TP, Ctrl, self <- e0 -> v),\n  e0.colour > 1)\nexecute every match:\n  at (self, TP, Ctrl) remove_neighbor(v)\n",
    )
    .unwrap();
    let good = dir.join("gabriel.tarl");
    std::fs::write(&good, braid_tarl::algorithms::shipped("gabriel").unwrap().source).unwrap();
    let out = braid(&["tarl", "check", good.to_str().unwrap(), bad_syntax.to_str().unwrap(), unknown_attr.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("syntax.tarl:2:"), "{err}");
    assert!(err.contains("attr.tarl:3:") && err.contains("colour"), "{err}");
    assert!(err.contains("2 of 3 rule files failed"), "{err}");
    assert!(text(&out.stdout).contains("gabriel.tarl: ok"));
    let missing = braid(&["tarl", "check", "/nonexistent/x.tarl"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing.stderr).contains("no such file"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn show_prints_a_rule_that_parses_back_the_same() {
    let out = braid(&["tarl", "show", "ktc"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    let original = braid_tarl::parse(braid_tarl::algorithms::shipped("ktc").unwrap().source).unwrap();
    assert_eq!(braid_tarl::parse(&printed).expect("the printed rule parses"), original);
}

#[test]
fn list_names_every_shipped_rule_with_both_line_counts() {
    let out = braid(&["tarl", "list", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), braid_tarl::algorithms::SHIPPED.len());
    for (row, s) in rows.iter().zip(braid_tarl::algorithms::SHIPPED) {
        assert_eq!(row["name"], s.name);
        assert_eq!(row["loc"], s.loc());
        assert_eq!(row["thesis_loc"], s.thesis_loc);
    }
    let table = text(&braid(&["tarl", "list"]).stdout);
    assert!(table.contains("thesis LoC") && table.contains("low_delay_jump"), "{table}");
}

#[test]
fn sim_matches_the_checker_and_reports_as_json() {
    for rule in ["gabriel", "ktc", "yao", "low_delay_jump"] {
        let out = braid(&["tarl", "sim", "--rule", rule, "--nodes", "30", "--seed", "4", "--json"]);
        assert!(out.status.success(), "{rule}: {}{}", text(&out.stdout), text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["matches_checker"], true, "{rule}");
        assert_eq!(v["converged"], true, "{rule}");
        assert_eq!(v["nodes"], 30);
    }
    let table = text(&braid(&["tarl", "sim", "--rule", "gabriel", "--nodes", "20", "--seed", "1"]).stdout);
    assert!(table.contains("matches checker  yes"), "{table}");
    let bad = braid(&["tarl", "sim", "--rule", "lmst", "--nodes", "20"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(text(&bad.stderr).contains("not a shipped rule"));
}
