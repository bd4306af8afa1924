//! `braid progmp`: check ProgMP scheduler programs and list the shipped ones.

use std::path::PathBuf;

use anyhow::{bail, Context};
use braid_progmp::BUILTINS;
use clap::{Args, Subcommand};

use super::Outcome;

#[derive(Debug, Subcommand)]
pub enum ProgmpCommand {
    /// Parse and type-check a scheduler; exit status 0 when valid, 1 with
    /// errors (line, column, the line quoted, a hint).
    Check(CheckArgs),
    /// List the schedulers shipped with Braid (usable by name).
    List(ListArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// A ProgMP source file, or the name of a shipped scheduler.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print the list as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(command: ProgmpCommand) -> anyhow::Result<Outcome> {
    match command {
        ProgmpCommand::Check(a) => check(a),
        ProgmpCommand::List(a) => list(a),
    }
}

fn check(args: CheckArgs) -> anyhow::Result<Outcome> {
    let origin = args.file.display().to_string();
    let source = if args.file.exists() {
        std::fs::read_to_string(&args.file).with_context(|| format!("cannot read `{origin}`"))?
    } else if let Some(b) = braid_progmp::builtin(&origin) {
        b.source.to_string()
    } else {
        bail!("`{origin}`: no such file, and not the name of a shipped scheduler (see `braid progmp list`)");
    };
    match braid_progmp::check(&origin, &source) {
        Ok(summary) => {
            println!("{summary}");
            Ok(Outcome::Success)
        }
        Err(diagnostics) => {
            eprint!("{diagnostics}");
            if !diagnostics.ends_with('\n') {
                eprintln!();
            }
            bail!("`{origin}` is not a valid ProgMP scheduler")
        }
    }
}

fn list(args: ListArgs) -> anyhow::Result<Outcome> {
    if args.json {
        let list: Vec<_> = BUILTINS
            .iter()
            .map(|b| serde_json::json!({"name": b.name, "section": b.section, "summary": b.summary}))
            .collect();
        println!("{}", serde_json::Value::Array(list));
    } else {
        for b in BUILTINS {
            // A thesis section gets its section sign; a paper key stands alone.
            let source = match b.section.starts_with(|c: char| c.is_ascii_digit()) {
                true => format!("§{}", b.section),
                false => format!("[{}]", b.section),
            };
            println!("{:<28} {:<7} {}", b.name, source, b.summary);
        }
    }
    Ok(Outcome::Success)
}
