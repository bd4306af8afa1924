//! The source manifest: what `braid send SRC...` will transfer.
//!
//! Each SRC (a file, a directory walked recursively, or a symlink) becomes entries with a relative
//! path rooted at the SRC's own name (as `rsync -a SRC DEST/` does without a trailing slash), its
//! kind (file, directory — empty ones included —, or symlink kept as a link with its target),
//! permission bits, modification time and, for regular files, the size and the data extents:
//! sparse files' holes are found with `lseek(SEEK_DATA / SEEK_HOLE)` so they are not sent, and a
//! file system without that support gives one extent covering the file. Files below a size
//! the caller gives (the sender's bundling threshold) are not probed: they travel whole in a
//! bundle whatever their holes (see `plan`), and probing costs an open, two seeks and a close per
//! file on a walk that runs before anything is sent (half the walk's system calls for a tree of
//! small files). Their readability is still checked on the walk (`faccessat`), so an unreadable
//! file is named before the transfer starts.
//!
//! Paths on the wire are `/`-separated UTF-8. [`validate_relative_path`] is what a receiver runs
//! on every path a sender offers: a malicious sender could offer `..` or an absolute path to
//! write outside the destination directory.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// A path that a receiver must refuse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PathError {
    /// Empty path or an empty component (`a//b`, trailing `/`).
    #[error("path `{0}` is empty or has an empty component: expected `name/name/...`")]
    Empty(String),
    /// Starts with `/`.
    #[error("path `{0}` is absolute: expected a path relative to the destination")]
    Absolute(String),
    /// Has a `..` or `.` component.
    #[error("path `{0}` has a `.` or `..` component: expected plain names only")]
    DotComponent(String),
    /// Contains a NUL byte.
    #[error("path {0:?} contains a NUL byte")]
    Nul(String),
}

/// Checks a relative path offered by a sender: `/`-separated plain names, no `..` or `.`, not
/// absolute, no NUL, no empty component.
///
/// ```
/// use braid_transfer::manifest::validate_relative_path;
/// assert!(validate_relative_path("photos/2024/a.jpg").is_ok());
/// assert!(validate_relative_path("../etc/passwd").is_err());
/// assert!(validate_relative_path("/etc/passwd").is_err());
/// ```
pub fn validate_relative_path(path: &str) -> Result<(), PathError> {
    if path.contains('\0') {
        return Err(PathError::Nul(path.to_string()));
    }
    if path.starts_with('/') {
        return Err(PathError::Absolute(path.to_string()));
    }
    for component in path.split('/') {
        match component {
            "" => return Err(PathError::Empty(path.to_string())),
            "." | ".." => return Err(PathError::DotComponent(path.to_string())),
            _ => {}
        }
    }
    Ok(())
}

/// A manifest that cannot be built; every variant names the path.
#[derive(Debug, Error)]
pub enum ManifestError {
    /// A source path does not exist.
    #[error("source `{path}` does not exist")]
    Missing {
        /// The path.
        path: PathBuf,
    },
    /// A file or directory could not be read (permissions, I/O error).
    #[error("cannot read `{path}`: {source}")]
    Unreadable {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A name that is not UTF-8 (paths travel as UTF-8).
    #[error("name of `{path}` is not UTF-8: rename it to send it")]
    NotUtf8 {
        /// The path.
        path: PathBuf,
    },
    /// A source whose name cannot root a relative path (`/`, `..`).
    #[error("source `{path}` has no file name to root its entries at: name a file or directory")]
    NoName {
        /// The path.
        path: PathBuf,
    },
    /// Two sources with the same name would land on the same destination path.
    #[error("sources `{first}` and `{second}` both map to `{relative}`")]
    Duplicate {
        /// The shared relative path.
        relative: String,
        /// The first source.
        first: PathBuf,
        /// The second source.
        second: PathBuf,
    },
    /// A produced relative path failed validation (a name containing an invalid form).
    #[error("source `{path}`: {source}")]
    InvalidPath {
        /// The path.
        path: PathBuf,
        /// The reason.
        source: PathError,
    },
}

/// A byte range of a file that holds data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// First byte.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file and its data extents (holes are the gaps between them).
    File {
        /// Size in bytes (holes included).
        size: u64,
        /// Data extents in increasing order.
        extents: Vec<Extent>,
    },
    /// A directory (listed even when empty).
    Dir,
    /// A symbolic link, kept as a link.
    Symlink {
        /// The link's target, as stored.
        target: PathBuf,
    },
}

/// One manifest entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `/`-separated relative path (validated).
    pub path: String,
    /// Where it was found.
    pub source: PathBuf,
    /// Kind and kind-specific data.
    pub kind: EntryKind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Modification time: seconds since the epoch.
    pub mtime_sec: i64,
    /// Modification time: nanoseconds.
    pub mtime_nsec: u32,
}

/// The entries of all sources, parents before children, and what was skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The entries.
    pub entries: Vec<Entry>,
    /// Special files (sockets, FIFOs, devices) left out, with their kind.
    pub skipped: Vec<(PathBuf, &'static str)>,
    /// Files below this size are not probed for holes (see the module comment).
    probe_from: u64,
}

impl Manifest {
    /// Walks `sources` (symlinks are not followed), finding the data extents of every file.
    pub fn build<P: AsRef<Path>>(sources: &[P]) -> Result<Manifest, ManifestError> {
        Manifest::build_probing(sources, 0)
    }

    /// [`Manifest::build`], finding the data extents only of files of at least `probe_from`
    /// bytes; a smaller non-empty file gets one extent over all of it.
    pub fn build_probing<P: AsRef<Path>>(sources: &[P], probe_from: u64) -> Result<Manifest, ManifestError> {
        let mut manifest = Manifest { probe_from, ..Manifest::default() };
        let mut roots: Vec<(String, PathBuf)> = Vec::new();
        for source in sources {
            let source = source.as_ref();
            let name = root_name(source)?;
            if let Some((_, first)) = roots.iter().find(|(r, _)| *r == name) {
                return Err(ManifestError::Duplicate {
                    relative: name,
                    first: first.clone(),
                    second: source.to_path_buf(),
                });
            }
            roots.push((name.clone(), source.to_path_buf()));
            let metadata = fs::symlink_metadata(source).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => ManifestError::Missing { path: source.to_path_buf() },
                _ => ManifestError::Unreadable { path: source.to_path_buf(), source: e },
            })?;
            manifest.walk(source, name, metadata)?;
        }
        Ok(manifest)
    }

    /// Total bytes of file data (holes excluded).
    pub fn data_bytes(&self) -> u64 {
        self.entries
            .iter()
            .map(|e| match &e.kind {
                EntryKind::File { extents, .. } => extents.iter().map(|x| x.len).sum(),
                _ => 0,
            })
            .sum()
    }

    fn walk(&mut self, path: &Path, relative: String, metadata: fs::Metadata) -> Result<(), ManifestError> {
        validate_relative_path(&relative)
            .map_err(|source| ManifestError::InvalidPath { path: path.to_path_buf(), source })?;
        let file_type = metadata.file_type();
        let unreadable = |source: io::Error| ManifestError::Unreadable { path: path.to_path_buf(), source };
        let kind = if file_type.is_dir() {
            EntryKind::Dir
        } else if file_type.is_file() {
            let size = metadata.len();
            let extents = if size < self.probe_from {
                use rustix::fs::{accessat, Access, AtFlags, CWD};
                // As `open` would decide: with the effective user and group.
                accessat(CWD, path, Access::READ_OK, AtFlags::EACCESS).map_err(|e| unreadable(e.into()))?;
                vec![Extent { offset: 0, len: size }]
            } else {
                let file = fs::File::open(path).map_err(unreadable)?;
                data_extents(&file, size).map_err(unreadable)?
            };
            // An empty file has no extent either way.
            let extents = if size == 0 { Vec::new() } else { extents };
            EntryKind::File { size, extents }
        } else if file_type.is_symlink() {
            EntryKind::Symlink { target: fs::read_link(path).map_err(unreadable)? }
        } else {
            self.skipped.push((path.to_path_buf(), special_kind(&metadata)));
            return Ok(());
        };
        self.entries.push(Entry {
            path: relative.clone(),
            source: path.to_path_buf(),
            kind,
            mode: metadata.permissions().mode() & 0o7777,
            mtime_sec: metadata.mtime(),
            mtime_nsec: u32::try_from(metadata.mtime_nsec()).unwrap_or(0),
        });
        if file_type.is_dir() {
            let mut children = Vec::new();
            for child in fs::read_dir(path).map_err(unreadable)? {
                let child = child.map_err(unreadable)?;
                children.push(child.path());
            }
            // Sorted, so a manifest (and a resumed transfer's order) is deterministic.
            children.sort();
            for child in children {
                let name = child
                    .file_name()
                    .and_then(|n| n.to_str())
                    .ok_or_else(|| ManifestError::NotUtf8 { path: child.clone() })?
                    .to_string();
                let metadata = fs::symlink_metadata(&child)
                    .map_err(|source| ManifestError::Unreadable { path: child.clone(), source })?;
                self.walk(&child, format!("{relative}/{name}"), metadata)?;
            }
        }
        Ok(())
    }
}

fn root_name(source: &Path) -> Result<String, ManifestError> {
    let name = source.file_name().ok_or_else(|| ManifestError::NoName { path: source.to_path_buf() })?;
    name.to_str().map(str::to_string).ok_or_else(|| ManifestError::NotUtf8 { path: source.to_path_buf() })
}

fn special_kind(metadata: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = metadata.file_type();
    if t.is_socket() {
        "socket"
    } else if t.is_fifo() {
        "fifo"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_char_device() {
        "character device"
    } else {
        "special file"
    }
}

/// The data extents of `file` (of length `size`) via `SEEK_DATA`/`SEEK_HOLE`; one extent over the
/// whole file when the file system does not support them.
pub fn data_extents(file: &fs::File, size: u64) -> io::Result<Vec<Extent>> {
    use rustix::fs::{seek, SeekFrom};
    if size == 0 {
        return Ok(Vec::new());
    }
    let whole = vec![Extent { offset: 0, len: size }];
    let mut extents = Vec::new();
    let mut offset = 0u64;
    while offset < size {
        let start = match seek(file, SeekFrom::Data(offset)) {
            Ok(start) => start,
            // ENXIO: no data after `offset` (the rest is a hole).
            Err(rustix::io::Errno::NXIO) => break,
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) => return Ok(whole),
            Err(e) => return Err(e.into()),
        };
        if start >= size {
            break;
        }
        let end = match seek(file, SeekFrom::Hole(start)) {
            Ok(end) => end.min(size),
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) => return Ok(whole),
            Err(e) => return Err(e.into()),
        };
        if end <= start {
            return Ok(whole);
        }
        extents.push(Extent { offset: start, len: end - start });
        offset = end;
    }
    Ok(extents)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, Write};
    use std::os::unix::fs::symlink;

    #[test]
    fn walks_nested_dirs_empty_dirs_symlinks_and_sparse_files() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("tree");
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::create_dir(root.join("empty")).unwrap();
        fs::write(root.join("a/b/small.txt"), b"hello").unwrap();
        fs::set_permissions(root.join("a/b/small.txt"), fs::Permissions::from_mode(0o640)).unwrap();
        symlink("a/b/small.txt", root.join("link")).unwrap();
        // Sparse: 64 MiB long, 4 KiB of data at 32 MiB.
        let mut sparse = fs::File::create(root.join("sparse.bin")).unwrap();
        sparse.set_len(64 << 20).unwrap();
        sparse.seek(io::SeekFrom::Start(32 << 20)).unwrap();
        sparse.write_all(&[7u8; 4096]).unwrap();
        sparse.sync_all().unwrap();

        let manifest = Manifest::build(&[&root]).unwrap();
        let paths: Vec<&str> = manifest.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["tree", "tree/a", "tree/a/b", "tree/a/b/small.txt", "tree/empty", "tree/link", "tree/sparse.bin"]);
        let by = |p: &str| manifest.entries.iter().find(|e| e.path == p).unwrap();
        assert_eq!(by("tree/empty").kind, EntryKind::Dir);
        assert_eq!(by("tree/link").kind, EntryKind::Symlink { target: PathBuf::from("a/b/small.txt") });
        let small = by("tree/a/b/small.txt");
        assert_eq!(small.mode, 0o640);
        assert_eq!(small.kind, EntryKind::File { size: 5, extents: vec![Extent { offset: 0, len: 5 }] });
        assert!(small.mtime_sec > 1_600_000_000);
        let EntryKind::File { size, extents } = &by("tree/sparse.bin").kind else { panic!("not a file") };
        assert_eq!(*size, 64 << 20);
        // The file system may round the extent to its block size, but the hole before and after
        // must be found (tmpfs and ext4 both support SEEK_DATA).
        assert_eq!(extents.len(), 1, "{extents:?}");
        assert!(extents[0].offset <= 32 << 20 && extents[0].offset + extents[0].len >= (32 << 20) + 4096);
        assert!(extents[0].len < 1 << 20, "{extents:?}");
        assert!(manifest.data_bytes() < 1 << 20);
    }

    #[test]
    fn single_file_source_roots_at_its_name() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("one.txt");
        fs::write(&file, b"x").unwrap();
        let manifest = Manifest::build(&[&file]).unwrap();
        assert_eq!(manifest.entries.len(), 1);
        assert_eq!(manifest.entries[0].path, "one.txt");
    }

    #[test]
    fn errors_name_the_path() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("nope");
        let err = Manifest::build(&[&missing]).unwrap_err();
        assert!(matches!(err, ManifestError::Missing { .. }));
        assert!(err.to_string().contains("nope"), "{err}");

        let secret = tmp.path().join("secret");
        fs::write(&secret, b"x").unwrap();
        fs::set_permissions(&secret, fs::Permissions::from_mode(0o000)).unwrap();
        // Root reads anything; the check only means something for other users.
        if fs::File::open(&secret).is_err() {
            let err = Manifest::build(&[&secret]).unwrap_err();
            assert!(matches!(err, ManifestError::Unreadable { .. }) && err.to_string().contains("secret"), "{err}");
        }

        let a = tmp.path().join("x/same");
        let b = tmp.path().join("y/same");
        fs::create_dir_all(&a).unwrap();
        fs::create_dir_all(&b).unwrap();
        let err = Manifest::build(&[&a, &b]).unwrap_err();
        assert!(matches!(err, ManifestError::Duplicate { .. }), "{err}");
        assert!(matches!(Manifest::build(&[Path::new("/")]).unwrap_err(), ManifestError::NoName { .. }));
    }

    #[test]
    fn receiver_refuses_escaping_paths() {
        for bad in ["..", "../x", "a/../../x", "/etc/passwd", "/", "", "a//b", "a/", "./a", "a/.", "a\0b"] {
            assert!(validate_relative_path(bad).is_err(), "{bad:?} accepted");
        }
        for ok in ["a", "a/b/c", "..a", "a..", ".hidden", "a b/ç"] {
            assert!(validate_relative_path(ok).is_ok(), "{ok:?} refused");
        }
        let err = validate_relative_path("x/../../etc").unwrap_err();
        assert!(err.to_string().contains("x/../../etc"), "{err}");
    }

    proptest::proptest! {
        /// Any path with a `..` component, or absolute, is refused whatever surrounds it.
        #[test]
        fn dotdot_anywhere_is_refused(prefix in "[a-z]{0,3}(/[a-z]{1,3}){0,3}", suffix in "(/[a-z]{1,3}){0,3}") {
            let path = if prefix.is_empty() { format!("..{suffix}") } else { format!("{prefix}/..{suffix}") };
            proptest::prop_assert!(validate_relative_path(&path).is_err());
            let absolute = format!("/{}", path.trim_start_matches('/'));
            proptest::prop_assert!(validate_relative_path(&absolute).is_err());
        }
    }
}
