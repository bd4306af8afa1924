//! The `braid` command: serve and send verified transfers, run simulated
//! transfers, benchmark Braid against kernel TCP and quinn, and a demo.
//! Run `braid --help` for the commands.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
