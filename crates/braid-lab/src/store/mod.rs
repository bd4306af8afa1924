//! (being written: the SQLite store. The signatures below are the contract
//! the runner and analysis code against.)
