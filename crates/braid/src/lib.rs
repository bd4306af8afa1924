//! Facade (in progress).
