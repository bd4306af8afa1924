//! Adaptive video streaming (MPEG-DASH) for Braid: the test content, a static HTTP server,
//! the manifest parser, QoE metrics, and Braid's own adaptive-bitrate (ABR) client that fetches
//! segments over HTTP/1.1 on TCP, on a Braid connection, or on a multipath Braid connection.
//!
//! This is the Rust side of the DASH study of seed 001, chapter 8 (Frömmgen's thesis, §8.2–8.3:
//! players × adaptation algorithms × segment lengths × buffer targets × bandwidth mean and
//! variance); the browser players (dash.js, Shaka) are driven by the lab.
//!
//! - [`content`]: the test video made with ffmpeg (a 9-rung ladder, cached by spec hash).
//! - [`server`]: static HTTP server with a JSON request log, over TCP or Braid.
//! - [`mpd`]: parses the manifest ffmpeg writes (SegmentTemplate, `$Number$`, timelines).
//! - [`qoe`]: stalls, startup, bitrate, switches, Hoßfeld's and Yin et al.'s QoE.
//! - [`player`]: the sans-IO virtual playout buffer that turns downloads into a trace.
//! - [`abr`]: throughput-based, BOLA and robustMPC adaptation (sans-IO).
//! - [`abandon`]: giving up a segment download the network can no longer carry (sans-IO).
//! - [`http`]: a minimal HTTP/1.1 GET client over any byte stream.
//! - [`client`]: the tokio driver that plays a manifest over a chosen transport.
//!
//! Must not depend on: clap, plotters, rusqlite, the lab (which drives the browser players and
//! records the studies) or the CLI.
//!
//! ```
//! use braid_dash::qoe::{summarize, PlaybackTrace, Played, Stall};
//!
//! // 10 s at 1 Mbit/s after a 0.5 s startup, with one 2 s stall.
//! let trace = PlaybackTrace {
//!     startup_s: Some(0.5),
//!     stalls: vec![Stall { start_s: 4.0, duration_s: 2.0 }],
//!     played: vec![Played { start_s: 0.0, duration_s: 10.0, kbps: 1000.0 }],
//!     ended: true,
//! };
//! let s = summarize(&trace);
//! assert_eq!(s.stall_count, 1);
//! assert!(s.qoe_hossfeld < 5.0 && s.qoe_hossfeld > 1.0);
//! ```

pub mod abandon;
pub mod abr;
pub mod client;
pub mod content;
pub mod http;
pub mod mpd;
pub mod player;
pub mod qoe;
pub mod server;
