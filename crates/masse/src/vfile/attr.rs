//! Attributes: what `stat` reports ([`Attr`]) and what `setattr` changes
//! ([`SetAttr`]: chmod, chown, utimes, truncate).

use super::error::{VfsError, VfsResult};
use super::node::NodeState;
use super::record::{inode_key, Kind, Time};
use super::{Shared, Vfs, MAX_FILE_SIZE};

/// Attributes of an inode, as `stat` reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// Kind.
    pub kind: Kind,
    /// Permission bits (`0o7777`).
    pub perm: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Hard links.
    pub nlink: u32,
    /// Size in bytes (directories: number of entries).
    pub size: u64,
    /// 512-byte blocks allocated (holes take none; at most the size rounded up).
    pub blocks: u64,
    /// Preferred I/O size: the chunk size.
    pub blksize: u32,
    /// Access time (not updated by reads).
    pub atime: Time,
    /// Modification time.
    pub mtime: Time,
    /// Status change time.
    pub ctime: Time,
}

/// Attribute changes for [`Vfs::setattr`]; `None` leaves a field alone.
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    /// New permission bits.
    pub perm: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncate or extend with a hole).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<Time>,
    /// New modification time.
    pub mtime: Option<Time>,
}

impl Vfs {
    /// Attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> VfsResult<Attr> {
        let n = self.sh.node(ino)?;
        let st = n.st.read();
        st.live()?;
        Ok(st.attr(ino, self.sh.cs))
    }

    /// Change attributes; a size change truncates (durably, when shrinking) or
    /// extends with a hole.
    pub fn setattr(&self, ino: u64, a: &SetAttr) -> VfsResult<Attr> {
        self.sh.setattr(ino, a)
    }
}

impl Shared {
    /// [`Vfs::setattr`].
    pub(super) fn setattr(&self, ino: u64, a: &SetAttr) -> VfsResult<Attr> {
        let n = self.node(ino)?;
        let mut st = n.st.write();
        st.live()?;
        if let Some(size) = a.size {
            match st.inode.kind {
                Kind::File => {}
                Kind::Dir => return Err(VfsError::IsDir),
                Kind::Symlink => return Err(VfsError::Invalid("truncate of a symbolic link")),
            }
            if size > MAX_FILE_SIZE {
                return Err(VfsError::FileTooLarge);
            }
            self.truncate_locked(ino, &mut st, size)?;
        }
        let now = Time::now();
        let meta = a.perm.is_some()
            || a.uid.is_some()
            || a.gid.is_some()
            || a.atime.is_some()
            || a.mtime.is_some();
        if meta {
            {
                let i = &mut st.inode;
                if let Some(p) = a.perm {
                    i.perm = p & 0o7777;
                }
                if let Some(u) = a.uid {
                    i.uid = u;
                }
                if let Some(g) = a.gid {
                    i.gid = g;
                }
                if let Some(t) = a.atime {
                    i.atime = t;
                }
                if let Some(t) = a.mtime {
                    i.mtime = t;
                }
                i.ctime = now;
            }
            // Attribute changes are durable on return: write the durable inode with
            // them (buffered data and its size stay buffered).
            let mut d = st.disk.clone();
            d.perm = st.inode.perm;
            d.uid = st.inode.uid;
            d.gid = st.inode.gid;
            d.atime = st.inode.atime;
            d.mtime = st.inode.mtime;
            d.ctime = st.inode.ctime;
            self.db.put(&inode_key(ino), &d.encode())?;
            st.disk = d;
        }
        Ok(st.attr(ino, self.cs))
    }
}

impl NodeState {
    /// The inode as `stat` reports it.
    pub(super) fn attr(&self, ino: u64, cs: u64) -> Attr {
        let i = &self.inode;
        Attr {
            ino,
            kind: i.kind,
            perm: i.perm,
            uid: i.uid,
            gid: i.gid,
            nlink: i.nlink,
            size: i.size,
            blocks: self.blocks(cs),
            blksize: cs as u32,
            atime: i.atime,
            mtime: i.mtime,
            ctime: i.ctime,
        }
    }
    /// 512-byte blocks allocated: a file's stored and buffered-new chunks (holes
    /// take none), never more than its size rounded up.
    fn blocks(&self, cs: u64) -> u64 {
        let i = &self.inode;
        let size = i.size.div_ceil(512) * 512;
        if i.kind != Kind::File {
            return size / 512;
        }
        let chunks = i.stored_chunks.saturating_add(self.new_dirty);
        chunks.saturating_mul(cs).min(size) / 512
    }
}
