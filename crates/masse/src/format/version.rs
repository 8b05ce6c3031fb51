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
/// it: a build that cannot read one scans instead. Version 4 (this build)
/// packs locations as `slot:29 | offset:19 | lenc:12 | tombstone:1`
/// ([`crate::format::Loc`]). Versions 3 (the same packed images with
/// `offset/8 | len8` locations) and ≤ 2 (16-byte slots) are skipped: their
/// lengths are rounded to 8, so the first open after an upgrade scans the log
/// once. Older builds ignore a newer version and scan as well.
pub const CHECKPOINT_VERSION: u32 = 4;

/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 1024;
/// Longest value accepted (2 MiB minus room for the header and the longest key).
pub const MAX_VALUE_LEN: usize = (1 << 21) - 4096;
