//! The format's version and the limits every structure is sized for (kept
//! apart from `mod.rs`, which only re-exports, so no structure file depends
//! on its parent).

/// Version written by this build. Devices with a higher version are refused.
/// Version 2 (this build) adds the pool's key-digest secret to the superblock
/// and a second copy of every band header; version-1 pools keep opening (with
/// the unkeyed digest they were created with).
pub const FORMAT_VERSION: u32 = 2;

/// Version of the checkpoint header written by this build, kept apart from
/// [`FORMAT_VERSION`] because a checkpoint is a cache of the log, not part of
/// it: a build that cannot read one scans instead. Version 3 (this build)
/// stores index shard images of packed quotient slots; headers of version ≤ 2
/// hold images of 16-byte slots, which this build converts at load. Older
/// builds refuse version 3 and fall back to a full scan.
pub const CHECKPOINT_VERSION: u32 = 3;

/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 1024;
/// Longest value accepted (2 MiB minus room for the header and the longest key).
pub const MAX_VALUE_LEN: usize = (1 << 21) - 4096;
