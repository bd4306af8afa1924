//! The chunk plan: how a manifest is cut into chunks, computed identically by sender and receiver
//! so that a chunk is named by where it starts (its first segment's file and offset).
//!
//! * A file of at least `bundle_threshold` bytes is cut along its data extents (holes are never
//!   sent) into chunks of at most `chunk_size` bytes: one segment each.
//! * Smaller non-empty files are *bundled*: consecutive ones (in manifest order) are packed into
//!   one chunk of at most `chunk_size` bytes, one whole-file segment each, so a tree of 100,000
//!   files of 4 KB moves in about 100 chunks of 4 MiB instead of 100,000 round trips.
//! * Empty files and files that are all hole have no chunk.
//!
//! A bundled file travels whole, holes as zeros: below the threshold a hole is at most a few
//! blocks, not worth a segment per extent.
//!
//! Each chunk has a content-independent *key*: BLAKE3 over its segments, each described by its
//! file's identity (path, size, mtime) and range. The resume journal records keys, so a chunk is
//! resumed only if the same range of the same unchanged file was finished; a source file that
//! changed (size or mtime) gets new keys and is sent again from scratch, while the other files of
//! the transfer still resume.

use std::collections::HashMap;

use thiserror::Error;

use crate::manifest::{validate_relative_path, EntryKind, Manifest, PathError};
use crate::protocol::{WireEntry, WireKind, MAX_CHUNK_SIZE};

/// Default bundling threshold: files below 64 KiB are bundled.
pub const DEFAULT_BUNDLE_THRESHOLD: u64 = 64 << 10;

/// A manifest or plan parameter that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PlanError {
    /// An entry's path is refused (see [`validate_relative_path`]).
    #[error("refused path: {0}")]
    Path(#[from] PathError),
    /// An entry whose parent directory is not listed before it.
    #[error("entry `{path}`: its parent directory is not in the manifest before it")]
    Orphan {
        /// The path.
        path: String,
    },
    /// Two entries with the same path.
    #[error("entry `{path}` appears twice")]
    Duplicate {
        /// The path.
        path: String,
    },
    /// A file's extents are out of order, overlapping or beyond its size.
    #[error("file `{path}`: extents must be increasing, non-overlapping, non-empty and within the size {size}")]
    Extents {
        /// The path.
        path: String,
        /// The file's size.
        size: u64,
    },
    /// A plan parameter out of range.
    #[error("`{field}` = {value}: must be {allowed}")]
    Parameter {
        /// The parameter.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The allowed range.
        allowed: &'static str,
    },
    /// A name the receiver uses for its own files (temporary files, the journal).
    #[error("entry `{path}`: names `.NAME.braid-part` and `.braid-journal-*` are reserved for the receiver")]
    Reserved {
        /// The path.
        path: String,
    },
    /// A symlink with an empty target.
    #[error("symlink `{path}`: target is empty")]
    EmptyTarget {
        /// The path.
        path: String,
    },
}

/// A byte range of one file within a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Manifest index of the file.
    pub file: u64,
    /// Offset in the file.
    pub offset: u64,
    /// Length.
    pub len: u64,
}

/// One planned chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedChunk {
    /// Its segments, in payload order.
    pub segments: Vec<Segment>,
    /// Payload length (sum of the segments).
    pub len: u64,
    /// Resume key (see the module comment).
    pub key: [u8; 32],
    /// Whether this is a bundle of small whole files.
    pub bundle: bool,
}

/// The chunk plan of a manifest.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Chunks in send order.
    pub chunks: Vec<PlannedChunk>,
    /// For each manifest entry, the chunks carrying its data (empty for non-files).
    pub file_chunks: Vec<Vec<usize>>,
    /// Identity of each entry (path, size, mtime), as used in keys.
    pub file_keys: Vec<[u8; 32]>,
    by_start: HashMap<(u64, u64), usize>,
    /// Bytes per chunk.
    pub chunk_size: u64,
    /// Bundling threshold.
    pub bundle_threshold: u64,
}

/// Converts a walked manifest to its wire form (sources dropped, link targets as bytes).
pub fn wire_entries(manifest: &Manifest) -> Vec<WireEntry> {
    use std::os::unix::ffi::OsStrExt;
    manifest
        .entries
        .iter()
        .map(|e| WireEntry {
            path: e.path.clone(),
            kind: match &e.kind {
                EntryKind::File { size, extents } => WireKind::File {
                    size: *size,
                    extents: extents.iter().map(|x| (x.offset, x.len)).collect(),
                },
                EntryKind::Dir => WireKind::Dir,
                EntryKind::Symlink { target } => WireKind::Symlink { target: target.as_os_str().as_bytes().to_vec() },
            },
            mode: e.mode,
            mtime_sec: e.mtime_sec,
            mtime_nsec: e.mtime_nsec,
        })
        .collect()
}

/// Checks what a receiver must check before touching the disk: every path validated, parents
/// listed before children, no duplicates, extents sane.
pub fn validate_entries(entries: &[WireEntry]) -> Result<(), PlanError> {
    let mut seen: HashMap<&str, bool> = HashMap::with_capacity(entries.len());
    for entry in entries {
        validate_relative_path(&entry.path)?;
        let name = entry.path.rsplit('/').next().unwrap_or(&entry.path);
        if (name.starts_with('.') && name.ends_with(".braid-part")) || name.starts_with(".braid-journal-") {
            return Err(PlanError::Reserved { path: entry.path.clone() });
        }
        if let Some((parent, _)) = entry.path.rsplit_once('/') {
            if seen.get(parent) != Some(&true) {
                return Err(PlanError::Orphan { path: entry.path.clone() });
            }
        }
        let is_dir = matches!(entry.kind, WireKind::Dir);
        if seen.insert(entry.path.as_str(), is_dir).is_some() {
            return Err(PlanError::Duplicate { path: entry.path.clone() });
        }
        match &entry.kind {
            WireKind::File { size, extents } => {
                let mut end = 0u64;
                for &(offset, len) in extents {
                    let stop = offset.checked_add(len);
                    if len == 0 || offset < end || stop.is_none_or(|s| s > *size) {
                        return Err(PlanError::Extents { path: entry.path.clone(), size: *size });
                    }
                    end = offset + len;
                }
            }
            WireKind::Symlink { target } if target.is_empty() => {
                return Err(PlanError::EmptyTarget { path: entry.path.clone() });
            }
            _ => {}
        }
    }
    Ok(())
}

/// The transfer id: BLAKE3 over the manifest and plan parameters.
pub fn transfer_id(entries: &[WireEntry], chunk_size: u64, bundle_threshold: u64) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"braid-transfer id v1");
    hasher.update(&chunk_size.to_le_bytes());
    hasher.update(&bundle_threshold.to_le_bytes());
    // Encoding to a Vec cannot fail for these plain types; an empty id part on failure would
    // only make the id less specific, never wrong for resume (keys carry the file identity).
    hasher.update(&postcard::to_allocvec(entries).unwrap_or_default());
    *hasher.finalize().as_bytes()
}

fn file_key(entry: &WireEntry) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"file v1");
    hasher.update(&(entry.path.len() as u64).to_le_bytes());
    hasher.update(entry.path.as_bytes());
    let size = match &entry.kind {
        WireKind::File { size, .. } => *size,
        _ => 0,
    };
    hasher.update(&size.to_le_bytes());
    hasher.update(&entry.mtime_sec.to_le_bytes());
    hasher.update(&entry.mtime_nsec.to_le_bytes());
    *hasher.finalize().as_bytes()
}

impl Plan {
    /// Plans `entries` with `chunk_size` (1..=[`MAX_CHUNK_SIZE`]) and `bundle_threshold`
    /// (0..=`chunk_size`; 0 disables bundling).
    pub fn new(entries: &[WireEntry], chunk_size: u64, bundle_threshold: u64) -> Result<Plan, PlanError> {
        if !(1..=MAX_CHUNK_SIZE).contains(&chunk_size) {
            return Err(PlanError::Parameter { field: "chunk_size", value: chunk_size, allowed: "1..=33554432 (32 MiB)" });
        }
        if bundle_threshold > chunk_size {
            return Err(PlanError::Parameter {
                field: "bundle_threshold",
                value: bundle_threshold,
                allowed: "at most the chunk size",
            });
        }
        let file_keys: Vec<[u8; 32]> = entries.iter().map(file_key).collect();
        let mut chunks: Vec<PlannedChunk> = Vec::new();
        let mut file_chunks = vec![Vec::new(); entries.len()];
        let mut bundle: Vec<Segment> = Vec::new();
        let mut bundle_len = 0u64;
        let flush = |bundle: &mut Vec<Segment>, len: &mut u64, chunks: &mut Vec<PlannedChunk>, file_chunks: &mut Vec<Vec<usize>>| {
            if bundle.is_empty() {
                return;
            }
            for s in bundle.iter() {
                file_chunks[s.file as usize].push(chunks.len());
            }
            chunks.push(PlannedChunk {
                key: chunk_key(&file_keys, bundle),
                segments: std::mem::take(bundle),
                len: std::mem::take(len),
                bundle: true,
            });
        };
        for (index, entry) in entries.iter().enumerate() {
            let WireKind::File { size, extents } = &entry.kind else { continue };
            let file = index as u64;
            if *size == 0 || extents.is_empty() {
                continue;
            }
            if *size < bundle_threshold {
                if bundle_len + size > chunk_size {
                    flush(&mut bundle, &mut bundle_len, &mut chunks, &mut file_chunks);
                }
                bundle.push(Segment { file, offset: 0, len: *size });
                bundle_len += size;
                continue;
            }
            for &(start, len) in extents {
                let mut offset = start;
                while offset < start + len {
                    let piece = (start + len - offset).min(chunk_size);
                    let segments = vec![Segment { file, offset, len: piece }];
                    file_chunks[index].push(chunks.len());
                    chunks.push(PlannedChunk { key: chunk_key(&file_keys, &segments), segments, len: piece, bundle: false });
                    offset += piece;
                }
            }
        }
        flush(&mut bundle, &mut bundle_len, &mut chunks, &mut file_chunks);
        let by_start = chunks
            .iter()
            .enumerate()
            .map(|(i, c)| ((c.segments[0].file, c.segments[0].offset), i))
            .collect();
        Ok(Plan { chunks, file_chunks, file_keys, by_start, chunk_size, bundle_threshold })
    }

    /// The chunk that starts at `(file, offset)`.
    pub fn find(&self, file: u64, offset: u64) -> Option<usize> {
        self.by_start.get(&(file, offset)).copied()
    }

    /// Total payload bytes.
    pub fn total_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.len).sum()
    }
}

fn chunk_key(file_keys: &[[u8; 32]], segments: &[Segment]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"chunk v1");
    for s in segments {
        hasher.update(&file_keys[s.file as usize]);
        hasher.update(&s.offset.to_le_bytes());
        hasher.update(&s.len.to_le_bytes());
    }
    *hasher.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn file(path: &str, size: u64, extents: Vec<(u64, u64)>) -> WireEntry {
        WireEntry { path: path.into(), kind: WireKind::File { size, extents }, mode: 0o644, mtime_sec: 1, mtime_nsec: 0 }
    }

    #[test]
    fn small_files_bundle_and_large_ones_split_along_extents() {
        let mut entries = vec![WireEntry { path: "d".into(), kind: WireKind::Dir, mode: 0o755, mtime_sec: 0, mtime_nsec: 0 }];
        for i in 0..10 {
            entries.push(file(&format!("d/s{i}"), 30, vec![(0, 30)]));
        }
        entries.push(file("d/empty", 0, vec![]));
        entries.push(file("d/big", 1000, vec![(0, 250), (700, 300)]));
        validate_entries(&entries).unwrap();
        let plan = Plan::new(&entries, 100, 50).unwrap();
        // 10 × 30 bytes in bundles of at most 100 bytes: 3 per bundle → 4 bundles.
        let bundles: Vec<_> = plan.chunks.iter().filter(|c| c.bundle).collect();
        assert_eq!(bundles.len(), 4);
        assert!(bundles.iter().all(|b| b.len <= 100));
        // The big file: 250 → 100+100+50, 300 → 100×3; the hole 250..700 is not sent.
        let big: Vec<_> = plan.file_chunks[12].iter().map(|&i| (plan.chunks[i].segments[0].offset, plan.chunks[i].len)).collect();
        assert_eq!(big, [(0, 100), (100, 100), (200, 50), (700, 100), (800, 100), (900, 100)]);
        assert!(plan.file_chunks[11].is_empty());
        assert_eq!(plan.total_bytes(), 300 + 550);
        for (i, c) in plan.chunks.iter().enumerate() {
            assert_eq!(plan.find(c.segments[0].file, c.segments[0].offset), Some(i));
        }
    }

    #[test]
    fn a_changed_file_changes_only_its_keys() {
        let a = vec![file("a", 200, vec![(0, 200)]), file("b", 200, vec![(0, 200)])];
        let mut b = a.clone();
        b[1].mtime_sec = 2;
        let (pa, pb) = (Plan::new(&a, 100, 0).unwrap(), Plan::new(&b, 100, 0).unwrap());
        assert_eq!(pa.chunks[0].key, pb.chunks[0].key);
        assert_ne!(pa.chunks[2].key, pb.chunks[2].key);
        assert_ne!(transfer_id(&a, 100, 0), transfer_id(&b, 100, 0));
    }

    #[test]
    fn receivers_refuse_bad_manifests() {
        let bad = [
            vec![file("../x", 1, vec![(0, 1)])],
            vec![file("/etc/x", 1, vec![(0, 1)])],
            vec![file("a/x", 1, vec![(0, 1)])],
            vec![file("x", 1, vec![(0, 1)]), file("x", 1, vec![(0, 1)])],
            vec![file("x", 1, vec![(0, 2)])],
            vec![file("x", 10, vec![(5, 2), (0, 2)])],
            vec![file("x", 1, vec![(u64::MAX, 2)])],
            vec![file(".x.braid-part", 1, vec![(0, 1)])],
            vec![file(".braid-journal-0123", 1, vec![(0, 1)])],
        ];
        for entries in bad {
            assert!(validate_entries(&entries).is_err(), "{entries:?}");
        }
        assert!(Plan::new(&[], 0, 0).is_err());
        assert!(Plan::new(&[], 10, 11).is_err());
    }

    proptest! {
        /// Every data byte is in exactly one chunk, chunks never exceed the chunk size.
        #[test]
        fn chunks_cover_every_extent_once(sizes in proptest::collection::vec(0u64..5000, 1..30), chunk in 1u64..2000, threshold in 0u64..500) {
            let threshold = threshold.min(chunk);
            let entries: Vec<_> = sizes.iter().enumerate().map(|(i, &s)| file(&format!("f{i}"), s, if s == 0 { vec![] } else { vec![(0, s)] })).collect();
            let plan = Plan::new(&entries, chunk, threshold).unwrap();
            prop_assert!(plan.chunks.iter().all(|c| c.len <= chunk && c.len > 0));
            for (i, &s) in sizes.iter().enumerate() {
                let covered: u64 = plan.chunks.iter().flat_map(|c| &c.segments).filter(|g| g.file == i as u64).map(|g| g.len).sum();
                prop_assert_eq!(covered, s);
            }
        }
    }
}
