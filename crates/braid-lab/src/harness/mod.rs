//! Scenario harnesses: the real protocol state machines driven in the
//! simulator (virtual time) for a whole scenario, with the measurement of
//! its outcome. The simulator templates (`sim-transfer`, `sim-multipath`,
//! `sim-priority`) and the emulator `priority` template (which shares the
//! report builder) run them.

pub mod priority_sim;
pub mod sim_cellular;
pub mod sim_endpoints;
pub mod sim_multipath;
pub mod sim_transfer;
