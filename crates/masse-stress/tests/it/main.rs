//! The integration tests of `masse-stress`, in one binary: one test binary per
//! crate links once instead of once per file (rust-analyzer's and cargo's
//! practice). Each file is a module; a test is named `file::test`, e.g.
//! `cargo test --release -p masse-stress --test it damage::`.

mod damage;
mod enumerate;
mod faults;
mod fuzz_corpus;
mod watchdog;
