//! Rename: move a name to another directory or within one, replacing a target
//! of a compatible kind, in one atomic batch (docs/vfile.md §3).

use super::batch::Batch;
use super::dir::{self, bucket_count};
use super::error::{VfsError, VfsResult};
use super::namespace::check_name;
use super::record::{encode_orphans, inode_key, orphan_key, page_key, Kind, Time};
use super::{Shared, Vfs, ROOT_INO};
use std::sync::atomic::Ordering::Relaxed;

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
        if let Some(t) = &tgt {
            if noreplace {
                return Err(VfsError::Exists);
            }
            if t.ino == src.ino {
                // Two names of one inode: POSIX says do nothing.
                return Ok(());
            }
            match (src.kind == Kind::Dir, t.kind == Kind::Dir) {
                (true, false) => return Err(VfsError::NotDir),
                (false, true) => return Err(VfsError::IsDir),
                _ => {}
            }
            if t.ino == parent {
                return Err(VfsError::NotEmpty);
            }
        }
        if src.kind == Kind::Dir {
            // Refuse to move a directory under itself: walk up from the destination.
            let mut cur = newparent;
            loop {
                if cur == src.ino {
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
        }
        let moved = self.node(src.ino)?;
        if tgt.is_some() && src.kind == Kind::File {
            // Replacing a file by a renamed one is the atomic-update idiom: write the
            // new file's data out first so the new name never shows a shorter file
            // (ext4's auto_da_alloc does the same).
            let mut ms = moved.st.write();
            self.flush_locked(src.ino, &mut ms)?;
        }
        let tnode = match &tgt {
            Some(t) => Some(self.node(t.ino)?),
            None => None,
        };
        let same = parent == newparent;
        // Lock parents in inode order, then the children.
        let (mut g1, mut g2) = if same {
            (sd.st.write(), None)
        } else if parent < newparent {
            let a = sd.st.write();
            let b = dd.st.write();
            (a, Some(b))
        } else {
            let b = dd.st.write();
            let a = sd.st.write();
            (a, Some(b))
        };
        let mut ms = moved.st.write();
        ms.live()?;
        let mut ts = match &tnode {
            Some(t) => {
                let mut g = t.st.write();
                g.live()?;
                if g.inode.kind == Kind::Dir {
                    self.ensure_pages(t.ino, &mut g)?;
                    if g.dir.as_ref().map(|p| p.entries).unwrap_or(0) > 0 {
                        return Err(VfsError::NotEmpty);
                    }
                }
                Some(g)
            }
            None => None,
        };
        let now = Time::now();
        let is_dir = src.kind == Kind::Dir;
        let tgt_dir = tgt.as_ref().map(|t| t.kind == Kind::Dir).unwrap_or(false);
        let mut b = Batch::new();
        let mut orph = self.orphans.lock();
        let mut new_orph = None;

        // Directory pages and inodes.
        let src_pages = g1.dir.as_ref().ok_or(VfsError::NotDir)?;
        let mut p1 = src_pages.plan();
        p1.remove(name);
        let entry = dir::entry(newname, src.ino, src.kind);
        let (r1, r2);
        let mut sinode = g1.inode.clone();
        sinode.mtime = now;
        sinode.ctime = now;
        let mut dinode = None;
        if same {
            p1.insert(entry);
            r1 = p1.into_pages();
            r2 = None;
            if tgt_dir {
                sinode.nlink = sinode.nlink.saturating_sub(1);
            }
        } else {
            r1 = p1.into_pages();
            let g2r = g2.as_ref().ok_or(VfsError::NotDir)?;
            let mut p2 = g2r.dir.as_ref().ok_or(VfsError::NotDir)?.plan();
            p2.insert(entry);
            r2 = Some(p2.into_pages());
            let mut di = g2r.inode.clone();
            di.mtime = now;
            di.ctime = now;
            if is_dir {
                sinode.nlink = sinode.nlink.saturating_sub(1);
                di.nlink += 1;
            }
            if tgt_dir {
                di.nlink = di.nlink.saturating_sub(1);
            }
            dinode = Some(di);
        }
        sinode.level = r1.0;
        sinode.split = r1.1;
        sinode.size = r1.2;
        self.page_ops(&mut b, parent, &r1.3)?;
        if let (Some(r2), Some(di)) = (&r2, dinode.as_mut()) {
            di.level = r2.0;
            di.split = r2.1;
            di.size = r2.2;
            self.page_ops(&mut b, newparent, &r2.3)?;
            b.put(&inode_key(newparent), &di.encode())?;
        }
        b.put(&inode_key(parent), &sinode.encode())?;

        // The moved inode: ctime, and its parent pointer when it is a directory.
        let mut mdisk = ms.disk.clone();
        mdisk.ctime = now;
        if is_dir {
            mdisk.parent = newparent;
        }
        b.put(&inode_key(src.ino), &mdisk.encode())?;

        // The replaced target.
        let mut tdisk = None;
        if let (Some(t), Some(tg)) = (&tgt, ts.as_ref()) {
            if tgt_dir {
                b.del(&inode_key(t.ino))?;
                for bk in 0..bucket_count(tg.inode.level, tg.inode.split) {
                    b.del(&page_key(t.ino, bk))?;
                }
            } else {
                let mut td = tg.disk.clone();
                td.nlink = td.nlink.saturating_sub(1);
                td.ctime = now;
                if td.nlink == 0 {
                    let mut o = orph.clone();
                    o.push(t.ino);
                    b.put(&orphan_key(), &encode_orphans(&o))?;
                    new_orph = Some(o);
                }
                b.put(&inode_key(t.ino), &td.encode())?;
                tdisk = Some(td);
            }
        }
        b.commit(&self.db, self.max_batch)?;
        self.c.namespace_ops.fetch_add(1, Relaxed);
        if let Some(o) = new_orph {
            *orph = o;
        }
        drop(orph);

        // Install in DRAM.
        if let Some(p) = g1.dir.as_mut() {
            p.apply(r1.0, r1.1, r1.2, r1.3);
        }
        g1.disk = sinode.clone();
        g1.inode = sinode;
        if let (Some(g2), Some(r2), Some(di)) = (g2.as_mut(), r2, dinode) {
            if let Some(p) = g2.dir.as_mut() {
                p.apply(r2.0, r2.1, r2.2, r2.3);
            }
            g2.disk = di.clone();
            g2.inode = di;
        }
        ms.inode.ctime = now;
        ms.inode.parent = mdisk.parent;
        ms.disk = mdisk;
        drop(ms);
        drop(g1);
        drop(g2);
        let mut purge = None;
        if let (Some(t), Some(tg)) = (&tgt, ts.as_mut()) {
            if tgt_dir {
                tg.gone = true;
                tg.dir = None;
                self.nodes.lock().remove(&t.ino);
            } else if let Some(td) = tdisk {
                tg.inode.nlink = td.nlink;
                tg.inode.ctime = now;
                tg.disk = td;
                if tg.inode.nlink == 0 && tg.open == 0 {
                    purge = Some(t.ino);
                }
            }
        }
        drop(ts);
        if let Some(i) = purge {
            self.purge(i)?;
        }
        Ok(())
    }
}
