//! The built-in templates: the measurements behind `braid bench` (over the
//! emulator or loopback) and the simulator scenarios (virtual time).
//!
//! Each template lives in its own module; [`all`] lists them.

use std::sync::Arc;

use super::Template;

/// Every built-in template, in the order `braid lab templates` lists them.
pub fn all() -> Vec<Arc<dyn Template>> {
    vec![]
}
