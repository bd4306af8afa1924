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
    let unknown_topology = dir.join("topo.tarl");
    std::fs::write(
        &unknown_topology,
        "filter(\n  match(TP, Ctrl, self <- e0 -> v),\n  e0.weight > 1)\nexecute every match:\n  at (self, TP, Overlay) remove_neighbor(v)\n",
    )
    .unwrap();
    let good = dir.join("gabriel.tarl");
    std::fs::write(&good, braid_tarl::algorithms::shipped("gabriel").unwrap().source).unwrap();
    let out = braid(&[
        "tarl",
        "check",
        good.to_str().unwrap(),
        bad_syntax.to_str().unwrap(),
        unknown_attr.to_str().unwrap(),
        unknown_topology.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("syntax.tarl:2:"), "{err}");
    assert!(err.contains("attr.tarl:3:") && err.contains("colour"), "{err}");
    // An action on a topology the provider does not have: named, with the ones it has.
    assert!(err.contains("topo.tarl:5:17: type error: unknown topology `Overlay`") && err.contains("Phys"), "{err}");
    assert!(err.contains("3 of 4 rule files failed"), "{err}");
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

#[test]
fn sim_over_many_graphs_summarises_and_names_mismatches() {
    let out = braid(&["tarl", "sim", "--rule", "ktc", "--nodes", "25", "--seed", "7", "--graphs", "5", "--json"]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["graphs"], 5);
    assert_eq!(v["matched"], 5);
    let results = v["results"].as_array().unwrap();
    let seeds: Vec<u64> = results.iter().map(|r| r["seed"].as_u64().unwrap()).collect();
    assert_eq!(seeds, [7, 8, 9, 10, 11]);
    assert!(results.iter().all(|r| r["matches_checker"] == true && r["links"].as_u64() < r["candidate_links"].as_u64()));
    // One round is too few for the low-delay jump on deep trees: the
    // unconverged graphs are counted and named, and the exit status says so.
    let out = braid(&["tarl", "sim", "--rule", "low_delay_jump", "--nodes", "40", "--graphs", "3", "--max-rounds", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    let table = text(&out.stdout);
    assert!(table.contains("match checker    0 of 3") && table.contains("mismatch         seed 1"), "{table}");
}

#[test]
fn bench_prints_evaluations_per_second_per_rule_and_view() {
    let out = braid(&["tarl", "bench", "--rule", "gabriel", "--rule", "low_delay_jump", "--views", "10,20", "--millis", "20", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let rows = v.as_array().unwrap();
    let got: Vec<(String, u64)> =
        rows.iter().map(|r| (r["rule"].as_str().unwrap().to_string(), r["view_nodes"].as_u64().unwrap())).collect();
    assert_eq!(got, [("gabriel".into(), 10), ("gabriel".into(), 20), ("low_delay_jump".into(), 10), ("low_delay_jump".into(), 20)]);
    assert!(rows.iter().all(|r| r["evals_per_sec"].as_f64().unwrap() > 0.0 && r["evaluations"].as_u64().unwrap() >= 3));
    let table = text(&braid(&["tarl", "bench", "--rule", "yao", "--views", "10", "--millis", "5"]).stdout);
    assert!(table.contains("evals/s") && table.contains("yao"), "{table}");
    let bad = braid(&["tarl", "bench", "--rule", "lmst"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(text(&bad.stderr).contains("not a shipped rule"));
    let bad = braid(&["tarl", "bench", "--views", "1"]);
    assert_ne!(bad.status.code(), Some(0));
}
