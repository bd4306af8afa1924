//! The files an experiment leaves in its work directory, and the tail of
//! its stderr that the store keeps for a failed experiment.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The records file in a work directory (`BRAID_LAB_RECORDS` points at it).
pub const RECORDS_FILE: &str = "records.jsonl";
/// A worker's standard output.
pub const STDOUT_FILE: &str = "stdout.log";
/// A worker's standard error; a template that runs programs in process may
/// send theirs here too, and its tail is kept the same way.
pub const STDERR_FILE: &str = "stderr.log";
/// The worker's spec.
pub const SPEC_FILE: &str = "spec.json";

/// At most this many lines of stderr are kept.
pub const TAIL_LINES: usize = 40;
/// At most this many bytes of stderr are kept.
pub const TAIL_BYTES: usize = 4096;

/// The last [`TAIL_LINES`] lines and at most [`TAIL_BYTES`] bytes of the
/// file at `path` (empty if it does not exist). Only the end of the file is
/// read, so a worker that wrote gigabytes costs no more than one that wrote
/// a line.
pub fn tail_of_file(path: &Path) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    // One byte more than kept, so a cut line or character at the start can
    // be recognised and dropped.
    let start = len.saturating_sub(TAIL_BYTES as u64 + 1);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::with_capacity((len - start) as usize);
    if f.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    tail(&String::from_utf8_lossy(&bytes), start > 0)
}

/// The last [`TAIL_LINES`] lines of `text`, at most [`TAIL_BYTES`] bytes,
/// cut at a line (or, for one overlong line, a character) boundary.
/// `clipped` says `text` is itself the end of something longer.
pub fn tail(text: &str, clipped: bool) -> String {
    let text = text.trim_end_matches('\n');
    let mut start = 0;
    let mut lines = 0;
    for (i, _) in text.rmatch_indices('\n') {
        lines += 1;
        if lines == TAIL_LINES {
            start = i + 1;
            break;
        }
    }
    let mut kept = &text[start..];
    let mut cut = start > 0 || clipped;
    if kept.len() > TAIL_BYTES {
        let mut from = kept.len() - TAIL_BYTES;
        while !kept.is_char_boundary(from) {
            from += 1;
        }
        kept = &kept[from..];
        cut = true;
    }
    if cut && start == 0 {
        // The first line is a fragment: drop it unless it is all there is.
        if let Some(nl) = kept.find('\n') {
            kept = &kept[nl + 1..];
        }
    }
    kept.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn command_templates_use_the_same_files() {
        use crate::template::command;
        assert_eq!(RECORDS_FILE, command::RECORDS_FILE);
        assert_eq!(STDOUT_FILE, command::STDOUT_LOG);
        assert_eq!(STDERR_FILE, command::STDERR_LOG);
    }

    #[test]
    fn keeps_the_last_lines() {
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let t = tail(&text, false);
        assert_eq!(t.lines().count(), TAIL_LINES);
        assert!(t.starts_with("line 60\n") && t.ends_with("line 99"), "{t}");
    }

    #[test]
    fn short_text_is_kept_whole() {
        assert_eq!(tail("one\ntwo\n", false), "one\ntwo");
        assert_eq!(tail("", false), "");
    }

    #[test]
    fn a_file_is_read_from_its_end() {
        let dir = std::env::temp_dir().join(format!("braid-lab-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stderr.log");
        let text: String = (0..10_000).map(|i| format!("error number {i}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        let t = tail_of_file(&path);
        assert!(t.ends_with("error number 9999"), "{t}");
        assert!(t.lines().all(|l| l.starts_with("error number ")), "{t}");
        assert!(t.len() <= TAIL_BYTES);
        assert_eq!(tail_of_file(&dir.join("missing")), "");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest! {
        #[test]
        fn tail_is_bounded_and_a_suffix(text in "(\\PC{0,300}\n){0,80}", clipped: bool) {
            let t = tail(&text, clipped);
            prop_assert!(t.len() <= TAIL_BYTES);
            prop_assert!(t.lines().count() <= TAIL_LINES);
            prop_assert!(text.trim_end_matches('\n').ends_with(&t));
        }
    }
}
