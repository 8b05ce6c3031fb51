//! Rename: move a name to another directory or within one, replacing a target
//! of a compatible kind, in one atomic batch (docs/vfile.md §3).
//!
//! It goes in steps: find both names and refuse what POSIX refuses
//! ([`Shared::rename_allowed`]); lock the parents in inode order, then the moved
//! inode and the target ([`Shared::rename_lock`]); put the new pages and inodes
//! into one batch and commit it ([`Shared::rename_batch`]); and only then
//! install the result in DRAM ([`Shared::rename_install`]).

use super::batch::Batch;
use super::dir;
use super::error::{VfsError, VfsResult};
use super::namespace::{check_name, dir_inode, install_dir, Planned};
use super::node::{Node, NodeState};
use super::record::{inode_key, DEntry, Inode, Kind, Time};
use super::{Shared, Vfs, ROOT_INO};
use parking_lot::RwLockWriteGuard;
use std::sync::atomic::Ordering::Relaxed;

/// A node's state, locked for writing.
type Locked<'a> = RwLockWriteGuard<'a, NodeState>;

/// A directory's planned pages and its new inode.
type DirChange = (Planned, Inode);

/// One rename's names and the entries they found.
struct Move<'a> {
    parent: u64,
    name: &'a [u8],
    newparent: u64,
    newname: &'a [u8],
    /// The entry moved.
    src: DEntry,
    /// The entry it replaces, if the new name is taken.
    tgt: Option<DEntry>,
}

impl Move<'_> {
    fn same_dir(&self) -> bool {
        self.parent == self.newparent
    }
    fn is_dir(&self) -> bool {
        self.src.kind == Kind::Dir
    }
    fn tgt_dir(&self) -> bool {
        self.tgt
            .as_ref()
            .map(|t| t.kind == Kind::Dir)
            .unwrap_or(false)
    }
}

/// The locks a rename holds from building its batch to installing it.
struct Locks<'a> {
    /// The source directory.
    g1: Locked<'a>,
    /// The destination directory, when it is another one.
    g2: Option<Locked<'a>>,
    /// The moved inode.
    ms: Locked<'a>,
    /// The replaced target.
    ts: Option<Locked<'a>>,
}

/// What a rename's batch made durable, to be installed in DRAM.
struct Done {
    now: Time,
    /// The source directory.
    src_dir: DirChange,
    /// The destination directory, when it is another one.
    dst_dir: Option<DirChange>,
    /// The moved inode.
    mdisk: Inode,
    /// The replaced target's inode when it is a file (`None` for a directory,
    /// which is deleted).
    tdisk: Option<Inode>,
}

impl Vfs {
    /// Atomically rename `parent/name` to `newparent/newname`, replacing a target of
    /// a compatible kind (an empty directory for a directory). With `noreplace`, an
    /// existing target is `Exists`.
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        noreplace: bool,
    ) -> VfsResult<()> {
        self.sh.rename(parent, name, newparent, newname, noreplace)
    }
}

impl Shared {
    /// [`Vfs::rename`].
    fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        noreplace: bool,
    ) -> VfsResult<()> {
        check_name(name)?;
        check_name(newname)?;
        let _ns = self.ns.lock();
        let sd = self.node(parent)?;
        let dd = self.node(newparent)?;
        let src = self
            .with_dir(&sd, |p| p.find(name).cloned())?
            .ok_or(VfsError::NotFound)?;
        let tgt = self.with_dir(&dd, |p| p.find(newname).cloned())?;
        if parent == newparent && name == newname {
            return Ok(());
        }
        let mv = Move {
            parent,
            name,
            newparent,
            newname,
            src,
            tgt,
        };
        if !self.rename_allowed(&mv, noreplace)? {
            return Ok(());
        }
        let moved = self.node(mv.src.ino)?;
        if mv.tgt.is_some() && mv.src.kind == Kind::File {
            // Replacing a file by a renamed one is the atomic-update idiom: write the
            // new file's data out first so the new name never shows a shorter file
            // (ext4's auto_da_alloc does the same).
            let mut ms = moved.st.write();
            self.flush_locked(mv.src.ino, &mut ms)?;
        }
        let tnode = match &mv.tgt {
            Some(t) => Some(self.node(t.ino)?),
            None => None,
        };
        let locks = self.rename_lock(&mv, &sd, &dd, &moved, tnode.as_deref())?;
        let done = self.rename_batch(&mv, &locks)?;
        self.rename_install(&mv, locks, done)
    }

    /// Whether the rename is to be done: an error for what POSIX refuses, and
    /// `false` for a rename onto another name of the same inode (POSIX says do
    /// nothing).
    fn rename_allowed(&self, mv: &Move, noreplace: bool) -> VfsResult<bool> {
        if let Some(t) = &mv.tgt {
            if noreplace {
                return Err(VfsError::Exists);
            }
            if t.ino == mv.src.ino {
                return Ok(false);
            }
            match (mv.is_dir(), t.kind == Kind::Dir) {
                (true, false) => return Err(VfsError::NotDir),
                (false, true) => return Err(VfsError::IsDir),
                _ => {}
            }
            if t.ino == mv.parent {
                return Err(VfsError::NotEmpty);
            }
        }
        if mv.is_dir() {
            self.check_not_under(mv.src.ino, mv.newparent)?;
        }
        Ok(true)
    }

    /// Refuse to move directory `dir` under itself: walk up from its destination.
    fn check_not_under(&self, dir: u64, dest: u64) -> VfsResult<()> {
        let mut cur = dest;
        loop {
            if cur == dir {
                return Err(VfsError::Invalid("cannot move a directory into itself"));
            }
            if cur == ROOT_INO {
                break;
            }
            let n = self.node(cur)?;
            let p = n.st.read().inode.parent;
            if p == cur {
                break;
            }
            cur = p;
        }
        Ok(())
    }

    /// Lock the parents in inode order, then the children: the moved inode and
    /// the target (NotEmpty for a target directory with entries).
    fn rename_lock<'a>(
        &self,
        mv: &Move,
        sd: &'a Node,
        dd: &'a Node,
        moved: &'a Node,
        tnode: Option<&'a Node>,
    ) -> VfsResult<Locks<'a>> {
        let (g1, g2) = if mv.same_dir() {
            (sd.st.write(), None)
        } else if mv.parent < mv.newparent {
            let a = sd.st.write();
            let b = dd.st.write();
            (a, Some(b))
        } else {
            let b = dd.st.write();
            let a = sd.st.write();
            (a, Some(b))
        };
        let ms = moved.st.write();
        ms.live()?;
        let ts = match tnode {
            Some(t) => {
                let mut g = t.st.write();
                g.live()?;
                if g.inode.kind == Kind::Dir {
                    self.check_empty(t.ino, &mut g)?;
                }
                Some(g)
            }
            None => None,
        };
        Ok(Locks { g1, g2, ms, ts })
    }

    /// Build the rename's batch and commit it: the directories' pages and
    /// inodes, the moved inode, and the replaced target.
    fn rename_batch(&self, mv: &Move, l: &Locks) -> VfsResult<Done> {
        let now = Time::now();
        let mut b = Batch::new();
        let mut orph = self.orphans.lock();
        let (src_dir, dst_dir) = self.rename_dirs(&mut b, mv, &l.g1, l.g2.as_deref(), now)?;

        // The moved inode: ctime, and its parent pointer when it is a directory.
        let mut mdisk = l.ms.disk.clone();
        mdisk.ctime = now;
        if mv.is_dir() {
            mdisk.parent = mv.newparent;
        }
        b.put(&inode_key(mv.src.ino), &mdisk.encode())?;

        // The replaced target.
        let (tdisk, new_orph) = match (&mv.tgt, l.ts.as_deref()) {
            (Some(t), Some(tg)) => self.drop_name(&mut b, t.ino, tg, mv.tgt_dir(), &orph, now)?,
            _ => (None, None),
        };
        b.commit(&self.db, self.max_batch)?;
        self.c.namespace_ops.fetch_add(1, Relaxed);
        if let Some(o) = new_orph {
            *orph = o;
        }
        Ok(Done {
            now,
            src_dir,
            dst_dir,
            mdisk,
            tdisk,
        })
    }

    /// Put the directories' changed pages and inodes into `b`: the name leaves
    /// the source and enters the destination (the same directory, or another);
    /// link counts follow a moved directory's `..` and a replaced directory.
    fn rename_dirs(
        &self,
        b: &mut Batch,
        mv: &Move,
        g1: &NodeState,
        g2: Option<&NodeState>,
        now: Time,
    ) -> VfsResult<(DirChange, Option<DirChange>)> {
        let mut p1 = g1.dir.as_ref().ok_or(VfsError::NotDir)?.plan();
        p1.remove(mv.name);
        let entry = dir::entry(mv.newname, mv.src.ino, mv.src.kind);
        let (r1, sinode, dst) = if mv.same_dir() {
            p1.insert(entry);
            let r1 = p1.into_pages();
            let mut sinode = dir_inode(&g1.inode, &r1, now);
            if mv.tgt_dir() {
                sinode.nlink = sinode.nlink.saturating_sub(1);
            }
            (r1, sinode, None)
        } else {
            let r1 = p1.into_pages();
            let mut sinode = dir_inode(&g1.inode, &r1, now);
            let g2 = g2.ok_or(VfsError::NotDir)?;
            let mut p2 = g2.dir.as_ref().ok_or(VfsError::NotDir)?.plan();
            p2.insert(entry);
            let r2 = p2.into_pages();
            let mut di = dir_inode(&g2.inode, &r2, now);
            if mv.is_dir() {
                sinode.nlink = sinode.nlink.saturating_sub(1);
                di.nlink += 1;
            }
            if mv.tgt_dir() {
                di.nlink = di.nlink.saturating_sub(1);
            }
            (r1, sinode, Some((r2, di)))
        };
        self.page_ops(b, mv.parent, &r1.3)?;
        if let Some((r2, di)) = &dst {
            self.page_ops(b, mv.newparent, &r2.3)?;
            b.put(&inode_key(mv.newparent), &di.encode())?;
        }
        b.put(&inode_key(mv.parent), &sinode.encode())?;
        Ok(((r1, sinode), dst))
    }

    /// Install a durable rename in DRAM, releasing the directories and the moved
    /// inode before the target; then purge a replaced file left with no link and
    /// no open handle.
    fn rename_install(&self, mv: &Move, l: Locks, d: Done) -> VfsResult<()> {
        let Locks {
            mut g1,
            mut g2,
            mut ms,
            mut ts,
        } = l;
        let (r1, sinode) = d.src_dir;
        install_dir(&mut g1, r1, sinode);
        if let (Some(g2), Some((r2, di))) = (g2.as_mut(), d.dst_dir) {
            install_dir(g2, r2, di);
        }
        ms.inode.ctime = d.now;
        ms.inode.parent = d.mdisk.parent;
        ms.disk = d.mdisk;
        drop(ms);
        drop(g1);
        drop(g2);
        let mut purge = None;
        if let (Some(t), Some(tg)) = (&mv.tgt, ts.as_mut()) {
            if self.name_dropped(t.ino, tg, d.tdisk, d.now) {
                purge = Some(t.ino);
            }
        }
        drop(ts);
        if let Some(i) = purge {
            self.purge(i)?;
        }
        Ok(())
    }
}
