//! Braid's link model and its spec syntax.
//!
//! Owns: the one text syntax for describing a network path
//! (`rtt=20ms,rate=100mbit,queue=64kb,loss=1%,dup=0.5%,reorder=1%`, parsed
//! into a [`LinkSpec`]) and the one model of what such a path does to
//! packets ([`Link`]). The simulator (`braid-sim`), the emulator, the
//! benchmarks and the CLI all use these, so a spec means the same
//! everywhere.
//!
//! Must not depend on: any other Braid crate but `braid-core`, sockets,
//! threads, or the system clock. [`Link`] is sans-IO: a packet of `len`
//! bytes is queued at `now` ([`Link::enqueue`]) and its fate — dropped,
//! with a reason, or delivered at `at` (and perhaps again as a duplicate)
//! — comes from [`Link::poll`] once decided, at [`Link::next_event`]; for
//! the queue disciplines that decide at enqueue, [`Link::offer`] answers
//! at once. Randomness comes from a seed.
//!
//! # Spec keys
//!
//! | key | meaning | example |
//! |---|---|---|
//! | `delay` | one-way propagation delay | `delay=10ms` |
//! | `rtt` | sets `delay` to rtt/2 (not with `delay`) | `rtt=20ms` |
//! | `jitter` | σ of the round-trip delay variation: each direction adds normal noise of σ = jitter/√2; never reorders | `jitter=5ms` |
//! | `rate` | bottleneck rate (bit, kbit, mbit, gbit or bps, kbps, mbps, gbps); absent = unlimited | `rate=100mbit` |
//! | `queue` | queue limit before the rate limiter: bytes (b, kb, kib, mb, mib), packets (`p`, `pkt`) or BDPs (`bdp`, rate × 2·delay); default 1 BDP, at least 16 full packets; bounds the buffer under every `aqm` | `queue=64kb`, `queue=100p`, `queue=0.5bdp` |
//! | `aqm` | queue discipline: `droptail` (default), `codel` (RFC 8289), `pie` (RFC 8033), `red` (Floyd & Jacobson, gentle, thresholds limit/12 and limit/4), `fq_codel` (RFC 8290); needs `rate` or `trace`; see [`Aqm`] | `aqm=fq_codel` |
//! | `aqm_target` | target queueing delay of `codel`, `fq_codel` (default 5 ms) or `pie` (default 15 ms) | `aqm_target=10ms` |
//! | `aqm_interval` | CoDel's interval for `codel`, `fq_codel` (default 100 ms) | `aqm_interval=50ms` |
//! | `loss` | independent loss probability, percent or fraction | `loss=1%`, `loss=0.01` |
//! | `ge` | Gilbert–Elliott burst loss `p/r[/bad_loss[/good_loss]]`, see [`GilbertElliott`] | `ge=1%/25%` |
//! | `reorder` | probability a packet is held back by `reorder_delay` so later ones overtake it | `reorder=1%` |
//! | `reorder_delay` | extra delay of a reordered packet; default max(1 ms, 25% of `delay`) | `reorder_delay=5ms` |
//! | `dup` | probability a packet is delivered twice | `dup=0.5%` |
//! | `mtu` | larger packets (headers included) are dropped | `mtu=1500` |
//! | `trace` | Mahimahi delivery-opportunity trace instead of `rate` (see [`RateTrace`]) | `trace=lte.down` |
//!
//! Prefix an item with `a2b:` or `b2a:` to set it for one direction only
//! (`rtt=40ms,b2a:rate=5mbit`), and append changes over time after `;`
//! (`rtt=20ms;at=10s:rtt=100ms;at=20s:rtt=20ms`): see [`LinkSpec`].
//!
//! Durations take ns, us, ms or s, with decimals (`0.5ms`). Probabilities
//! and ratios are exact to 10⁻⁹, durations to 1 ns, rates to 1 bit/s.
//! `Display` prints a canonical spec that parses back to an equal value.
//!
//! ```
//! use braid_link::{Direction, Link, LinkSpec, Verdict};
//! use braid_core::Instant;
//!
//! let spec: LinkSpec = "rtt=50ms,rate=100mbit,loss=5%".parse().unwrap();
//! let mut link = Link::new(spec.params(Direction::AToB), 42);
//! let delivered = (0..1000u64)
//!     .filter(|i| matches!(link.offer(Instant::from_micros(i * 200), 1200), Verdict::Deliver { .. }))
//!     .count();
//! assert!((900..990).contains(&delivered));
//! assert_eq!(link.stats().dropped_loss, 1000 - delivered as u64);
//! ```

mod aqm;
mod bottleneck;
mod link;
mod loss;
mod spec;
mod trace;
mod units;

pub use link::{DropReason, Link, LinkStats, Outcome, PacketId, Verdict};
pub use spec::{
    Aqm, Change, Direction, GilbertElliott, LinkParams, LinkSpec, QueueLimit, ResolvedQueue,
    SpecError, KEYS,
};
pub use trace::{RateTrace, TraceError};
pub use units::{Probability, Rate, Ratio};
