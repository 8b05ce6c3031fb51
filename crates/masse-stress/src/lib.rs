//! # masse-stress — crash-consistency and fault-injection harness
//!
//! In the manner of RocksDB's `db_stress` + crash test and TigerBeetle's
//! simulator: random operations from many threads against an expected-state
//! [`oracle::Oracle`] kept outside the pool, with a hang [`watchdog`]; real
//! SIGKILLs of a child process ([`crash`]); injected device faults on
//! in-memory devices ([`faults`]); every run replayable from its seed.
//! [`enumerate`] runs deterministic scenarios on recording devices ([`trace`])
//! and checks the pool after a power cut at every device write and sync of
//! their traces, torn variants included; [`damage`] flips bytes in every kind
//! of metadata block and checks what survives. [`fuzz`] holds the bodies of
//! the fuzz targets (in `fuzz/`), so the seed corpus also runs as an ordinary
//! test.

#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod crash;
pub mod damage;
pub mod enumerate;
pub mod faults;
pub mod fuzz;
pub mod gen;
pub mod oracle;
pub mod trace;
pub mod watchdog;
pub mod workload;
