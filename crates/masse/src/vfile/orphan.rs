//! Open handles and orphans: an inode whose last name goes while it is open
//! keeps its data until the last release. It waits on the orphan list (a
//! durable record), so that a crash in between leaves it to be purged at the
//! next open instead of leaking its chunks.

use super::batch::Batch;
use super::error::{VfsError, VfsResult};
use super::record::{decode_orphans, encode_orphans, inode_key, orphan_key, Kind};
use super::{Attr, Shared, Vfs};
use crate::Db;
use std::sync::atomic::Ordering::Relaxed;

/// The orphan list as durable: inodes to purge when the file layer opens.
pub(super) fn read_list(db: &Db) -> VfsResult<Vec<u64>> {
    Ok(match db.get(&orphan_key())? {
        Some(v) => decode_orphans(&v)?,
        None => Vec::new(),
    })
}

impl Vfs {
    /// Note an open handle of `ino` (its data outlives an unlink until released).
    pub fn open_file(&self, ino: u64) -> VfsResult<Attr> {
        let n = self.sh.node(ino)?;
        let mut st = n.st.write();
        st.live()?;
        st.open += 1;
        Ok(st.attr(ino, self.sh.cs))
    }

    /// Close a handle opened with [`Vfs::open_file`]/[`Vfs::create`]: writes the file's
    /// buffered data out at the last close and frees an unlinked inode.
    pub fn release(&self, ino: u64) -> VfsResult<()> {
        let n = self.sh.node(ino)?;
        let purge = {
            let mut st = n.st.write();
            st.open = st.open.saturating_sub(1);
            if st.gone {
                return Ok(());
            }
            if st.open > 0 {
                return Ok(());
            }
            if st.inode.nlink == 0 {
                true
            } else {
                // Normally nothing is left: `flush` wrote it at close. A failure
                // here stays on the inode for the next writer to hear.
                self.sh.flush_locked(ino, &mut st)?;
                false
            }
        };
        if purge {
            self.sh.purge(ino)?;
        }
        Ok(())
    }
}

impl Shared {
    /// Delete every record of an inode without names, then drop it from the
    /// orphan list. Safe to repeat after a crash.
    pub(super) fn purge(&self, ino: u64) -> VfsResult<()> {
        let n = match self.node(ino) {
            Ok(n) => n,
            Err(VfsError::NotFound) => {
                // Already gone (a crash after the inode delete): just unlist it.
                return self.unlist_orphan(ino, None);
            }
            Err(e) => return Err(e),
        };
        let mut st = n.st.write();
        if st.gone {
            return Ok(());
        }
        self.discard_dirty(&mut st, |_| true);
        st.attr_dirty = false;
        st.dirty_since = None;
        st.wb_err = None;
        if st.inode.kind == Kind::File {
            let hi = st.disk.alloc_chunks.max(st.inode.alloc_chunks);
            self.delete_chunks(ino, 0, hi)?;
        }
        self.unlist_orphan(ino, Some(ino))?;
        st.gone = true;
        drop(st);
        self.nodes.lock().remove(&ino);
        self.c.purged.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Remove `ino` from the orphan list, deleting inode `del` in the same batch.
    fn unlist_orphan(&self, ino: u64, del: Option<u64>) -> VfsResult<()> {
        let mut o = self.orphans.lock();
        let mut nv: Vec<u64> = o.iter().copied().filter(|&x| x != ino).collect();
        let mut b = Batch::new();
        if let Some(d) = del {
            b.del(&inode_key(d))?;
        }
        if nv.len() != o.len() {
            if nv.is_empty() {
                b.del(&orphan_key())?;
            } else {
                b.put(&orphan_key(), &encode_orphans(&nv))?;
            }
        }
        if b.bytes > 0 {
            b.commit(&self.db, self.max_batch)?;
        }
        std::mem::swap(&mut *o, &mut nv);
        Ok(())
    }
}
