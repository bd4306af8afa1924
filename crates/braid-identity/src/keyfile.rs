//! The identity key file: versioned text a user can recognise, created with
//! mode 0600 and refused on load when group or others can access it (as ssh
//! refuses such private keys).
//!
//! Format (four lines; a final newline is optional):
//!
//! ```text
//! braid-identity v1 ed25519
//! secret-key: <32-byte Ed25519 seed, base64url without padding>
//! public-key: braid1<32-byte public key, base64url without padding>
//! comment: <free text for people, e.g. who made the key and when>
//! ```
//!
//! The public key line is redundant (it follows from the secret) and is
//! checked on load, so an edited or damaged file is caught, and so a user
//! can read the public key without tools.

use std::fs::File;
use std::io;
use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use zeroize::Zeroizing;

use crate::error::IdentityError;
use crate::identity::Identity;
use crate::key::{PublicKey, KEY_LEN};
use crate::private_file::{self, WriteError, GROUP_OTHER_ANY};

/// First line of a version-1 key file.
pub const KEY_FILE_HEADER: &str = "braid-identity v1 ed25519";
const SECRET_FIELD: &str = "secret-key: ";
const PUBLIC_FIELD: &str = "public-key: ";
const COMMENT_FIELD: &str = "comment: ";
/// A valid file is about 160 bytes plus its comment; anything far larger is
/// not a key file and is not read into memory.
const MAX_KEY_FILE_BYTES: usize = 4096;
/// Longest comment kept (longer ones are cut, so files stay under the cap).
const MAX_COMMENT_CHARS: usize = 512;

impl Identity {
    /// Loads the identity at `path`: the file must be a regular file, not
    /// accessible by group or others, in the format above.
    pub fn load(path: &Path) -> Result<Self, IdentityError> {
        load_with_comment(path).map(|(identity, _)| identity)
    }

    /// Loads the identity at `path`, or creates a new one from OS randomness
    /// if there is no file (atomically, mode 0600, folders 0700). If another
    /// process creates the file at the same moment, its key is loaded.
    pub fn load_or_create(path: &Path) -> Result<Self, IdentityError> {
        match Self::load(path) {
            Err(IdentityError::Missing { .. }) => {}
            other => return other,
        }
        let identity = Self::generate_os()?;
        match identity.save(path, false, "created on first use") {
            Ok(()) => Ok(identity),
            Err(IdentityError::Exists { .. }) => Self::load(path),
            Err(e) => Err(e),
        }
    }

    /// Writes this identity to `path` atomically with mode 0600. An existing
    /// file is replaced only with `overwrite`; otherwise the result is
    /// [`IdentityError::Exists`]. `comment` is kept on the comment line
    /// (control characters become spaces).
    pub fn save(&self, path: &Path, overwrite: bool, comment: &str) -> Result<(), IdentityError> {
        let text = render(self, comment);
        private_file::write_atomically(path, text.as_bytes(), overwrite).map_err(|e| match e {
            WriteError::Exists => IdentityError::Exists {
                path: path.to_path_buf(),
            },
            WriteError::Io(action, at, source) => IdentityError::io(action, at, source),
        })
    }
}

/// Loads an identity and the comment stored beside it.
pub fn load_with_comment(path: &Path) -> Result<(Identity, String), IdentityError> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(IdentityError::Missing {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(IdentityError::io("opening identity file", path, e)),
    };
    // Checked on the open handle, so the file read is the file checked.
    let (is_file, mode) = private_file::mode_of(&file)
        .map_err(|e| IdentityError::io("inspecting identity file", path, e))?;
    if !is_file {
        return Err(IdentityError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    if mode & GROUP_OTHER_ANY != 0 {
        return Err(IdentityError::TooOpen {
            path: path.to_path_buf(),
            mode,
        });
    }
    let bytes = private_file::read_bounded(&mut file, MAX_KEY_FILE_BYTES)
        .map_err(|e| IdentityError::io("reading identity file", path, e))?
        .ok_or_else(|| {
            format_error(
                path,
                1,
                format!("a key file of at most {MAX_KEY_FILE_BYTES} bytes"),
            )
        })?;
    parse(path, &bytes)
}

/// The file text for `identity`. Secret: wiped when dropped.
fn render(identity: &Identity, comment: &str) -> Zeroizing<String> {
    let comment: String = comment
        .chars()
        .take(MAX_COMMENT_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut secret = Zeroizing::new(String::new());
    URL_SAFE_NO_PAD.encode_string(identity.seed().as_ref(), &mut secret);
    let mut text = Zeroizing::new(String::with_capacity(256 + comment.len()));
    text.push_str(KEY_FILE_HEADER);
    text.push('\n');
    text.push_str(SECRET_FIELD);
    text.push_str(&secret);
    text.push('\n');
    text.push_str(PUBLIC_FIELD);
    text.push_str(&identity.public_key().to_string());
    text.push('\n');
    text.push_str(COMMENT_FIELD);
    text.push_str(comment.trim());
    text.push('\n');
    text
}

fn format_error(path: &Path, line: usize, expected: impl Into<String>) -> IdentityError {
    IdentityError::Format {
        path: path.to_path_buf(),
        line,
        expected: expected.into(),
    }
}

/// Parses key file bytes. Errors name the line and what belongs there, and
/// never quote the secret.
pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<(Identity, String), IdentityError> {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    // Line `n` (1-based) as text, or an error saying what belongs there.
    let line = |n: usize, expected: &str| -> Result<&str, IdentityError> {
        lines
            .get(n - 1)
            .map(|raw| raw.strip_suffix(b"\r").unwrap_or(raw))
            .and_then(|raw| std::str::from_utf8(raw).ok())
            .ok_or_else(|| format_error(path, n, expected))
    };

    let header_expected = format!("the header `{KEY_FILE_HEADER}`");
    let header = line(1, &header_expected)?;
    if header != KEY_FILE_HEADER {
        let expected = if header.starts_with("braid-identity ") {
            format!("`{KEY_FILE_HEADER}` (the file is another version of the format)")
        } else {
            format!("{header_expected} (is this a braid identity file?)")
        };
        return Err(format_error(path, 1, expected));
    }

    let secret_expected =
        format!("`{SECRET_FIELD}` and 43 base64url characters (the 32-byte Ed25519 seed)");
    let seed = line(2, &secret_expected)?
        .strip_prefix(SECRET_FIELD)
        .and_then(|b64| decode_seed(b64.trim()))
        .ok_or_else(|| format_error(path, 2, &secret_expected))?;
    let identity = Identity::from_seed(&seed);

    let public_expected = format!("`{PUBLIC_FIELD}` and a public key `braid1…`");
    let public: PublicKey = line(3, &public_expected)?
        .strip_prefix(PUBLIC_FIELD)
        .and_then(|text| text.trim().parse().ok())
        .ok_or_else(|| format_error(path, 3, &public_expected))?;
    if public != identity.public_key() {
        return Err(IdentityError::KeyMismatch {
            path: path.to_path_buf(),
        });
    }

    let comment_expected = format!("`{COMMENT_FIELD}` and free text");
    let comment = line(4, &comment_expected)?
        .strip_prefix(COMMENT_FIELD.trim_end())
        .ok_or_else(|| format_error(path, 4, &comment_expected))?
        .trim()
        .to_string();

    if lines.len() > 4 {
        return Err(format_error(
            path,
            5,
            "the end of the file (a key file has four lines)",
        ));
    }
    Ok((identity, comment))
}

fn decode_seed(b64: &str) -> Option<Zeroizing<[u8; KEY_LEN]>> {
    if b64.len() != 43 {
        return None;
    }
    let mut seed = Zeroizing::new([0u8; KEY_LEN]);
    match URL_SAFE_NO_PAD.decode_slice(b64, seed.as_mut()) {
        Ok(KEY_LEN) => Some(seed),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    fn sample() -> (Identity, String) {
        let id = Identity::from_seed(&[9; 32]);
        let text = render(&id, "test key").to_string();
        (id, text)
    }

    #[test]
    fn save_then_load_round_trips_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("identity");
        let id = Identity::from_seed(&[3; 32]);
        id.save(&path, false, "alice's laptop\nsecond line")
            .unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        let (loaded, comment) = load_with_comment(&path).unwrap();
        assert_eq!(loaded.public_key(), id.public_key());
        assert_eq!(comment, "alice's laptop second line");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("braid-identity v1 ed25519\nsecret-key: "));
        assert!(text.contains(&format!("public-key: {}\n", id.public_key())));
        // Only the file itself is left: no temporary file behind.
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1
        );
    }

    #[test]
    fn save_refuses_to_overwrite_unless_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("identity");
        let first = Identity::from_seed(&[1; 32]);
        let second = Identity::from_seed(&[2; 32]);
        first.save(&path, false, "").unwrap();
        assert!(matches!(
            second.save(&path, false, ""),
            Err(IdentityError::Exists { .. })
        ));
        assert_eq!(
            Identity::load(&path).unwrap().public_key(),
            first.public_key()
        );
        second.save(&path, true, "").unwrap();
        assert_eq!(
            Identity::load(&path).unwrap().public_key(),
            second.public_key()
        );
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn load_or_create_creates_once_then_loads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("identity");
        let created = Identity::load_or_create(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
        let again = Identity::load_or_create(&path).unwrap();
        assert_eq!(created.public_key(), again.public_key());
    }

    #[test]
    fn group_or_other_access_is_refused_naming_path_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("identity");
        Identity::from_seed(&[1; 32])
            .save(&path, false, "")
            .unwrap();
        for bad in [0o640, 0o604, 0o620, 0o660] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(bad)).unwrap();
            let err = Identity::load(&path).unwrap_err();
            assert!(matches!(err, IdentityError::TooOpen { mode, .. } if mode == bad));
            let message = err.to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains(&format!("{bad:04o}")), "{message}");
            assert!(matches!(
                Identity::load_or_create(&path),
                Err(IdentityError::TooOpen { .. })
            ));
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(Identity::load(&path).is_ok());
    }

    #[test]
    fn missing_and_non_file_paths() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        assert!(matches!(
            Identity::load(&missing),
            Err(IdentityError::Missing { .. })
        ));
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(matches!(
            Identity::load(dir.path()),
            Err(IdentityError::NotAFile { .. })
        ));
    }

    fn line_of(err: IdentityError) -> usize {
        match err {
            IdentityError::Format { line, .. } => line,
            IdentityError::KeyMismatch { .. } => 3,
            other => panic!("not a format error: {other}"),
        }
    }

    #[test]
    fn each_damaged_line_is_named() {
        let (_, text) = sample();
        let lines: Vec<&str> = text.lines().collect();
        let path = Path::new("/x/identity");
        let with = |n: usize, replacement: &str| {
            let mut copy = lines.clone();
            copy[n - 1] = replacement;
            copy.join("\n")
        };
        let other_key = Identity::from_seed(&[4; 32]).public_key();
        let cases = [
            (with(1, "-----BEGIN OPENSSH PRIVATE KEY-----"), 1),
            (with(1, "braid-identity v2 ed25519"), 1),
            (with(2, "secret-key: tooshort"), 2),
            (
                with(2, "secret: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
                2,
            ),
            (with(3, "public-key: braid1nonsense"), 3),
            (with(3, &format!("public-key: {other_key}")), 3),
            (with(4, "note: hi"), 4),
            (lines[..3].join("\n"), 4),
            (lines[..1].join("\n"), 2),
            (String::new(), 1),
            (format!("{text}extra\n"), 5),
        ];
        for (case, expected_line) in cases {
            let err = parse(path, case.as_bytes()).unwrap_err();
            let message = err.to_string();
            assert!(message.contains("/x/identity:"), "{message}");
            assert_eq!(line_of(err), expected_line, "{case:?}");
        }
    }

    #[test]
    fn errors_never_quote_the_secret() {
        let (_, text) = sample();
        let secret_line = text.lines().nth(1).unwrap().to_string();
        let secret = secret_line.trim_start_matches("secret-key: ").to_string();
        let damaged = text.replace("public-key: braid1", "public-key: braid9");
        let message = parse(Path::new("f"), damaged.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(!message.contains(&secret), "{message}");
        let short = text.replace(&secret, &secret[..40]);
        let message = parse(Path::new("f"), short.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(!message.contains(&secret[..40]), "{message}");
    }

    #[test]
    fn crlf_and_missing_final_newline_are_accepted() {
        let (id, text) = sample();
        let crlf = text.replace('\n', "\r\n");
        assert_eq!(
            parse(Path::new("f"), crlf.as_bytes())
                .unwrap()
                .0
                .public_key(),
            id.public_key()
        );
        let trimmed = text.trim_end();
        assert_eq!(
            parse(Path::new("f"), trimmed.as_bytes())
                .unwrap()
                .0
                .public_key(),
            id.public_key()
        );
    }

    #[test]
    fn oversized_file_is_refused_without_reading_it_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("identity");
        std::fs::write(&path, vec![b'a'; MAX_KEY_FILE_BYTES + 1]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            Identity::load(&path),
            Err(IdentityError::Format { line: 1, .. })
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse(Path::new("f"), &bytes);
        }

        #[test]
        fn arbitrary_lines_after_a_valid_header_never_panic(rest in "\\PC{0,200}") {
            let _ = parse(Path::new("f"), format!("{KEY_FILE_HEADER}\n{rest}").as_bytes());
        }

        #[test]
        fn render_then_parse_round_trips(seed in proptest::array::uniform32(any::<u8>()), comment in "\\PC{0,80}") {
            let id = Identity::from_seed(&seed);
            let text = render(&id, &comment);
            let (back, kept) = parse(Path::new("f"), text.as_bytes()).unwrap();
            prop_assert_eq!(back.public_key(), id.public_key());
            let (x_back, x_id) = (back.x25519_secret(), id.x25519_secret());
            prop_assert_eq!(x_back.as_bytes(), x_id.as_bytes());
            prop_assert!(!kept.contains('\n'));
        }
    }
}
