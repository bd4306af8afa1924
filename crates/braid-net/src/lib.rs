//! Driver (in progress).
