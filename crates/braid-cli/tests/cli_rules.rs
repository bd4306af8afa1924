//! `braid rules`: show (the normal form), check (errors with
//! file:line:col, non-zero exit), eval's refusals, and, as root, a tiny
//! learning campaign over the emulator (CI=true fails without root,
//! otherwise it is skipped with a message).

mod emu_support;

use std::path::{Path, PathBuf};
use std::process::Command;

fn braid(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_braid")).args(args).output().expect("run braid")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("braid-rules-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn show_prints_the_normal_form_so_equivalent_rules_print_the_same() {
    let dir = scratch("show");
    let a = write(&dir, "a.eca", "on first match\n  5 < count(sent, 1s): set transport = tcp;\n  true: set transport = braid;\n");
    let b = write(&dir, "b.eca", "on first match\n  count(sent, 1s) > 3 + 2: set transport = tcp;\n  true: set transport = braid;\n");
    let (oa, ob) = (braid(&["rules", "show", &a]), braid(&["rules", "show", &b]));
    assert!(oa.status.success(), "{}", text(&oa.stderr));
    assert_eq!(text(&oa.stdout), text(&ob.stdout));
    // The printed normal form parses back to itself.
    let printed = text(&oa.stdout);
    let again = write(&dir, "c.eca", &printed);
    assert_eq!(text(&braid(&["rules", "show", &again]).stdout), printed);
    let bad = write(&dir, "bad.eca", "on first match\n  avg(rtt, 1s) > : set transport = tcp;\n");
    let out = braid(&["rules", "show", &bad]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("bad.eca:2:"), "{}", text(&out.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_reports_each_error_with_its_position_and_fails() {
    let dir = scratch("check");
    let good = write(&dir, "good.eca", "on first match\n  avg(loss, 2s) > 2% and avg(rtt, 1s) > 50ms: set transport = tcp;\n  true: set transport = braid;\n");
    let unit = write(&dir, "unit.eca", "on first match\n  avg(rtt, 2s) > 5%: set transport = tcp;\n");
    let metric = write(&dir, "metric.eca", "on first match\n  avg(rttt, 2s) > 5ms: set transport = tcp;\n");
    let transport = write(&dir, "transport.eca", "on every match\n  true: set transport = quic;\n");
    let out = braid(&["rules", "check", &good]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("good.eca: ok (2 rules"), "{}", text(&out.stdout));
    let out = braid(&["rules", "check", &good, &unit, &metric, &transport]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("unit.eca:2:"), "{err}");
    assert!(err.contains("metric.eca:2:") && err.contains("rttt") && err.contains("rtt"), "{err}");
    assert!(err.contains("transport.eca:2:") && err.contains("quic"), "{err}");
    assert!(err.contains("3 of 4 rule files failed"), "{err}");
    // A scenario's vocabulary offers only its target.
    let out = braid(&["rules", "check", "--vocabulary", "priority", &good]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("transport"), "{}", text(&out.stderr));
    let out = braid(&["rules", "check", "/nonexistent/x.eca"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot read"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn eval_refuses_bad_input_before_running_anything() {
    let dir = scratch("eval");
    let good = write(&dir, "good.eca", "on first match\n  true: set transport = tcp;\n");
    let out = braid(&["rules", "eval", &good, "--env", "rtt=fast"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--env `rtt=fast`"), "{}", text(&out.stderr));
    let out = braid(&["rules", "eval", &good, "--env", "rtt=10ms", "--scenario", "scheduler"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no multipath"), "{}", text(&out.stderr));
    let bad = write(&dir, "bad.eca", "on first match\n  true: set transport = quic;\n");
    let out = braid(&["rules", "eval", &bad, "--env", "rtt=10ms"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("bad.eca:2:"), "{}", text(&out.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn learn_refuses_a_bad_study_with_the_key() {
    let dir = scratch("study");
    let study = write(&dir, "s.toml", "name = \"s\"\nscenario = \"video\"\n[environments]\ntraining = [\"rtt=10ms\"]\n");
    let out = braid(&["rules", "learn", &study, "--db", dir.join("lab.db").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("`scenario` must be one of transport, priority"), "{}", text(&out.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The shipped learning studies parse, and `--plan` counts their
/// evaluations without running any (no root needed).
#[test]
fn the_shipped_learning_studies_plan() {
    let studies = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../studies");
    let mut seen = 0;
    for entry in std::fs::read_dir(&studies).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.starts_with("rules-") && name.ends_with(".toml")) {
            continue;
        }
        let out = braid(&["rules", "learn", "--plan", "--json", path.to_str().unwrap()]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(j["count"].as_u64().unwrap() > 0, "{name}: {j}");
        // Every evaluation is at least one stored experiment (more with
        // repetitions).
        assert!(j["experiments"].as_u64().unwrap() >= j["count"].as_u64().unwrap(), "{name}: {j}");
        seen += 1;
    }
    assert!(seen >= 2, "expected the shipped rules-*.toml studies in {}", studies.display());
}

/// As root: a tiny campaign (population 4, 2 generations, 2 training
/// environments, 1 s experiments) stores its batches as lab studies and
/// reports training and held-out utility for baselines, GP and random
/// search; the learned rule file checks.
#[test]
fn a_tiny_learning_campaign_runs_as_lab_studies() {
    if !emu_support::ready(&["ip"]) {
        return;
    }
    let _serial = emu_support::serial();
    let dir = scratch("learn");
    let study = write(
        &dir,
        "tiny.toml",
        r#"name = "rules-tiny"
scenario = "transport"
seed = 3
[experiment]
duration = "1s"
[environments]
training = ["rtt=10ms,rate=50mbit", "rtt=60ms,rate=10mbit,loss=3%"]
held_out = ["rtt=30ms,rate=20mbit,loss=1%"]
[learn]
population = 4
generations = 2
max_rules = 2
max_window = "1s"
plain = false
random = true
"#,
    );
    let db = dir.join("lab.db");
    let out_rules = dir.join("learned.eca");
    let out = braid(&["rules", "learn", &study, "--json", "--db", db.to_str().unwrap(), "--out", out_rules.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["baselines"].as_array().unwrap().len(), 3, "tcp, braid, exon");
    for run in [&report["gp"], &report["random"]] {
        let best = &run["best"];
        for k in ["training", "held_out"] {
            let u = best[k][0].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&u), "{k}: {u}");
        }
        assert!(run["evaluations"].as_u64().unwrap() <= 24, "budget (4 + 2 x 4) x 2");
        assert!(!run["studies"].as_array().unwrap().is_empty());
    }
    // Every batch is a lab study in the database.
    let studies = braid(&["lab", "status", "--json", "--db", db.to_str().unwrap()]);
    assert!(text(&studies.stdout).contains("rules-tiny.gp.b000"), "{}", text(&studies.stdout));
    let check = braid(&["rules", "check", "--vocabulary", "transport", out_rules.to_str().unwrap()]);
    assert!(check.status.success(), "{}", text(&check.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}
