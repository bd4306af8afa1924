//! `braid progmp check`: exit status 0 for a valid scheduler, 1 with a
//! positioned error otherwise; every shipped scheduler checks clean.

use std::process::Command;

fn braid(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_braid")).args(args).output().expect("run braid")
}

#[test]
fn every_shipped_scheduler_checks_by_name() {
    for b in braid_progmp::BUILTINS {
        let out = braid(&["progmp", "check", b.name]);
        assert!(out.status.success(), "{}: {}", b.name, String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn a_file_with_an_error_fails_with_its_position() {
    let dir = std::env::temp_dir().join(format!("braid-progmp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.progmp");
    std::fs::write(&good, braid_progmp::builtin("round_robin").unwrap().source).unwrap();
    assert!(braid(&["progmp", "check", good.to_str().unwrap()]).status.success());

    let bad = dir.join("bad.progmp");
    std::fs::write(&bad, "SCHEDULER bad;\nVAR x = SUBFLOWS.FILTER(s => s.RTT > );\n").unwrap();
    let out = braid(&["progmp", "check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.progmp:2:"), "{err}");

    let missing = braid(&["progmp", "check", "/nonexistent/x.progmp"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no such file"));
    std::fs::remove_dir_all(&dir).unwrap();
}
