//! The lab's figures as inline SVG. [`crate::figures`] draws a figure
//! from the store and writes it to a file (what the CLI's `--out` wants);
//! the web UI lets it write into a private scratch file and inlines the
//! text, so both show the very same figure. The scratch file's name is
//! the server's own (process id and a counter), never taken from a URL,
//! and it is removed at once.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::WebError;
use crate::figures::{FigureError, FigureSummary};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// Removes the scratch file however the drawing ended.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Run `draw` on a fresh scratch `.svg` path and return the SVG it wrote,
/// with what it drew.
pub(crate) fn svg(
    draw: impl FnOnce(&Path) -> Result<FigureSummary, FigureError>,
) -> Result<(String, FigureSummary), WebError> {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let scratch = Scratch(std::env::temp_dir().join(format!("braid-lab-web-{}-{n}.svg", std::process::id())));
    let summary = draw(&scratch.0)?;
    let text = std::fs::read_to_string(&scratch.0)
        .map_err(|e| WebError::Internal(format!("reading the figure back from {}: {e}", scratch.0.display())))?;
    Ok((strip_prolog(text), summary))
}

/// The `<svg ...>` element without an XML prolog, for inlining in HTML.
fn strip_prolog(text: String) -> String {
    match text.find("<svg") {
        Some(0) | None => text,
        Some(i) => text[i..].to_string(),
    }
}
