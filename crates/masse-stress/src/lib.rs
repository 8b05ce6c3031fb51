//! # masse-stress — crash-consistency and fault-injection harness
//!
//! In the manner of RocksDB's `db_stress` + crash test and TigerBeetle's
//! simulator: random operations from many threads against an expected-state
//! [`oracle::Oracle`] kept outside the pool; real SIGKILLs of a child process
//! ([`crash`]); injected device faults on in-memory devices ([`faults`]); every
//! run replayable from its seed. [`trace`] records every device write and sync of
//! a run and rebuilds the pool after a power cut at any of them. [`fuzz`] holds the bodies of the fuzz targets
//! (in `fuzz/`), so the seed corpus also runs as an ordinary test.

#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod crash;
pub mod faults;
pub mod fuzz;
pub mod gen;
pub mod oracle;
pub mod trace;
pub mod workload;
