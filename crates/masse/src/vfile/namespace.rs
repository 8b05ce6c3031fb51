//! The namespace: names in directories and the inodes they lead to — lookup,
//! listing, create/mkdir/symlink, link, unlink/rmdir, and inode numbers
//! (docs/vfile.md §2-3). Each change is one atomic batch under the namespace
//! lock, installed in DRAM only once it is durable. Rename is in `rename.rs`;
//! the bucket pages a directory's names live in are in `dir.rs`; what becomes
//! of an inode whose last name goes while it is open, in `orphan.rs`.

use super::batch::Batch;
use super::dir::{self, bucket_count, DirPages};
use super::error::{VfsError, VfsResult};
use super::node::{Node, NodeState};
use super::record::{
    decode_page, encode_orphans, encode_page, inode_key, orphan_key, page_key, super_key, DEntry,
    Inode, Kind, Super, Time,
};
use super::{Attr, Shared, Vfs, MAX_NAME_LEN, MAX_SYMLINK_LEN};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Inode numbers reserved per durable superblock update.
const INO_LEASE: u64 = 1024;

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Name.
    pub name: Vec<u8>,
    /// Inode number.
    pub ino: u64,
    /// Kind.
    pub kind: Kind,
}

/// A directory plan's result, as `Plan::into_pages` gives it: level, split
/// pointer, entry count, and the pages it touched.
pub(super) type Planned = (u8, u32, u64, Vec<(u32, Vec<DEntry>)>);

/// A name that may be created or be the target of a rename.
pub(super) fn check_name(name: &[u8]) -> VfsResult<()> {
    if name.is_empty() {
        return Err(VfsError::Invalid("empty name"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(VfsError::NameTooLong(name.len()));
    }
    if name == b"." || name == b".." {
        return Err(VfsError::Invalid(
            "`.` and `..` cannot be created or removed",
        ));
    }
    if name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(VfsError::Invalid("a name cannot contain `/` or NUL"));
    }
    Ok(())
}

/// A name that unlink or rmdir may remove.
fn check_removable(name: &[u8]) -> VfsResult<()> {
    if name.len() > MAX_NAME_LEN {
        return Err(VfsError::NameTooLong(name.len()));
    }
    if name == b"." {
        return Err(VfsError::Invalid("cannot remove `.`"));
    }
    if name == b".." {
        return Err(VfsError::NotEmpty);
    }
    check_name(name)
}

/// Directory inode `base` with a plan's result in it, changed at `now`.
pub(super) fn dir_inode(base: &Inode, r: &Planned, now: Time) -> Inode {
    let mut d = base.clone();
    d.level = r.0;
    d.split = r.1;
    d.size = r.2;
    d.mtime = now;
    d.ctime = now;
    d
}

/// Install a directory's planned pages and inode in DRAM (after they are durable).
pub(super) fn install_dir(st: &mut NodeState, r: Planned, inode: Inode) {
    if let Some(p) = st.dir.as_mut() {
        p.apply(r.0, r.1, r.2, r.3);
    }
    st.disk = inode.clone();
    st.inode = inode;
}

impl Vfs {
    /// Look `name` up in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> VfsResult<Attr> {
        if name.len() > MAX_NAME_LEN {
            return Err(VfsError::NameTooLong(name.len()));
        }
        let ino = {
            let d = self.sh.node(parent)?;
            if name == b"." {
                parent
            } else if name == b".." {
                let st = d.st.read();
                st.live()?;
                st.inode.parent
            } else {
                self.sh
                    .with_dir(&d, |p| p.find(name).map(|e| e.ino))?
                    .ok_or(VfsError::NotFound)?
            }
        };
        self.getattr(ino)
    }

    /// List directory `ino` (without `.` and `..`), a snapshot.
    pub fn readdir(&self, ino: u64) -> VfsResult<Vec<DirEntry>> {
        let d = self.sh.node(ino)?;
        self.sh.with_dir(&d, |p| {
            p.list()
                .map(|e| DirEntry {
                    name: e.name.clone(),
                    ino: e.ino,
                    kind: e.kind,
                })
                .collect()
        })
    }

    /// Create a regular file; `Exists` if the name is taken.
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> VfsResult<Attr> {
        self.sh
            .make(parent, name, Inode::new(Kind::File, perm, uid, gid, parent))
    }

    /// Create a directory.
    pub fn mkdir(
        &self,
        parent: u64,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> VfsResult<Attr> {
        self.sh
            .make(parent, name, Inode::new(Kind::Dir, perm, uid, gid, parent))
    }

    /// Create a symbolic link to `target`.
    pub fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> VfsResult<Attr> {
        if target.is_empty() || target.len() > MAX_SYMLINK_LEN {
            return Err(VfsError::Invalid("symlink target must be 1-4095 bytes"));
        }
        let mut i = Inode::new(Kind::Symlink, 0o777, uid, gid, parent);
        i.target = target.to_vec();
        i.size = target.len() as u64;
        self.sh.make(parent, name, i)
    }

    /// The target of symlink `ino`.
    pub fn readlink(&self, ino: u64) -> VfsResult<Vec<u8>> {
        let n = self.sh.node(ino)?;
        let st = n.st.read();
        st.live()?;
        if st.inode.kind != Kind::Symlink {
            return Err(VfsError::Invalid("not a symbolic link"));
        }
        Ok(st.inode.target.clone())
    }

    /// Add a hard link `newparent/newname` to file `ino`.
    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> VfsResult<Attr> {
        self.sh.link(ino, newparent, newname)
    }

    /// Remove the name `parent/name` (not a directory). The inode's data is kept
    /// while it is open and freed at the last release.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> VfsResult<()> {
        self.sh.remove(parent, name, false)
    }

    /// Remove the empty directory `parent/name`.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> VfsResult<()> {
        self.sh.remove(parent, name, true)
    }
}

impl Shared {
    /// Read every bucket page of directory `ino`.
    fn load_pages(&self, ino: u64, inode: &Inode) -> VfsResult<DirPages> {
        let nb = bucket_count(inode.level, inode.split);
        let mut pages = Vec::with_capacity(nb as usize);
        let mut entries = 0u64;
        for b in 0..nb {
            let p = match self.db.get(&page_key(ino, b))? {
                Some(v) => decode_page(&v)?,
                None => Vec::new(),
            };
            entries += p.len() as u64;
            pages.push(p);
        }
        Ok(DirPages {
            level: inode.level,
            split: inode.split,
            pages,
            entries,
        })
    }

    /// Run `f` on the pages of directory node `d`, loading them first if needed.
    pub(super) fn with_dir<T>(&self, d: &Node, f: impl FnOnce(&DirPages) -> T) -> VfsResult<T> {
        {
            let st = d.st.read();
            st.live()?;
            if st.inode.kind != Kind::Dir {
                return Err(VfsError::NotDir);
            }
            if let Some(p) = &st.dir {
                return Ok(f(p));
            }
        }
        let mut st = d.st.write();
        self.ensure_pages(d.ino, &mut st)?;
        match &st.dir {
            Some(p) => Ok(f(p)),
            None => Err(VfsError::NotDir),
        }
    }

    /// Load the pages of directory `ino` unless they are loaded (NotDir for
    /// another kind).
    pub(super) fn ensure_pages(&self, ino: u64, st: &mut NodeState) -> VfsResult<()> {
        st.live()?;
        if st.inode.kind != Kind::Dir {
            return Err(VfsError::NotDir);
        }
        if st.dir.is_none() {
            st.dir = Some(self.load_pages(ino, &st.inode)?);
        }
        Ok(())
    }

    /// A new inode number, never handed out before, crash or not.
    fn alloc_ino(&self) -> VfsResult<u64> {
        let mut a = self.ino.lock();
        if a.0 >= a.1 {
            // Lease a range durably before handing any of it out, so a number is
            // never reused after a crash.
            let limit = a.1 + INO_LEASE;
            let s = Super {
                chunk_size: self.cs as u32,
                ino_limit: limit,
                piece: self.codec.piece,
            };
            self.db.put(&super_key(), &s.encode())?;
            a.1 = limit;
        }
        let i = a.0;
        a.0 += 1;
        Ok(i)
    }

    /// Put a plan's touched pages of directory `dir` into `b` (an empty page is
    /// deleted); NoSpace for a page past the engine's value limit.
    pub(super) fn page_ops(
        &self,
        b: &mut Batch,
        dir: u64,
        pages: &[(u32, Vec<DEntry>)],
    ) -> VfsResult<()> {
        for (bk, p) in pages {
            let v = encode_page(p);
            if v.len() > crate::MAX_VALUE_LEN {
                return Err(VfsError::NoSpace(
                    "a directory bucket page is full (too many long names hash alike)".into(),
                ));
            }
            if p.is_empty() {
                b.del(&page_key(dir, *bk))?;
            } else {
                b.put(&page_key(dir, *bk), &v)?;
            }
        }
        Ok(())
    }

    /// create / mkdir / symlink.
    fn make(&self, parent: u64, name: &[u8], mut inode: Inode) -> VfsResult<Attr> {
        check_name(name)?;
        let _ns = self.ns.lock();
        let d = self.node(parent)?;
        let mut ds = d.st.write();
        self.ensure_pages(parent, &mut ds)?;
        let pages = ds.dir.as_ref().ok_or(VfsError::NotDir)?;
        if pages.find(name).is_some() {
            return Err(VfsError::Exists);
        }
        let ino = self.alloc_ino()?;
        inode.parent = parent;
        let mut plan = pages.plan();
        plan.insert(dir::entry(name, ino, inode.kind));
        let r = plan.into_pages();
        let mut dnode = dir_inode(&ds.inode, &r, inode.mtime);
        if inode.kind == Kind::Dir {
            dnode.nlink += 1;
        }
        let mut b = Batch::new();
        self.page_ops(&mut b, parent, &r.3)?;
        b.put(&inode_key(parent), &dnode.encode())?;
        b.put(&inode_key(ino), &inode.encode())?;
        b.commit(&self.db, self.max_batch)?;
        self.c.namespace_ops.fetch_add(1, Relaxed);
        install_dir(&mut ds, r, dnode);
        let n = self.new_node(ino, inode);
        let st = n.st.read();
        Ok(st.attr(ino, self.cs))
    }

    /// [`Vfs::link`].
    fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> VfsResult<Attr> {
        check_name(newname)?;
        let _ns = self.ns.lock();
        let f = self.node(ino)?;
        let d = self.node(newparent)?;
        if Arc::ptr_eq(&f, &d) {
            return Err(VfsError::IsDir);
        }
        let mut ds = d.st.write();
        self.ensure_pages(newparent, &mut ds)?;
        let mut fs = f.st.write();
        fs.live()?;
        if fs.inode.kind == Kind::Dir {
            return Err(VfsError::IsDir);
        }
        if fs.inode.nlink == 0 {
            return Err(VfsError::NotFound);
        }
        let pages = ds.dir.as_ref().ok_or(VfsError::NotDir)?;
        if pages.find(newname).is_some() {
            return Err(VfsError::Exists);
        }
        let now = Time::now();
        let mut plan = pages.plan();
        plan.insert(dir::entry(newname, ino, fs.inode.kind));
        let r = plan.into_pages();
        let dnode = dir_inode(&ds.inode, &r, now);
        let mut fdisk = fs.disk.clone();
        fdisk.nlink += 1;
        fdisk.ctime = now;
        let mut b = Batch::new();
        self.page_ops(&mut b, newparent, &r.3)?;
        b.put(&inode_key(newparent), &dnode.encode())?;
        b.put(&inode_key(ino), &fdisk.encode())?;
        b.commit(&self.db, self.max_batch)?;
        self.c.namespace_ops.fetch_add(1, Relaxed);
        install_dir(&mut ds, r, dnode);
        fs.disk = fdisk;
        fs.inode.nlink += 1;
        fs.inode.ctime = now;
        Ok(fs.attr(ino, self.cs))
    }

    /// unlink (`want_dir` false) or rmdir (`want_dir` true).
    fn remove(&self, parent: u64, name: &[u8], want_dir: bool) -> VfsResult<()> {
        check_removable(name)?;
        let _ns = self.ns.lock();
        let d = self.node(parent)?;
        let mut ds = d.st.write();
        self.ensure_pages(parent, &mut ds)?;
        let e = ds
            .dir
            .as_ref()
            .and_then(|p| p.find(name).cloned())
            .ok_or(VfsError::NotFound)?;
        match (want_dir, e.kind == Kind::Dir) {
            (true, false) => return Err(VfsError::NotDir),
            (false, true) => return Err(VfsError::IsDir),
            _ => {}
        }
        let c = self.node(e.ino)?;
        let mut cs = c.st.write();
        cs.live()?;
        if want_dir {
            self.check_empty(e.ino, &mut cs)?;
        }
        let now = Time::now();
        let pages = ds.dir.as_ref().ok_or(VfsError::NotDir)?;
        let mut plan = pages.plan();
        plan.remove(name);
        let r = plan.into_pages();
        let mut dnode = dir_inode(&ds.inode, &r, now);
        if want_dir {
            dnode.nlink = dnode.nlink.saturating_sub(1);
        }
        let mut b = Batch::new();
        self.page_ops(&mut b, parent, &r.3)?;
        let mut orph = self.orphans.lock();
        let (cdisk, new_orph) = self.drop_name(&mut b, e.ino, &cs, want_dir, &orph, now)?;
        b.put(&inode_key(parent), &dnode.encode())?;
        b.commit(&self.db, self.max_batch)?;
        self.c.namespace_ops.fetch_add(1, Relaxed);
        if let Some(o) = new_orph {
            *orph = o;
        }
        drop(orph);
        install_dir(&mut ds, r, dnode);
        drop(ds);
        let purge = self.name_dropped(e.ino, &mut cs, cdisk, now);
        drop(cs);
        if purge {
            self.purge(e.ino)?;
        }
        Ok(())
    }

    /// NotEmpty unless directory `ino` has no entries.
    pub(super) fn check_empty(&self, ino: u64, st: &mut NodeState) -> VfsResult<()> {
        self.ensure_pages(ino, st)?;
        if st.dir.as_ref().map(|p| p.entries).unwrap_or(0) > 0 {
            return Err(VfsError::NotEmpty);
        }
        Ok(())
    }

    /// Put into `b` what removing a name of inode `ino` (state `st`) does to it:
    /// a directory (`is_dir`, empty) is deleted with its pages; a file or symlink
    /// loses a link, and at its last joins the orphan list `orph` (purged at the
    /// last release, or at the next open after a crash). Returns the inode's new
    /// durable record (`None` for a directory) and the new orphan list if it grew.
    pub(super) fn drop_name(
        &self,
        b: &mut Batch,
        ino: u64,
        st: &NodeState,
        is_dir: bool,
        orph: &[u64],
        now: Time,
    ) -> VfsResult<(Option<Inode>, Option<Vec<u64>>)> {
        if is_dir {
            b.del(&inode_key(ino))?;
            for bk in 0..bucket_count(st.inode.level, st.inode.split) {
                b.del(&page_key(ino, bk))?;
            }
            return Ok((None, None));
        }
        let mut disk = st.disk.clone();
        disk.nlink = disk.nlink.saturating_sub(1);
        disk.ctime = now;
        let mut new_orph = None;
        if disk.nlink == 0 {
            let mut o = orph.to_vec();
            o.push(ino);
            b.put(&orphan_key(), &encode_orphans(&o))?;
            new_orph = Some(o);
        }
        b.put(&inode_key(ino), &disk.encode())?;
        Ok((Some(disk), new_orph))
    }

    /// Install in DRAM a [`Shared::drop_name`] that is now durable: a deleted
    /// directory (`disk` is `None`) is gone; a file takes its new durable inode.
    /// Returns whether the inode is to be purged now (no link, no open handle).
    pub(super) fn name_dropped(
        &self,
        ino: u64,
        st: &mut NodeState,
        disk: Option<Inode>,
        now: Time,
    ) -> bool {
        let Some(disk) = disk else {
            st.gone = true;
            st.dir = None;
            self.nodes.lock().remove(&ino);
            return false;
        };
        st.inode.nlink = disk.nlink;
        st.inode.ctime = now;
        st.disk = disk;
        st.inode.nlink == 0 && st.open == 0
    }
}
