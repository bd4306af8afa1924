//! Braid's real-network emulator.
//!
//! Owns: testbeds of hosts in Linux network namespaces joined by paths
//! that apply Braid's link model ([`braid_link::Link`]) to real packets, so
//! that a link spec means the same here as in the simulator; their
//! addresses and routes; the forwarder that carries packets between TUN
//! devices; runtime changes of paths; teardown (on drop, `down`, signals,
//! and reclaiming what a killed owner left); and the daemon and client
//! behind `braid emu up/set/down`.
//!
//! Must not depend on: other Braid crates than `braid-core` and
//! `braid-link` (the protocol and its drivers run *on* testbeds, as any
//! other program), tokio.
//!
//! # How it works
//!
//! Each host is a network namespace (`braid-emu-<testbed>-<host>`). Each
//! path is a pair of TUN devices (`be-<testbed>-<id>`), one in each of its
//! hosts' namespaces, with point-to-point addresses from the documentation
//! ranges (path `i`: 192.0.2.(4i+1) on its first host, 192.0.2.(4i+2) on
//! its second; then 198.51.100.0/24 and 203.0.113.0/24). One thread, the
//! forwarder, enters each namespace to open its devices, then reads packets
//! from every device, offers each to the [`braid_link::Link`] of its
//! direction (length = the IP packet's length) and writes it to the other
//! end when the link says it arrives. Needs root, /dev/net/tun and
//! iproute2's `ip`; [`check_capabilities`] names what is missing.
//!
//! ```no_run
//! use braid_emu::{bench, Testbed};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tb = Testbed::builder().name("example").link("rtt=20ms,rate=100mbit".parse()?).build()?;
//! let bps = bench::tcp_goodput(&tb, 0, std::time::Duration::from_secs(1), std::time::Duration::from_secs(3))?;
//! println!("{:.1} Mbit/s", bps / 1e6);
//! // Dropping `tb` removes the namespaces, devices and processes.
//! # Ok(()) }
//! ```

pub mod bench;
pub mod control;
mod error;
mod forwarder;
mod layout;
mod netns;
pub mod state;
pub mod sys;
mod testbed;
mod topology;

pub use error::EmuError;
pub use forwarder::{ForwarderStats, PathStats, Stats};
pub use layout::{HostLayout, Layout, PathLayout};
pub use testbed::{check_capabilities, iface_mtu, Testbed, TestbedBuilder};
pub use topology::{check_name, PathDef, Topology, IF_PREFIX, MAX_PATHS, NETNS_PREFIX};
