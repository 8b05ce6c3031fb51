//! vFile against an in-memory model: random sequences of create, mkdir, write,
//! truncate, unlink, rmdir, rename, fsync and clean reopens on a two-level tree;
//! every result (value or errno) and every file's bytes must match the model.

use crate::common;

use common::{opts, MemPool};
use masse::vfile::{Kind, SetAttr, Vfs, VfsError, VfsOptions, ROOT_INO};
use masse::Db;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

const NAMES: [&str; 4] = ["a", "b", "x", "y"];

#[derive(Clone, Debug)]
enum Op {
    Create(Vec<usize>),
    Mkdir(Vec<usize>),
    Write(Vec<usize>, u64, usize, u8),
    Truncate(Vec<usize>, u64),
    Unlink(Vec<usize>),
    Rmdir(Vec<usize>),
    Rename(Vec<usize>, Vec<usize>),
    Fsync(Vec<usize>),
    Reopen,
}

fn path() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..NAMES.len(), 1..=2)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => path().prop_map(Op::Create),
        2 => path().prop_map(Op::Mkdir),
        6 => (path(), 0..40_000u64, 1..20_000usize, any::<u8>()).prop_map(|(p, o, l, s)| Op::Write(p, o, l, s)),
        2 => (path(), 0..45_000u64).prop_map(|(p, s)| Op::Truncate(p, s)),
        2 => path().prop_map(Op::Unlink),
        1 => path().prop_map(Op::Rmdir),
        3 => (path(), path()).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => path().prop_map(Op::Fsync),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Clone, Debug, PartialEq)]
enum M {
    File(Vec<u8>),
    Dir,
}

type Model = BTreeMap<Vec<usize>, M>;

/// Resolve the parent of `p` in the model: Err(errno) as the layer reports it.
fn m_parent(m: &Model, p: &[usize]) -> Result<(), i32> {
    if p.len() == 1 {
        return Ok(());
    }
    match m.get(&p[..1].to_vec()) {
        None => Err(libc::ENOENT),
        Some(M::File(_)) => Err(libc::ENOTDIR),
        Some(M::Dir) => Ok(()),
    }
}

fn m_children(m: &Model, p: &[usize]) -> bool {
    m.keys().any(|k| k.len() > p.len() && k.starts_with(p))
}

fn m_apply(m: &mut Model, op: &Op) -> Result<(), i32> {
    match op {
        Op::Create(p) | Op::Mkdir(p) => {
            m_parent(m, p)?;
            if m.contains_key(p) {
                return Err(libc::EEXIST);
            }
            let n = if matches!(op, Op::Create(_)) {
                M::File(Vec::new())
            } else {
                M::Dir
            };
            m.insert(p.clone(), n);
            Ok(())
        }
        Op::Write(p, off, len, seed) => {
            m_parent(m, p)?;
            match m.get_mut(p) {
                None => Err(libc::ENOENT),
                Some(M::Dir) => Err(libc::EISDIR),
                Some(M::File(d)) => {
                    let end = *off as usize + len;
                    if d.len() < end {
                        d.resize(end, 0);
                    }
                    for (i, b) in d[*off as usize..end].iter_mut().enumerate() {
                        *b = seed.wrapping_add((i % 251) as u8);
                    }
                    Ok(())
                }
            }
        }
        Op::Truncate(p, s) => {
            m_parent(m, p)?;
            match m.get_mut(p) {
                None => Err(libc::ENOENT),
                Some(M::Dir) => Err(libc::EISDIR),
                Some(M::File(d)) => {
                    d.resize(*s as usize, 0);
                    Ok(())
                }
            }
        }
        Op::Fsync(p) => {
            m_parent(m, p)?;
            if m.contains_key(p) {
                Ok(())
            } else {
                Err(libc::ENOENT)
            }
        }
        Op::Unlink(p) => {
            m_parent(m, p)?;
            match m.get(p) {
                None => Err(libc::ENOENT),
                Some(M::Dir) => Err(libc::EISDIR),
                Some(M::File(_)) => {
                    m.remove(p);
                    Ok(())
                }
            }
        }
        Op::Rmdir(p) => {
            m_parent(m, p)?;
            match m.get(p) {
                None => Err(libc::ENOENT),
                Some(M::File(_)) => Err(libc::ENOTDIR),
                Some(M::Dir) if m_children(m, p) => Err(libc::ENOTEMPTY),
                Some(M::Dir) => {
                    m.remove(p);
                    Ok(())
                }
            }
        }
        Op::Rename(a, b) => {
            // Both parents are walked before the source is looked up (as the kernel does).
            m_parent(m, a)?;
            m_parent(m, b)?;
            let src = m.get(a).cloned().ok_or(libc::ENOENT)?;
            if a == b {
                return Ok(());
            }
            if let Some(t) = m.get(b) {
                match (&src, t) {
                    (M::Dir, M::File(_)) => return Err(libc::ENOTDIR),
                    (M::File(_), M::Dir) => return Err(libc::EISDIR),
                    _ => {}
                }
                if a.len() == 2 && b[..] == a[..1] {
                    return Err(libc::ENOTEMPTY);
                }
            }
            if src == M::Dir && b.len() > a.len() && b.starts_with(a) {
                return Err(libc::EINVAL);
            }
            if m.get(b) == Some(&M::Dir) && m_children(m, b) {
                return Err(libc::ENOTEMPTY);
            }
            // Move a (and its subtree) to b.
            let moved: Vec<(Vec<usize>, M)> = m
                .iter()
                .filter(|(k, _)| k.starts_with(a))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            m.remove(b);
            for (k, _) in &moved {
                m.remove(k);
            }
            for (k, v) in moved {
                let mut nk = b.clone();
                nk.extend_from_slice(&k[a.len()..]);
                m.insert(nk, v);
            }
            Ok(())
        }
        Op::Reopen => Ok(()),
    }
}

struct Sys {
    pool: MemPool,
    db: Option<Arc<Db>>,
    vfs: Option<Vfs>,
}

fn vopts() -> VfsOptions {
    VfsOptions {
        chunk_size: 4096,
        max_dirty_per_file: 24 * 1024,
        writeback_interval: None,
        ..Default::default()
    }
}

impl Sys {
    fn new() -> Sys {
        // Small bands: the largest atomic batch is small, so write-outs span batches.
        let pool = MemPool::capacity_only(64 << 20).with_geometry(64 * 1024, 2 << 20);
        let db = Arc::new(Db::create(&pool.config(), opts()).unwrap());
        let v = Vfs::open(db.clone(), vopts()).unwrap();
        Sys {
            pool,
            db: Some(db),
            vfs: Some(v),
        }
    }
    fn v(&self) -> &Vfs {
        self.vfs.as_ref().expect("open")
    }
    fn reopen(&mut self) {
        let v = self.vfs.take().expect("open");
        v.close().unwrap();
        drop(v);
        let db = self.db.take().expect("open");
        Arc::try_unwrap(db)
            .ok()
            .expect("sole owner")
            .close()
            .unwrap();
        let db = Arc::new(Db::open(&self.pool.config(), opts()).unwrap());
        self.vfs = Some(Vfs::open(db.clone(), vopts()).unwrap());
        self.db = Some(db);
    }
    fn ino(&self, p: &[usize]) -> Result<u64, VfsError> {
        let mut cur = ROOT_INO;
        for &c in p {
            cur = self.v().lookup(cur, NAMES[c].as_bytes())?.ino;
        }
        Ok(cur)
    }
    /// A parent directory, as a path walk resolves it: ENOTDIR for a file.
    fn dir_ino(&self, p: &[usize]) -> Result<u64, i32> {
        let i = self.ino(p).map_err(|e| e.errno())?;
        match self.v().getattr(i).map_err(|e| e.errno())?.kind {
            Kind::Dir => Ok(i),
            _ => Err(libc::ENOTDIR),
        }
    }
    fn apply(&mut self, op: &Op) -> Result<(), i32> {
        let e = |r: Result<(), VfsError>| r.map_err(|e| e.errno());
        let split = |p: &Vec<usize>| (p[..p.len() - 1].to_vec(), NAMES[p[p.len() - 1]].as_bytes());
        match op {
            Op::Create(p) | Op::Mkdir(p) => {
                let (d, n) = split(p);
                let d = self.dir_ino(&d)?;
                if matches!(op, Op::Create(_)) {
                    e(self.v().create(d, n, 0o644, 0, 0).map(|_| ()))
                } else {
                    e(self.v().mkdir(d, n, 0o755, 0, 0).map(|_| ()))
                }
            }
            Op::Write(p, off, len, seed) => {
                let i = self.ino(p).map_err(|e| e.errno())?;
                let data: Vec<u8> = (0..*len)
                    .map(|k| seed.wrapping_add((k % 251) as u8))
                    .collect();
                e(self.v().write(i, *off, &data).map(|_| ()))
            }
            Op::Truncate(p, s) => {
                let i = self.ino(p).map_err(|e| e.errno())?;
                e(self
                    .v()
                    .setattr(
                        i,
                        &SetAttr {
                            size: Some(*s),
                            ..Default::default()
                        },
                    )
                    .map(|_| ()))
            }
            Op::Fsync(p) => {
                let i = self.ino(p).map_err(|e| e.errno())?;
                e(self.v().fsync(i))
            }
            Op::Unlink(p) | Op::Rmdir(p) => {
                let (d, n) = split(p);
                let d = self.dir_ino(&d)?;
                if matches!(op, Op::Unlink(_)) {
                    e(self.v().unlink(d, n))
                } else {
                    e(self.v().rmdir(d, n))
                }
            }
            Op::Rename(a, b) => {
                let (da, na) = split(a);
                let (db, nb) = split(b);
                let da = self.dir_ino(&da)?;
                let db = self.dir_ino(&db)?;
                e(self.v().rename(da, na, db, nb, false))
            }
            Op::Reopen => {
                self.reopen();
                Ok(())
            }
        }
    }
    fn check(&self, m: &Model) {
        // Every model path exists with the right kind and bytes; no extra names.
        let mut seen = 0;
        for (p, n) in m {
            let i = self.ino(p).unwrap_or_else(|e| panic!("{p:?} missing: {e}"));
            let a = self.v().getattr(i).unwrap();
            match n {
                M::Dir => assert_eq!(a.kind, Kind::Dir, "{p:?}"),
                M::File(d) => {
                    assert_eq!(a.kind, Kind::File, "{p:?}");
                    assert_eq!(a.size, d.len() as u64, "size of {p:?}");
                    let got = self.v().read(i, 0, d.len() + 10).unwrap();
                    assert!(got == *d, "bytes of {p:?} differ");
                }
            }
            seen += 1;
        }
        // Renames can move a directory with entries one level down, so list every
        // directory of the model.
        let mut listed = self.v().readdir(ROOT_INO).unwrap().len();
        for (p, n) in m {
            if *n == M::Dir {
                listed += self.v().readdir(self.ino(p).unwrap()).unwrap().len();
            }
        }
        assert_eq!(listed, seen, "listed entries vs model");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn vfile_matches_model(ops in prop::collection::vec(op(), 1..80)) {
        let mut s = Sys::new();
        let mut m = Model::new();
        for op in &ops {
            let want = m_apply(&mut m, op);
            let got = s.apply(op);
            prop_assert_eq!(got, want, "op {:?}", op);
        }
        s.check(&m);
        s.reopen();
        s.check(&m);
    }
}
