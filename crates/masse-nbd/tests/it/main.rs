//! The integration tests of `masse-nbd`, in one binary: one test binary per
//! crate links once instead of once per file (rust-analyzer's and cargo's
//! practice). Each file is a module; a test is named `file::test`, e.g.
//! `cargo test --release -p masse-nbd --test it handshake_hostile::`.
//!
//! `hostile_clients.rs` stays a binary of its own: it measures this process's
//! resident memory while hostile clients connect, which tests running beside
//! it in one process would disturb.

#[path = "../common/mod.rs"]
mod common;

mod handshake_hostile;
mod shutdown_inflight;
mod transmission;
