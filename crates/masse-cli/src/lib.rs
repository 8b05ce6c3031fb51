//! Helpers shared by the `masse` command-line tool and its integration tests:
//! size and count parsing, a small deterministic PRNG, key distributions, and the keys and values
//! written by the hidden crash-test child `masse ack-writer`.

pub mod ack;
pub mod dbbench;
pub mod keydist;
pub mod media;
pub mod qos;
pub mod rng;
pub mod units;
