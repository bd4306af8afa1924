//! The built-in templates: the measurements behind `braid bench` (over the
//! emulator or loopback) and the simulator scenarios (virtual time).
//!
//! Each template lives in its own module; [`all`] lists them.

pub mod adapt;
pub mod dash;
pub mod data;
pub mod exon;
pub mod flood;
pub mod handshake;
pub mod messages;
pub mod multipath;
pub mod priority;
pub mod sim_cellular;
pub mod sim_multipath;
pub mod sim_priority;
pub mod sim_transfer;
pub mod stream;
pub mod tarl_dpm;
pub mod transfer;
#[cfg(test)]
pub(crate) mod test_support;

use std::sync::Arc;

use super::Template;

/// Every built-in template, in the order `braid lab templates` lists them.
pub fn all() -> Vec<Arc<dyn Template>> {
    vec![
        Arc::new(stream::Stream),
        Arc::new(exon::Exon),
        Arc::new(messages::Messages),
        Arc::new(priority::Priority),
        Arc::new(data::Data),
        Arc::new(multipath::Multipath),
        Arc::new(sim_transfer::SimTransfer),
        Arc::new(sim_priority::SimPriority),
        Arc::new(sim_multipath::SimMultipath),
        Arc::new(sim_cellular::SimCellular),
        Arc::new(transfer::Transfer),
        Arc::new(tarl_dpm::TarlDpm),
        Arc::new(dash::Dash),
        Arc::new(adapt::Adapt),
        Arc::new(flood::Flood),
        Arc::new(handshake::Handshake),
    ]
}
