//! The integration tests of `masse-resp`, in one binary: one test binary per
//! crate links once instead of once per file (rust-analyzer's and cargo's
//! practice). Each file is a module; a test is named `file::test`, e.g.
//! `cargo test --release -p masse-resp --test it hostile::`.

mod common;

mod hostile;
mod protocol;
