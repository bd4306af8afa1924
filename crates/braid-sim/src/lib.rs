//! Simulator (in progress).
