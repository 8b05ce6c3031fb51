//! A write batch that counts its encoded size, so a namespace change too big
//! for one atomic batch is refused (NoSpace) before it reaches the engine, and
//! write-outs can cut their batches at a chosen size.

use super::error::{VfsError, VfsResult};
use crate::{Db, WriteBatch};

/// Encoded size of a record in a batch (header + key + value, 8-byte aligned).
pub(super) fn rec_cost(k: usize, v: usize) -> usize {
    (24 + k + v).div_ceil(8) * 8
}

/// A batch that knows its size.
pub(super) struct Batch {
    b: WriteBatch,
    /// Encoded bytes so far.
    pub(super) bytes: usize,
}

impl Batch {
    pub(super) fn new() -> Batch {
        Batch {
            b: WriteBatch::new(),
            bytes: 0,
        }
    }
    pub(super) fn put(&mut self, k: &[u8], v: &[u8]) -> VfsResult<()> {
        self.bytes += rec_cost(k.len(), v.len());
        self.b.put(k, v)?;
        Ok(())
    }
    pub(super) fn del(&mut self, k: &[u8]) -> VfsResult<()> {
        self.bytes += rec_cost(k.len(), 0);
        self.b.delete(k)?;
        Ok(())
    }
    pub(super) fn commit(self, db: &Db, max: usize) -> VfsResult<()> {
        if self.bytes > max {
            return Err(VfsError::NoSpace(format!(
                "one metadata change needs {} bytes, more than the pool's largest atomic batch ({max})",
                self.bytes
            )));
        }
        db.write(self.b)?;
        Ok(())
    }
}
