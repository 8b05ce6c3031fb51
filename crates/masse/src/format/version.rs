//! The format's version and the limits every structure is sized for (kept
//! apart from `mod.rs`, which only re-exports, so no structure file depends
//! on its parent).

/// Newest version this build writes; devices with a higher version are
/// refused. Version 5 (this build's default for new pools) keeps version 4's
/// records and footers (their version fields say 4) and adds two header
/// fields recovery judges torn bursts by: `prev_band` in segment headers and
/// `freed_after` in FREE band headers (docs/format.md §1, issue 44). This
/// build writes them into pools of every version; the version gates out
/// older builds, whose judgement a band freed by GC can fool. Version 4 is version 3 with
/// the seq chains of records and summaries following each record
/// (`v3::SeqRule::Follow`), so GC moves store small seq deltas; version 3 has
/// the leaner record, block marks and 12-byte summary entries of `v3.rs`
/// (and pools of version 3 keep its chain rule); version 2 added
/// the pool's key-digest secret to the superblock and a second copy of every
/// band header. Pools of versions 1 and 2 keep opening and writing their own
/// record format ([`crate::format::Codec`]); version-1 pools keep the unkeyed
/// digest they were created with. The version fields of segment, band and
/// pad headers record the build that wrote them and are not read.
pub const FORMAT_VERSION: u32 = 5;

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
