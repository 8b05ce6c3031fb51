//! The on-disk format, in one place. Described for humans in `docs/format.md`;
//! any change here must bump [`FORMAT_VERSION`] (or, for the checkpoint header
//! and payload, [`CHECKPOINT_VERSION`]) and update that document.
//!
//! All integers are little-endian. Every structure carries a checksum
//! (crc32c for small structures, xxh3-64 for checkpoint payloads) and is
//! rejected, never trusted, when the checksum fails.
//!
//! One file per structure family, in the order a device is laid out:
//! `superblock` (superblock, geometry, epoch block), `pad` (write-pad header
//! and batches), `checkpoint` (checkpoint header and band table), `band`
//! (band header), `segment` (segment header, summary and footer), `record`
//! (records inside segments and batches) and `loc` (the index's packed record
//! address). `bytes` holds the little-endian cursors they all encode with;
//! `version` the format version and the key and value limits.
//! Everything is re-exported here, so callers name `format::X` only.

mod band;
mod bytes;
mod checkpoint;
mod codec;
mod loc;
mod pad;
mod record;
mod segment;
mod superblock;
pub mod v3;
pub mod v3seg;
mod version;

pub use band::{BandHeader, BAND_FREE, BAND_HEADER_COPY, BAND_IN_USE};
pub use checkpoint::{BandRecord, CheckpointHeader, BAND_RECORD, CKPT_HEADER};
pub use codec::{record_footprint, Codec, Rec};
pub use loc::{Loc, MAX_LOC_OFFSET, MAX_SLOTS};
pub use pad::{
    encode_batch, peek_batch, verify_batch, BatchHeader, PadHeader, BATCH_HEADER, BATCH_WRAP,
    PAD_HEADER_SIZE,
};
pub use record::{
    decode_record, encode_record, peek_record, record_len, seg_tag, RecordHeader, RECORD_HEADER,
    REC_CRC_AT, REC_FLAGS_AT, REC_KEY_LEN_AT, REC_MORE, REC_SEG_TAG_AT, REC_SEQ_AT, REC_TOMBSTONE,
    REC_VAL_LEN_AT,
};
pub use segment::{
    decode_footer, decode_summary, encode_segment_tail, SegmentFooter, SegmentHeader, SummaryEntry,
    SEG_FOOTER, SEG_HEADER, SUMMARY_ENTRY,
};
pub use superblock::{
    DamageRecord, EpochBlock, Geometry, Mode, Role, Superblock, SuperblockProbe, EPOCH_AREA,
    EPOCH_OFFSET, SB_KEY_DIGEST_AT, SUPERBLOCK_AREA, SUPERBLOCK_SIZE,
};
pub use version::{CHECKPOINT_VERSION, FORMAT_VERSION, MAX_KEY_LEN, MAX_VALUE_LEN};
