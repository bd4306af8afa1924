//! The lab on the emulator (needs root): two emulator experiments run in
//! parallel, each on its own testbed, without colliding, and leave no
//! namespace, device, state file or process behind.

mod cli_support;
mod emu_support;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use cli_support::run;
use serde_json::Value as Json;

/// The emulator's namespaces that exist now.
fn namespaces() -> BTreeSet<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(braid_emu::NETNS_PREFIX))
        .map(str::to_string)
        .collect()
}

/// The emulator's state files (one per live testbed).
fn state_files() -> BTreeSet<String> {
    std::fs::read_dir(braid_emu::state::STATE_DIR)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

#[test]
fn two_emulator_experiments_run_in_parallel_and_leave_nothing_behind() {
    if !emu_support::ready(&["ip", "python3"]) {
        return;
    }
    let _serial = emu_support::serial();
    let dir = std::env::temp_dir().join(format!("braid-emu-lab-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let study = dir.join("parallel.toml");
    // Two experiments (Braid and kernel TCP), not exclusive, two jobs: they
    // overlap, each with its own testbed.
    std::fs::write(
        &study,
        "name = \"parallel\"\ntemplate = \"stream\"\nexclusive = false\ntimeout = \"90s\"\n\
         [configuration]\npeer = [\"braid\", \"tcp\"]\nbytes = [\"8MiB\"]\n\
         [environment]\nlink = [\"rtt=20ms,rate=50mbit\"]\n",
    )
    .unwrap();
    let db = dir.join("lab.db");
    let (ns_before, state_before) = (namespaces(), state_files());

    let out = run(
        &["lab", "run", study.to_str().unwrap(), "--db", db.to_str().unwrap(), "--jobs", "2", "--json"],
        Duration::from_secs(240),
    );
    assert!(out.success(), "{out:?}");
    let summary: Json = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["ok"], 2, "{summary}\nstderr: {}", out.stderr);

    // They ran at the same time: their [started, ended] intervals overlap.
    let py = Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); \
             print('\\n'.join('%f %f' % r for r in c.execute('SELECT started, ended FROM experiments')))",
            db.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let spans: Vec<(f64, f64)> = String::from_utf8_lossy(&py.stdout)
        .lines()
        .map(|l| {
            let mut it = l.split_whitespace().map(|x| x.parse::<f64>().unwrap());
            (it.next().unwrap(), it.next().unwrap())
        })
        .collect();
    assert_eq!(spans.len(), 2, "{py:?}");
    let overlap = spans[0].1.min(spans[1].1) - spans[0].0.max(spans[1].0);
    assert!(overlap > 0.0, "the two experiments did not overlap: {spans:?}");

    // Nothing left: namespaces, state files, processes of the testbeds.
    assert_eq!(namespaces(), ns_before, "namespaces left behind");
    assert_eq!(state_files(), state_before, "testbed state files left behind");
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(!ps.lines().any(|l| l.contains("lab worker") && l.contains(dir.to_str().unwrap())), "a worker is left:\n{ps}");
    let _ = std::fs::remove_dir_all(&dir);
}
