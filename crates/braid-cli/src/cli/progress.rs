//! Progress bars on stderr: drawn only when stderr is a terminal and the
//! output is not `--json` (indicatif hides them on non-terminals itself).

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A byte-counting bar of `total` bytes labelled `prefix`.
pub fn bytes_bar(total: u64, prefix: impl Into<String>, hidden: bool) -> ProgressBar {
    let target = if hidden { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
    let bar = ProgressBar::with_draw_target(Some(total), target);
    bar.set_style(bytes_style());
    bar.set_prefix(prefix.into());
    bar
}

/// A set of bars drawn together (one per concurrent transfer).
pub fn multi(hidden: bool) -> MultiProgress {
    let target = if hidden { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
    MultiProgress::with_draw_target(target)
}

/// The style of byte bars: prefix, bar, bytes, rate, ETA.
pub fn bytes_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{prefix:>12.bold} [{bar:30.cyan/blue}] {bytes:>10}/{total_bytes:<10} {binary_bytes_per_sec:>12} {eta:>4} {msg}",
    )
    .expect("static template is valid")
    .progress_chars("=> ")
}

/// A bar of a tree transfer: its length is set once the engine knows what is left to send, and
/// the message shows files and the read/net/write worker counts.
pub fn tree_bar(prefix: impl Into<String>, hidden: bool) -> ProgressBar {
    let target = if hidden { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
    let bar = ProgressBar::with_draw_target(None, target);
    bar.set_style(bytes_style());
    bar.set_prefix(prefix.into());
    bar
}

/// The bar message of a tree transfer: `files 3/10 · read/net/write 2/4/1`.
pub fn tree_message(files_done: u64, files_total: Option<u64>, workers: Option<(usize, usize, usize)>) -> String {
    let files = match files_total {
        Some(total) => format!("files {files_done}/{total}"),
        None => format!("files {files_done}"),
    };
    match workers {
        Some((r, n, w)) => format!("{files} · read/net/write {r}/{n}/{w}"),
        None => files,
    }
}
