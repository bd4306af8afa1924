//! The receiver's resume journal: an append-only log of finished chunks and files, kept in the
//! destination directory so that after either side is killed the same command resumes and only
//! missing chunks are sent (issue 18, item 6).
//!
//! A record is appended only after the chunk's data was verified, written and `fsync`ed, so a
//! journaled chunk is on disk. Records carry their length and a checksum (8 bytes of BLAKE3);
//! reading stops at the first record that is torn (a crash mid-append) or corrupt, and the file is
//! truncated there before new records are appended.
//!
//! Records name chunks and files by their plan *keys* (see `plan`): a chunk is resumed only for
//! the same range of the same unchanged source file. The journal's name is derived from the
//! transfer's top-level names (not the whole manifest), so a transfer whose sources changed
//! still finds the journal and resumes the unchanged files. It is removed when the transfer
//! completes.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"BRDJRNL1";
const KIND_CHUNK: u8 = 1;
const KIND_FILE: u8 = 2;

/// The journal file of a transfer whose top-level entries are `roots`, in `dest`.
pub fn journal_path(dest: &Path, roots: &[&str]) -> PathBuf {
    let mut sorted: Vec<&str> = roots.to_vec();
    sorted.sort_unstable();
    let mut hasher = blake3::Hasher::new();
    for r in sorted {
        hasher.update(&(r.len() as u64).to_le_bytes());
        hasher.update(r.as_bytes());
    }
    let hex = hasher.finalize().to_hex();
    dest.join(format!(".braid-journal-{}", &hex.as_str()[..24]))
}

/// An open journal.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    chunks: HashMap<[u8; 32], [u8; 32]>,
    files: HashSet<[u8; 32]>,
    sync: bool,
}

fn checksum(body: &[u8]) -> [u8; 8] {
    let hash = blake3::hash(body);
    let mut out = [0u8; 8];
    out.copy_from_slice(&hash.as_bytes()[..8]);
    out
}

impl Journal {
    /// Opens (or creates) the journal at `path`, reading every intact record. `sync` makes each
    /// append durable (`fdatasync`) before it returns.
    pub fn open(path: &Path, sync: bool) -> io::Result<Journal> {
        let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let mut journal = Journal { path: path.to_path_buf(), file, chunks: HashMap::new(), files: HashSet::new(), sync };
        let good = if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
            // New, or not a journal we can read: start over.
            journal.file.set_len(0)?;
            journal.file.seek(SeekFrom::Start(0))?;
            journal.file.write_all(MAGIC)?;
            MAGIC.len()
        } else {
            journal.parse(&bytes)
        };
        journal.file.set_len(good as u64)?;
        journal.file.seek(SeekFrom::End(0))?;
        if sync {
            journal.file.sync_data()?;
        }
        Ok(journal)
    }

    /// Reads records after the magic; returns the end of the last intact one.
    fn parse(&mut self, bytes: &[u8]) -> usize {
        let mut at = MAGIC.len();
        loop {
            let Some(head) = bytes.get(at..at + 4) else { return at };
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            let Some(body) = bytes.get(at + 4..at + 4 + len) else { return at };
            let Some(sum) = bytes.get(at + 4 + len..at + 12 + len) else { return at };
            if checksum(body) != sum {
                return at;
            }
            match (body.first(), body.len()) {
                (Some(&KIND_CHUNK), 65) => {
                    let mut key = [0u8; 32];
                    let mut hash = [0u8; 32];
                    key.copy_from_slice(&body[1..33]);
                    hash.copy_from_slice(&body[33..65]);
                    self.chunks.insert(key, hash);
                }
                (Some(&KIND_FILE), 33) => {
                    let mut key = [0u8; 32];
                    key.copy_from_slice(&body[1..33]);
                    self.files.insert(key);
                }
                _ => return at,
            }
            at += 12 + len;
        }
    }

    fn append(&mut self, body: &[u8]) -> io::Result<()> {
        self.append_all(&[body])
    }

    /// Appends every record with one write and (when syncing) one `fdatasync`: a record that
    /// is torn by a crash fails its checksum and ends the journal there, so a batch is as safe
    /// as its records one by one.
    fn append_all(&mut self, bodies: &[&[u8]]) -> io::Result<()> {
        let mut records = Vec::with_capacity(bodies.iter().map(|b| b.len() + 12).sum());
        for body in bodies {
            records.extend_from_slice(&(body.len() as u32).to_le_bytes());
            records.extend_from_slice(body);
            records.extend_from_slice(&checksum(body));
        }
        self.file.write_all(&records)?;
        if self.sync {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Records a finished bundle: its chunk (data durable) and every file in it (verified and
    /// renamed), in one append.
    pub fn bundle_done(&mut self, key: [u8; 32], hash: [u8; 32], files: &[[u8; 32]]) -> io::Result<()> {
        let mut chunk = [0u8; 65];
        chunk[0] = KIND_CHUNK;
        chunk[1..33].copy_from_slice(&key);
        chunk[33..].copy_from_slice(&hash);
        let file_records: Vec<[u8; 33]> = files
            .iter()
            .map(|f| {
                let mut body = [0u8; 33];
                body[0] = KIND_FILE;
                body[1..].copy_from_slice(f);
                body
            })
            .collect();
        let mut bodies: Vec<&[u8]> = vec![&chunk];
        bodies.extend(file_records.iter().map(|b| &b[..]));
        self.append_all(&bodies)?;
        self.chunks.insert(key, hash);
        self.files.extend(files.iter().copied());
        Ok(())
    }

    /// Records a finished chunk (its data is already durable) and its payload hash.
    pub fn chunk_done(&mut self, key: [u8; 32], hash: [u8; 32]) -> io::Result<()> {
        let mut body = [0u8; 65];
        body[0] = KIND_CHUNK;
        body[1..33].copy_from_slice(&key);
        body[33..].copy_from_slice(&hash);
        self.append(&body)?;
        self.chunks.insert(key, hash);
        Ok(())
    }

    /// Records a finished (verified and renamed) file.
    pub fn file_done(&mut self, key: [u8; 32]) -> io::Result<()> {
        let mut body = [0u8; 33];
        body[0] = KIND_FILE;
        body[1..].copy_from_slice(&key);
        self.append(&body)?;
        self.files.insert(key);
        Ok(())
    }

    /// The recorded hash of a finished chunk.
    pub fn chunk(&self, key: &[u8; 32]) -> Option<[u8; 32]> {
        self.chunks.get(key).copied()
    }

    /// Whether a file was finished.
    pub fn has_file(&self, key: &[u8; 32]) -> bool {
        self.files.contains(key)
    }

    /// Finished chunks recorded.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// Deletes the journal (the transfer is complete).
    pub fn remove(self) -> io::Result<()> {
        let path = self.path.clone();
        drop(self);
        std::fs::remove_file(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_bundle_is_one_append_whose_torn_tail_keeps_the_records_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut j = Journal::open(&path, true).unwrap();
        j.bundle_done([1; 32], [2; 32], &[[3; 32], [4; 32], [5; 32]]).unwrap();
        assert!(j.has_file(&[4; 32]));
        drop(j);
        let j = Journal::open(&path, false).unwrap();
        assert_eq!(j.chunk(&[1; 32]), Some([2; 32]));
        assert!([[3; 32], [4; 32], [5; 32]].iter().all(|f| j.has_file(f)));
        drop(j);
        // A crash inside the append: the records written whole survive, the torn one does not.
        let len = std::fs::metadata(&path).unwrap().len();
        OpenOptions::new().write(true).open(&path).unwrap().set_len(len - 3).unwrap();
        let j = Journal::open(&path, false).unwrap();
        assert_eq!(j.chunk(&[1; 32]), Some([2; 32]));
        assert!(j.has_file(&[4; 32]) && !j.has_file(&[5; 32]));
    }

    #[test]
    fn records_survive_reopen_and_a_torn_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = journal_path(dir.path(), &["a", "b"]);
        assert_eq!(path, journal_path(dir.path(), &["b", "a"]));
        let mut j = Journal::open(&path, true).unwrap();
        j.chunk_done([1; 32], [2; 32]).unwrap();
        j.file_done([3; 32]).unwrap();
        j.chunk_done([4; 32], [5; 32]).unwrap();
        drop(j);
        // Tear the last record.
        let len = std::fs::metadata(&path).unwrap().len();
        OpenOptions::new().write(true).open(&path).unwrap().set_len(len - 3).unwrap();
        let mut j = Journal::open(&path, false).unwrap();
        assert_eq!(j.chunk(&[1; 32]), Some([2; 32]));
        assert!(j.has_file(&[3; 32]));
        assert_eq!(j.chunk(&[4; 32]), None);
        // Appends after the truncated tail are readable.
        j.chunk_done([6; 32], [7; 32]).unwrap();
        drop(j);
        let j = Journal::open(&path, false).unwrap();
        assert_eq!(j.chunk_count(), 2);
        assert_eq!(j.chunk(&[6; 32]), Some([7; 32]));
        j.remove().unwrap();
        assert!(!path.exists());
    }

    proptest! {
        /// Any corruption of the bytes after the magic loses at most the records from the
        /// corrupted one on, and never yields a record that was not written.
        #[test]
        fn corruption_never_invents_records(n in 1usize..20, at in any::<prop::sample::Index>(), value in any::<u8>()) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("j");
            let mut j = Journal::open(&path, false).unwrap();
            for i in 0..n {
                j.chunk_done([i as u8; 32], [i as u8 ^ 0xff; 32]).unwrap();
            }
            drop(j);
            let mut bytes = std::fs::read(&path).unwrap();
            let i = MAGIC.len() + at.index(bytes.len() - MAGIC.len());
            bytes[i] ^= value | 1;
            std::fs::write(&path, &bytes).unwrap();
            let j = Journal::open(&path, false).unwrap();
            prop_assert!(j.chunk_count() < n);
            for (key, hash) in &j.chunks {
                prop_assert_eq!(key[0] ^ 0xff, hash[0]);
            }
        }
    }
}
