//! File transfer with per-stage concurrency tuned online (Marlin; seed 002, "Use Only What You
//! Need", §3).
//!
//! A file transfer has three stages — read from the source storage, send over the network, write
//! to the destination storage — and each may be the bottleneck. This crate owns the pieces the
//! transfer engine is built on:
//!
//! * [`tuner`]: Marlin's online gradient ascent, one [`tuner::StageTuner`] per stage on the
//!   paper's utility (eq. 1 for read/write, eq. 2 with the loss term for the network), and the
//!   Falcon-style shared-concurrency tuner kept as the ablation. Sans-IO: observations in,
//!   worker counts out.
//! * [`staging`]: the bounded in-memory staging area of hashed chunks between the stages, with
//!   asynchronous backpressure (readers wait when it is full; memory never grows past the cap).
//! * [`manifest`]: the walk of the source paths into validated relative entries (files with
//!   their data extents, directories, symlinks), and the receiver-side path validator.
//! * [`emulate`]: a sleeping token bucket that throttles a stage's workers in benchmarks.
//!
//! The engine built on them:
//!
//! * [`protocol`]: the framed wire messages (postcard; total decoding).
//! * [`plan`]: how a manifest is cut into chunks (small files bundled), identically on both ends.
//! * [`transport`]: the byte streams (kernel TCP by default, with `TCP_INFO` loss counters);
//!   [`tls`]: the same over TLS 1.3, both ends authenticated by their Braid identities.
//!   [`congestion`]: which kernel congestion control those TCP streams run (the host's unless asked).
//! * [`mod@send`] and [`receive`]: the sender's read and network pools and the receiver's write
//!   pool, tuned per probe interval; [`journal`]: the receiver's resume journal.
//! * [`pool`]: resizable worker slots and the busy-time stage meter; [`buffer`]: recycled chunk
//!   buffers.
//!
//! Entry points: [`send::send`], [`receive::receive_one`] and [`receive::serve`]. This crate must not depend on the
//! CLI, `braid-lab`, plotting or databases: it is the engine, and those are its users.

pub mod buffer;
pub mod congestion;
pub mod emulate;
pub mod error;
pub mod journal;
pub mod manifest;
pub mod plan;
pub mod pool;
pub mod protocol;
pub mod receive;
pub mod send;
pub mod staging;
pub mod tls;
pub mod transport;
pub mod tuner;

pub use error::{EmulatedStorage, IntervalSample, Progress, ProgressFn, TransferError};
pub use receive::{receive_one, serve, ReceiveOptions, ReceiveSummary};
pub use send::{send, Pinned, SendOptions, SendSummary, TunerKind};
