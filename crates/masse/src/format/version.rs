//! The format's version and the limits every structure is sized for (kept
//! apart from `mod.rs`, which only re-exports, so no structure file depends
//! on its parent).

/// Version written by this build. Devices with a higher version are refused.
/// Version 2 (this build) adds the pool's key-digest secret to the superblock
/// and a second copy of every band header; version-1 pools keep opening (with
/// the unkeyed digest they were created with).
pub const FORMAT_VERSION: u32 = 2;

/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 1024;
/// Longest value accepted (2 MiB minus room for the header and the longest key).
pub const MAX_VALUE_LEN: usize = (1 << 21) - 4096;
