//! `braid keygen`: create this node's identity key file (Ed25519, mode 0600)
//! or show its public key, fingerprint and node ID. The key handling itself
//! lives in `braid-identity`; this module parses flags and prints.

use std::path::PathBuf;

use anyhow::Context as _;
use braid_identity::{default_identity_path, Identity, IdentityError, PublicKey};
use clap::Args;

use super::Outcome;

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Identity file [default: $BRAID_HOME/identity, else $XDG_CONFIG_HOME/braid/identity, else
    /// ~/.config/braid/identity].
    #[arg(long, value_name = "PATH")]
    pub identity: Option<PathBuf>,
    /// Replace an existing identity file. Its old key is lost: peers that pinned it refuse this node
    /// until their known_hosts are updated.
    #[arg(long, conflicts_with = "show")]
    pub force: bool,
    /// Print the public key of the existing identity instead of creating one.
    #[arg(long)]
    pub show: bool,
    /// Comment stored in the key file (e.g. whose key it is).
    #[arg(
        long,
        value_name = "TEXT",
        conflicts_with = "show",
        default_value = "created by braid keygen"
    )]
    pub comment: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: KeygenArgs) -> anyhow::Result<Outcome> {
    let path = match &args.identity {
        Some(path) => path.clone(),
        None => default_identity_path().context("--identity not given")?,
    };
    let (key, created) = if args.show {
        (Identity::load(&path)?.public_key(), false)
    } else {
        let identity = Identity::generate_os()?;
        match identity.save(&path, args.force, &args.comment) {
            Ok(()) => (identity.public_key(), true),
            Err(IdentityError::Exists { .. }) => anyhow::bail!(
                "identity file {} already exists: not overwritten. `braid keygen --show` prints its \
                 public key; --force replaces it (the old key is then lost)",
                path.display()
            ),
            Err(e) => return Err(e.into()),
        }
    };
    print_key(&path, &key, created, args.json)?;
    Ok(Outcome::Success)
}

fn print_key(
    path: &std::path::Path,
    key: &PublicKey,
    created: bool,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        let value = serde_json::json!({
            "identity": path.display().to_string(),
            "created": created,
            "public_key": key.to_string(),
            "fingerprint": key.fingerprint().to_string(),
            "node_id": key.node_id().get(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    if created {
        println!("created identity {} (mode 0600)", path.display());
    } else {
        println!("identity {}", path.display());
    }
    println!("public key:  {key}");
    println!("fingerprint: {}", key.fingerprint());
    println!("node id:     {}", key.node_id());
    println!("peers trust this node with a known_hosts line: `NAME_OR_IP:PORT {key}`");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::parse_flags;

    #[test]
    fn show_conflicts_with_force() {
        let command = <KeygenArgs as clap::Args>::augment_args(clap::Command::new("braid"));
        assert!(command
            .try_get_matches_from(["braid", "--show", "--force"])
            .is_err());
    }

    #[test]
    fn flags_parse() {
        let args: KeygenArgs =
            parse_flags(&["--identity", "/tmp/x", "--force", "--comment", "lab"]);
        assert_eq!(args.identity, Some(PathBuf::from("/tmp/x")));
        assert!(args.force && !args.show);
        assert_eq!(args.comment, "lab");
    }
}
