//! Files only their owner may touch: created atomically with mode 0600 (a
//! temporary file in the same folder, written, fsynced, then renamed or
//! linked into place, so the file is never seen half-written nor, even
//! briefly, with wider permissions), and permission checks on load, like
//! ssh's for private keys.

use std::fs::{self, File};
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

/// Permission bits that make a secret file accessible to group or others.
pub(crate) const GROUP_OTHER_ANY: u32 = 0o077;
/// Permission bits that let group or others change a file.
pub(crate) const GROUP_OTHER_WRITE: u32 = 0o022;

/// What went wrong writing a private file.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// The target exists and overwriting was not asked for.
    Exists,
    /// A system call failed; `action` says which step.
    Io(&'static str, PathBuf, io::Error),
}

/// The folder a file lives in (`.` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Creates `dir` and missing parents with mode 0700 (existing folders keep
/// their mode).
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Writes `contents` to `path` atomically with mode 0600. Without
/// `overwrite`, an existing file is left alone and `Exists` is returned; the
/// check and the link are one step (no window for another writer).
pub(crate) fn write_atomically(
    path: &Path,
    contents: &[u8],
    overwrite: bool,
) -> Result<(), WriteError> {
    let dir = parent_dir(path);
    create_private_dir(&dir).map_err(|e| WriteError::Io("creating folder", dir.clone(), e))?;
    // tempfile creates the file with O_EXCL and mode 0600 on Unix.
    let mut temp = tempfile::Builder::new()
        .prefix(".braid-tmp-")
        .tempfile_in(&dir)
        .map_err(|e| WriteError::Io("creating temporary file in", dir.clone(), e))?;
    temp.write_all(contents)
        .and_then(|()| temp.as_file().sync_all())
        .map_err(|e| WriteError::Io("writing temporary file for", path.to_path_buf(), e))?;
    let placed = if overwrite {
        temp.persist(path).map(drop)
    } else {
        temp.persist_noclobber(path).map(drop)
    };
    if let Err(failure) = placed {
        return Err(match failure.error.kind() {
            io::ErrorKind::AlreadyExists => WriteError::Exists,
            _ => WriteError::Io("moving into place", path.to_path_buf(), failure.error),
        });
    }
    // The rename is durable only once the folder is synced.
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| WriteError::Io("syncing folder", dir, e))
}

/// An opened file's permission bits (0 where Unix modes do not exist).
pub(crate) fn mode_of(file: &File) -> io::Result<(bool, u32)> {
    let meta = file.metadata()?;
    #[cfg(unix)]
    let mode = {
        use std::os::unix::fs::PermissionsExt as _;
        meta.permissions().mode() & 0o7777
    };
    #[cfg(not(unix))]
    let mode = 0;
    Ok((meta.is_file(), mode))
}

/// Reads at most `limit` bytes; `None` if the file is longer. The buffer is
/// wiped when dropped, since it may hold a secret.
pub(crate) fn read_bounded(
    file: &mut File,
    limit: usize,
) -> io::Result<Option<Zeroizing<Vec<u8>>>> {
    let mut buf = Zeroizing::new(Vec::with_capacity(limit.min(8192)));
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    file.take(cap).read_to_end(&mut buf)?;
    Ok((buf.len() <= limit).then_some(buf))
}
