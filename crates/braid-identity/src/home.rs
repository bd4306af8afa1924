//! Where braid keeps its identity and known hosts: `$BRAID_HOME`, else
//! `$XDG_CONFIG_HOME/braid` (XDG Base Directory Specification), else
//! `$HOME/.config/braid`.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::error::IdentityError;

/// Variable naming braid's folder directly (tests and multi-node setups).
pub const BRAID_HOME_VAR: &str = "BRAID_HOME";
/// File name of the identity inside braid's folder.
pub const IDENTITY_FILE: &str = "identity";
/// File name of the known hosts inside braid's folder.
pub const KNOWN_HOSTS_FILE: &str = "known_hosts";

/// Braid's folder from the process environment.
pub fn braid_home() -> Result<PathBuf, IdentityError> {
    braid_home_from(|name| std::env::var_os(name))
}

/// Braid's folder from an environment given as a lookup (so it can be tested
/// without touching the process environment). Empty values count as unset,
/// and a relative `XDG_CONFIG_HOME` is ignored, as the XDG specification says.
pub fn braid_home_from(
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Result<PathBuf, IdentityError> {
    let set = |name: &str| {
        lookup(name)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    };
    if let Some(home) = set(BRAID_HOME_VAR) {
        return Ok(home);
    }
    if let Some(xdg) = set("XDG_CONFIG_HOME").filter(|path| path.is_absolute()) {
        return Ok(xdg.join("braid"));
    }
    if let Some(home) = set("HOME") {
        return Ok(home.join(".config").join("braid"));
    }
    Err(IdentityError::NoHome)
}

/// The default identity file: `<braid home>/identity`.
pub fn default_identity_path() -> Result<PathBuf, IdentityError> {
    Ok(braid_home()?.join(IDENTITY_FILE))
}

/// The default known-hosts file: `<braid home>/known_hosts`.
pub fn default_known_hosts_path() -> Result<PathBuf, IdentityError> {
    Ok(braid_home()?.join(KNOWN_HOSTS_FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn braid_home_wins_over_xdg_and_home() {
        let lookup = env(&[
            ("BRAID_HOME", "/b"),
            ("XDG_CONFIG_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(braid_home_from(lookup).unwrap(), PathBuf::from("/b"));
    }

    #[test]
    fn xdg_then_home() {
        let lookup = env(&[
            ("BRAID_HOME", ""),
            ("XDG_CONFIG_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(braid_home_from(lookup).unwrap(), PathBuf::from("/x/braid"));
        let relative_xdg = env(&[("XDG_CONFIG_HOME", "rel"), ("HOME", "/h")]);
        assert_eq!(
            braid_home_from(relative_xdg).unwrap(),
            PathBuf::from("/h/.config/braid")
        );
    }

    #[test]
    fn nothing_set_is_an_error() {
        assert!(matches!(
            braid_home_from(env(&[])),
            Err(IdentityError::NoHome)
        ));
    }
}
