//! Records the git commit the lab was built at (`BRAID_GIT_COMMIT`), so
//! every stored experiment says which code produced it.
//!
//! `git rev-parse --short=12 HEAD` when git and the repository are there,
//! else `unknown` (a build from a source tarball); a `BRAID_GIT_COMMIT` set
//! in the build environment wins (packagers who know the commit). The
//! script reruns when HEAD moves: on `.git/HEAD`, the branch ref it points
//! to and `packed-refs`.
//!
//! No `-dirty` suffix: edits to the working tree do not rerun a build
//! script (only the files named below do), so the suffix would go stale in
//! both directions and claim what it cannot know.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=BRAID_GIT_COMMIT");
    let commit = match std::env::var("BRAID_GIT_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => git_commit().unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env=BRAID_GIT_COMMIT={commit}");
}

/// The short commit, and rerun-if-changed lines for what moves it.
fn git_commit() -> Option<String> {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let git_dir = git(&manifest, &["rev-parse", "--absolute-git-dir"]).map(PathBuf::from)?;
    watch(&git_dir.join("HEAD"));
    watch(&git_dir.join("packed-refs"));
    // On a branch, HEAD names a ref whose file changes on every commit; a
    // detached HEAD holds the commit itself.
    if let Ok(head) = std::fs::read_to_string(git_dir.join("HEAD")) {
        if let Some(reference) = head.trim().strip_prefix("ref: ") {
            watch(&git_dir.join(reference));
            // A linked worktree keeps its HEAD apart but branch refs in the
            // common directory.
            if let Some(common) = git(&manifest, &["rev-parse", "--git-common-dir"]) {
                let common =
                    if Path::new(&common).is_absolute() { PathBuf::from(common) } else { manifest.join(common) };
                watch(&common.join(reference));
                watch(&common.join("packed-refs"));
            }
        }
    }
    git(&manifest, &["rev-parse", "--short=12", "HEAD"])
}

fn watch(path: &Path) {
    // A path that does not exist would rerun the script on every build.
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).current_dir(dir).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}
