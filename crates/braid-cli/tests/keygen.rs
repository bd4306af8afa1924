//! `braid keygen` end to end: runs the binary with BRAID_HOME in a temporary
//! folder and checks the key file it leaves (mode 0600, refusal to
//! overwrite, --show, refusal of a group-readable key).

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output};

use braid_identity::{Identity, PublicKey};

fn keygen(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_braid"))
        .arg("keygen")
        .args(args)
        .env("BRAID_HOME", home)
        .env_remove("RUST_LOG")
        .output()
        .expect("run braid keygen")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The key printed after `public key:`.
fn printed_key(output: &Output) -> PublicKey {
    let stdout = text(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("public key:"))
        .unwrap_or_else(|| panic!("no public key line in {stdout:?}"));
    line.trim().parse().expect("printed key parses")
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn creates_a_0600_key_file_and_shows_the_same_key() {
    let home = tempfile::tempdir().unwrap();
    let created = keygen(home.path(), &[]);
    assert!(created.status.success(), "{}", text(&created.stderr));
    let path = home.path().join("identity");
    assert_eq!(mode(&path), 0o600);
    let key = printed_key(&created);
    assert_eq!(Identity::load(&path).unwrap().public_key(), key);
    assert!(text(&created.stdout).contains(&key.fingerprint().to_string()));

    let shown = keygen(home.path(), &["--show"]);
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    assert_eq!(printed_key(&shown), key);

    let json = keygen(home.path(), &["--show", "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["public_key"], key.to_string());
    assert_eq!(value["node_id"], key.node_id().get());
    assert_eq!(value["created"], false);
}

#[test]
fn refuses_to_overwrite_without_force() {
    let home = tempfile::tempdir().unwrap();
    let first = printed_key(&keygen(home.path(), &[]));
    let again = keygen(home.path(), &[]);
    assert_eq!(again.status.code(), Some(1));
    let stderr = text(&again.stderr);
    assert!(
        stderr.contains("already exists") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(printed_key(&keygen(home.path(), &["--show"])), first);

    let forced = keygen(home.path(), &["--force"]);
    assert!(forced.status.success(), "{}", text(&forced.stderr));
    let second = printed_key(&forced);
    assert_ne!(second, first);
    assert_eq!(printed_key(&keygen(home.path(), &["--show"])), second);
    assert_eq!(mode(&home.path().join("identity")), 0o600);
}

#[test]
fn explicit_identity_path_and_missing_file() {
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join("keys").join("node-a");
    let path_text = path.to_str().unwrap();
    let shown = keygen(home.path(), &["--show", "--identity", path_text]);
    assert_eq!(shown.status.code(), Some(1));
    assert!(
        text(&shown.stderr).contains("braid keygen"),
        "{}",
        text(&shown.stderr)
    );
    let created = keygen(
        home.path(),
        &["--identity", path_text, "--comment", "node a"],
    );
    assert!(created.status.success(), "{}", text(&created.stderr));
    assert_eq!(mode(&path), 0o600);
    assert!(!home.path().join("identity").exists());
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .contains("comment: node a"));
}

#[test]
fn group_readable_key_file_is_refused_with_a_clear_message() {
    let home = tempfile::tempdir().unwrap();
    assert!(keygen(home.path(), &[]).status.success());
    let path = home.path().join("identity");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let shown = keygen(home.path(), &["--show"]);
    assert_eq!(shown.status.code(), Some(1));
    let stderr = text(&shown.stderr);
    assert!(stderr.contains(&path.display().to_string()), "{stderr}");
    assert!(
        stderr.contains("0640") && stderr.contains("chmod 600"),
        "{stderr}"
    );
    assert!(shown.stdout.is_empty());
}
