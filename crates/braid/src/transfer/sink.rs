//! Where the receiver's data goes: nowhere (only hashed), or a file under an
//! output directory, written to a `.part` file first and given its final
//! name only once the digest matched, never overwriting an existing file.

use std::path::{Path, PathBuf};

use tokio::io::{AsyncWriteExt, BufWriter};

/// Longest file name kept, in bytes (most file systems allow 255).
const MAX_NAME: usize = 200;
/// Name used when the sender's suggestion sanitizes to nothing.
const FALLBACK_NAME: &str = "received.bin";
/// Most suffixes tried before giving up on finding a free name.
const MAX_SUFFIX: u32 = 10_000;

/// A file name safe to create inside the output directory: the last path
/// component of `suggested` (either separator), without control characters
/// or leading dots (no `..`, no hidden files), at most 200 bytes.
///
/// ```
/// use braid::transfer::sanitize_file_name;
/// assert_eq!(sanitize_file_name("../../etc/passwd"), "passwd");
/// assert_eq!(sanitize_file_name("C:\\Users\\x\\report.pdf"), "report.pdf");
/// assert_eq!(sanitize_file_name(".."), "received.bin");
/// ```
pub fn sanitize_file_name(suggested: &str) -> String {
    let last = suggested.rsplit(['/', '\\']).next().unwrap_or("");
    let cleaned: String = last
        .chars()
        .map(|c| if c.is_control() || c == ':' { '_' } else { c })
        .collect::<String>()
        .trim()
        .trim_start_matches('.')
        .to_string();
    let mut name = cleaned;
    if name.len() > MAX_NAME {
        let mut cut = MAX_NAME;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
    if name.trim().is_empty() {
        FALLBACK_NAME.to_string()
    } else {
        name
    }
}

/// `name` with `-n` inserted before its last extension (`a.txt` → `a-1.txt`,
/// `a.tar.gz` → `a.tar-1.gz`): simple and predictable.
fn with_suffix(name: &str, n: u32) -> String {
    match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{stem}-{n}.{ext}"),
        _ => format!("{name}-{n}"),
    }
}

/// The receiving end of a transfer's data.
#[derive(Debug)]
pub struct Sink {
    file: Option<FileSink>,
}

#[derive(Debug)]
struct FileSink {
    dir: PathBuf,
    name: String,
    part: PathBuf,
    writer: BufWriter<tokio::fs::File>,
}

impl Sink {
    /// Data is only hashed.
    pub fn discard() -> Sink {
        Sink { file: None }
    }

    /// Data goes to a new `.part` file in `dir`; [`Sink::commit`] gives it
    /// the sanitized `suggested` name (with a `-N` suffix if taken).
    pub async fn file(dir: &Path, suggested: &str) -> std::io::Result<Sink> {
        let name = sanitize_file_name(suggested);
        for n in 0..MAX_SUFFIX {
            let part = dir.join(format!(".{}.part", if n == 0 { name.clone() } else { with_suffix(&name, n) }));
            match tokio::fs::OpenOptions::new().write(true).create_new(true).open(&part).await {
                Ok(f) => {
                    let writer = BufWriter::with_capacity(1 << 20, f);
                    return Ok(Sink { file: Some(FileSink { dir: dir.to_path_buf(), name, part, writer }) });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "no free name for the partial file"))
    }

    /// Append data.
    pub async fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        match &mut self.file {
            Some(f) => f.writer.write_all(data).await,
            None => Ok(()),
        }
    }

    /// Flush and give the file its final name; returns the path (`None` for
    /// a discarding sink). An existing file is never replaced: the name gets
    /// a `-N` suffix instead.
    pub async fn commit(self) -> std::io::Result<Option<PathBuf>> {
        let Some(mut f) = self.file else { return Ok(None) };
        f.writer.flush().await?;
        f.writer.get_mut().sync_all().await?;
        drop(f.writer);
        let (part, dir, name) = (f.part, f.dir, f.name);
        tokio::task::spawn_blocking(move || {
            for n in 0..MAX_SUFFIX {
                let target = dir.join(if n == 0 { name.clone() } else { with_suffix(&name, n) });
                // A hard link fails if the target exists, unlike rename:
                // that is what makes "never overwrite" race-free.
                match std::fs::hard_link(&part, &target) {
                    Ok(()) => {
                        std::fs::remove_file(&part)?;
                        return Ok(Some(target));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(_) if !target.exists() => {
                        // File systems without hard links: rename, checked.
                        std::fs::rename(&part, &target)?;
                        return Ok(Some(target));
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "no free name for the received file"))
        })
        .await
        .map_err(std::io::Error::other)?
    }

    /// Drop the data received so far (the `.part` file is removed).
    pub async fn abort(self) {
        if let Some(f) = self.file {
            drop(f.writer);
            let _ = tokio::fs::remove_file(&f.part).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn sanitized_names_stay_in_the_directory(s in "\\PC{0,300}|[./\\\\a]{0,12}") {
            let n = sanitize_file_name(&s);
            prop_assert!(!n.is_empty() && n.len() <= MAX_NAME);
            prop_assert!(!n.contains('/') && !n.contains('\\') && !n.contains('\0'));
            prop_assert!(!n.starts_with('.'));
            let p = Path::new(&n);
            prop_assert_eq!(p.components().count(), 1);
            prop_assert!(matches!(p.components().next(), Some(std::path::Component::Normal(_))));
        }
    }

    #[test]
    fn suffixes() {
        assert_eq!(with_suffix("a.txt", 2), "a-2.txt");
        assert_eq!(with_suffix("a.tar.gz", 1), "a.tar-1.gz");
        assert_eq!(with_suffix("noext", 1), "noext-1");
        assert_eq!(sanitize_file_name("a\nb"), "a_b");
        assert_eq!(sanitize_file_name(""), FALLBACK_NAME);
        assert_eq!(sanitize_file_name("dir/"), FALLBACK_NAME);
    }

    #[tokio::test]
    async fn commit_never_overwrites_and_abort_cleans_up() {
        let dir = std::env::temp_dir().join(format!("braid-sink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("x.bin"), b"old").unwrap();
        let mut s1 = Sink::file(&dir, "../x.bin").await.unwrap();
        let mut s2 = Sink::file(&dir, "x.bin").await.unwrap();
        s1.write(b"one").await.unwrap();
        s2.write(b"two").await.unwrap();
        let p1 = s1.commit().await.unwrap().unwrap();
        let p2 = s2.commit().await.unwrap().unwrap();
        assert_eq!(p1, dir.join("x-1.bin"));
        assert_eq!(p2, dir.join("x-2.bin"));
        assert_eq!(std::fs::read(dir.join("x.bin")).unwrap(), b"old");
        assert_eq!(std::fs::read(&p1).unwrap(), b"one");
        assert_eq!(std::fs::read(&p2).unwrap(), b"two");
        let mut s3 = Sink::file(&dir, "y").await.unwrap();
        s3.write(b"partial").await.unwrap();
        s3.abort().await;
        let mut names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["x-1.bin", "x-2.bin", "x.bin"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
