//! Bad flags, specs and paths: a non-zero exit and a message naming the
//! flag or field and the allowed form.

mod cli_support;

use std::time::Duration;

use cli_support::run;

const LIMIT: Duration = Duration::from_secs(30);

fn fails_with(args: &[&str], needles: &[&str]) {
    let out = run(args, LIMIT);
    assert!(!out.success(), "braid {args:?} should fail: {out:?}");
    for n in needles {
        assert!(out.stderr.contains(n), "braid {args:?}: stderr lacks `{n}`:\n{}", out.stderr);
    }
}

#[test]
fn bad_sizes_name_the_flag_and_the_form() {
    fails_with(&["send", "--to", "127.0.0.1:9", "--bytes", "12parsecs"], &["--bytes", "expected a whole number of bytes", "GiB"]);
    fails_with(&["demo", "--bytes=-3"], &["--bytes", "expected a whole number of bytes"]);
    fails_with(&["bench", "stream", "--bytes", "1.5.3MB"], &["--bytes"]);
}

#[test]
fn bad_link_specs_name_the_field() {
    fails_with(&["sim", "transfer", "--link", "rtt=abc", "--bytes", "1MB"], &["--link", "rtt"]);
    fails_with(&["sim", "transfer", "--link", "speed=10mbit", "--bytes", "1MB"], &["--link", "speed", "known keys"]);
    fails_with(&["sim", "transfer", "--link", "rtt=10ms,loss=150%", "--bytes", "1MB"], &["--link", "loss"]);
}

#[test]
fn bad_choices_and_addresses() {
    fails_with(&["bench", "stream", "--cc", "vegas"], &["--cc", "newreno", "cubic", "bbr"]);
    fails_with(&["send", "--to", "localhost", "--bytes", "1"], &["--to"]);
    fails_with(&["serve", "--listen", "127.0.0.1:0", "--mtu", "100"], &["--mtu", "1200"]);
    fails_with(&["send", "--to", "127.0.0.1:9"], &["FILE", "--bytes"]);
    fails_with(&["sim", "transfer", "--link", "rtt=10ms", "--bytes", "1MB", "--flows", "0"], &["--flows"]);
    fails_with(&["bench", "stream", "--timeout", "soon"], &["--timeout", "seconds"]);
}

#[test]
fn bad_paths_are_reported() {
    fails_with(&["serve", "--listen", "127.0.0.1:0", "--out", "/nonexistent/braid/dir"], &["--out", "not an existing directory"]);
    fails_with(&["send", "--to", "127.0.0.1:9", "/nonexistent/braid/file"], &["/nonexistent/braid/file"]);
}

#[test]
fn help_lists_the_commands() {
    let out = run(&["--help"], LIMIT);
    assert!(out.success());
    for cmd in ["serve", "send", "sim", "bench", "demo"] {
        assert!(out.stdout.contains(cmd), "{}", out.stdout);
    }
}
