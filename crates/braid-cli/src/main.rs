//! The `braid` command: serve and send verified transfers, run simulated
//! transfers, benchmark Braid against kernel TCP and quinn, drive the
//! emulator and the experiment lab, and a demo. Run `braid --help`.
//!
//! Owns: argument parsing (clap), printing tables and JSON, exit codes.
//! Measurements, studies, the store and plots live in `braid-lab`; the
//! transport in the `braid` facade. Nothing depends on this crate.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
