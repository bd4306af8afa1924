//! Link model and spec syntax (in progress).
