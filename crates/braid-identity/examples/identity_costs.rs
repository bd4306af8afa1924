//! Prints what identity operations cost on this machine (per operation,
//! median of 5 rounds): key generation, signing, verifying, the X25519
//! conversion, and a known-hosts check against a file of N entries.
//!
//! `cargo run --release -p braid-identity --example identity_costs [N]`

use std::hint::black_box;
use std::time::Instant;

use braid_identity::{Identity, KnownHosts, Pattern, Peer};

/// Median over 5 rounds of the time per call of `op`, in microseconds.
fn micros(iterations: u32, mut op: impl FnMut(u32)) -> f64 {
    let mut rounds: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            for i in 0..iterations {
                op(i);
            }
            start.elapsed().as_secs_f64() * 1e6 / f64::from(iterations)
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let entries: u32 = match std::env::args().nth(1) {
        Some(n) => n
            .parse()
            .map_err(|e| format!("N (entries): expected a whole number: {e}"))?,
        None => 80_000,
    };
    let id = Identity::generate_os()?;
    let message = [7u8; 64];
    let signature = id.sign(&message);
    let generate = micros(200, |_| {
        black_box(Identity::generate_os().is_ok());
    });
    let sign = micros(2000, |_| {
        black_box(id.sign(&message));
    });
    let verify = micros(2000, |_| {
        black_box(id.public_key().verify(&message, &signature).is_ok());
    });
    let convert = micros(2000, |_| {
        black_box(id.x25519_secret().as_bytes()[0]);
    });
    println!("generate_os      {generate:8.2} us");
    println!("sign (64 B)      {sign:8.2} us");
    println!("verify (64 B)    {verify:8.2} us");
    println!("x25519_secret    {convert:8.2} us");

    let mut hosts = KnownHosts::new();
    for i in 0..entries {
        let peer = Identity::from_seed(&[(i % 251) as u8; 32]).public_key();
        let addr =
            std::net::SocketAddr::from(([10, (i >> 16) as u8, (i >> 8) as u8, i as u8], 4433));
        hosts.append(Pattern::Addr(addr), peer, "")?;
    }
    let known = Peer::addr("10.0.0.5:4433".parse()?);
    let key = Identity::from_seed(&[5; 32]).public_key();
    println!(
        "check ({entries} entries) {:8.3} us",
        micros(20_000, |_| {
            black_box(hosts.check(&known, &key));
        })
    );
    Ok(())
}
