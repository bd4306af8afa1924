//! The file tree a `transfer` experiment copies, made from the
//! experiment's seed, and the check that a copy of it is byte-identical.
//!
//! A tree is `files` regular files in directories of at most
//! [`FILES_PER_DIR`] (`d0000/`, `d0001/`, …), each file's size drawn
//! uniformly from `size_min..=size_max` and its content a pseudo-random
//! stream (incompressible, so no tool gains from compression, and
//! different per file, so no tool gains from deduplication). The same
//! seed gives the same tree.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use braid_core::mix64;

use crate::template::{ResultExt, TemplateError};

/// Files per directory: real trees spread files over directories, and a
/// directory of 100,000 entries is a test of the file system, not of the
/// transfer.
pub const FILES_PER_DIR: u64 = 1000;

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeShape {
    /// Number of regular files (at least 1).
    pub files: u64,
    /// Smallest file size, bytes.
    pub size_min: u64,
    /// Largest file size, bytes (≥ `size_min`).
    pub size_max: u64,
}

/// What was generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeStats {
    /// Regular files.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Write the tree of `shape` under `root` (created; must not exist yet).
pub fn generate(root: &Path, shape: TreeShape, seed: u64) -> Result<TreeStats, TemplateError> {
    std::fs::create_dir_all(root).map_err(|e| TemplateError::io(format!("creating {}", root.display()), e))?;
    let mut bytes = 0;
    let mut state = seed;
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..shape.files {
        let dir = root.join(format!("d{:04}", i / FILES_PER_DIR));
        if i % FILES_PER_DIR == 0 {
            std::fs::create_dir_all(&dir).map_err(|e| TemplateError::io(format!("creating {}", dir.display()), e))?;
        }
        let span = shape.size_max - shape.size_min;
        let size = shape.size_min + if span == 0 { 0 } else { draw(&mut state) % (span + 1) };
        let path = dir.join(format!("f{i:07}"));
        write_file(&path, size, draw(&mut state), &mut buf)?;
        bytes += size;
    }
    Ok(TreeStats { files: shape.files, bytes })
}

/// One step of SplitMix64 (the generator [`braid_core::splitmix64`]
/// draws one value of), carrying its state.
fn draw(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    mix64(*state)
}

fn write_file(path: &Path, size: u64, seed: u64, buf: &mut [u8]) -> Result<(), TemplateError> {
    let file = File::create(path).map_err(|e| TemplateError::io(format!("creating {}", path.display()), e))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut state = seed;
    let mut left = size;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        for word in buf[..n].chunks_mut(8) {
            let v = draw(&mut state).to_le_bytes();
            word.copy_from_slice(&v[..word.len()]);
        }
        out.write_all(&buf[..n]).map_err(|e| TemplateError::io(format!("writing {}", path.display()), e))?;
        left -= n as u64;
    }
    out.flush().map_err(|e| TemplateError::io(format!("writing {}", path.display()), e))
}

/// Every regular file under `root`: relative path → (size, BLAKE3 hash).
pub fn digest(root: &Path) -> Result<BTreeMap<PathBuf, (u64, blake3::Hash)>, TemplateError> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    let mut buf = vec![0u8; 1 << 20];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| TemplateError::io(format!("listing {}", dir.display()), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| TemplateError::io(format!("listing {}", dir.display()), e))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(|e| TemplateError::io(format!("reading {}", path.display()), e))?;
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let rel = path.strip_prefix(root).context("walking the tree")?.to_path_buf();
                out.insert(rel, hash_file(&path, &mut buf)?);
            }
        }
    }
    Ok(out)
}

fn hash_file(path: &Path, buf: &mut [u8]) -> Result<(u64, blake3::Hash), TemplateError> {
    let mut file = File::open(path).map_err(|e| TemplateError::io(format!("opening {}", path.display()), e))?;
    let mut hasher = blake3::Hasher::new();
    let mut size = 0u64;
    loop {
        let n = file.read(buf).map_err(|e| TemplateError::io(format!("reading {}", path.display()), e))?;
        if n == 0 {
            return Ok((size, hasher.finalize()));
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
}

/// `Ok` if the tree under `copy` holds exactly the files of `original`
/// (`digest(original)`), byte for byte; else what differs first.
pub fn verify(original: &BTreeMap<PathBuf, (u64, blake3::Hash)>, copy: &Path) -> Result<(), String> {
    let got = digest(copy).map_err(|e| e.to_string())?;
    if let Some((path, _)) = original.iter().find(|(p, _)| !got.contains_key(*p)) {
        let missing = original.keys().filter(|p| !got.contains_key(*p)).count();
        return Err(format!("{missing} of {} files missing in the copy, e.g. {}", original.len(), path.display()));
    }
    if let Some(path) = got.keys().find(|p| !original.contains_key(*p)) {
        return Err(format!("the copy has a file the source does not: {}", path.display()));
    }
    match original.iter().find(|(p, v)| got.get(*p) != Some(v)) {
        Some((path, (size, _))) => {
            let (got_size, _) = got[path];
            Err(format!("{} differs (source {size} bytes, copy {got_size} bytes)", path.display()))
        }
        None => Ok(()),
    }
}

/// What of `original` a copy interrupted part way holds: bytes and files
/// of the copy identical to their source (a partial or wrong file counts
/// nothing), so a rate from it never credits more than arrived intact.
pub fn copied(original: &BTreeMap<PathBuf, (u64, blake3::Hash)>, copy: &Path) -> Result<(u64, u64), TemplateError> {
    if !copy.exists() {
        return Ok((0, 0));
    }
    let got = digest(copy)?;
    Ok(original
        .iter()
        .filter(|(p, v)| got.get(*p) == Some(*v))
        .fold((0, 0), |(bytes, files), (_, (size, _))| (bytes + size, files + 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("braid-lab-tree-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_tree_is_made_from_its_seed_and_a_copy_verifies() {
        let root = scratch("seeded");
        let shape = TreeShape { files: 1203, size_min: 0, size_max: 3000 };
        let stats = generate(&root.join("a"), shape, 7).unwrap();
        assert_eq!(stats.files, 1203);
        generate(&root.join("b"), shape, 7).unwrap();
        let a = digest(&root.join("a")).unwrap();
        assert_eq!(a.len(), 1203);
        assert_eq!(a.values().map(|v| v.0).sum::<u64>(), stats.bytes);
        assert!(a.keys().any(|p| p.starts_with("d0001")), "files are spread over directories");
        verify(&a, &root.join("b")).unwrap();
        // Another seed: other contents.
        generate(&root.join("c"), shape, 8).unwrap();
        assert!(verify(&a, &root.join("c")).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn verify_names_what_differs() {
        let root = scratch("differs");
        let shape = TreeShape { files: 3, size_min: 10, size_max: 10 };
        generate(&root.join("a"), shape, 1).unwrap();
        generate(&root.join("b"), shape, 1).unwrap();
        let a = digest(&root.join("a")).unwrap();
        std::fs::write(root.join("b/d0000/f0000001"), b"0123456789").unwrap();
        assert!(verify(&a, &root.join("b")).unwrap_err().contains("d0000/f0000001 differs"));
        std::fs::remove_file(root.join("b/d0000/f0000001")).unwrap();
        assert!(verify(&a, &root.join("b")).unwrap_err().contains("1 of 3 files missing"));
        assert_eq!(copied(&a, &root.join("b")).unwrap(), (20, 2), "the two intact files count, the missing one does not");
        std::fs::write(root.join("b/d0000/f0000000"), b"01234").unwrap();
        assert_eq!(copied(&a, &root.join("b")).unwrap(), (10, 1), "a partial file counts nothing");
        assert_eq!(copied(&a, &root.join("nowhere")).unwrap(), (0, 0));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
