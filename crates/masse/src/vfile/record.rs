//! Keys and value encodings of the file layer's records (docs/vfile.md §2).
//!
//! Every key starts with `\0vf` and a one-letter tag, so file-layer records never
//! collide with keys a key-value user of the same pool chooses (those would have
//! to start with a NUL byte and `vf`). Integers in keys are big-endian; in values
//! little-endian. The engine already checksums every record, so values carry no
//! checksum of their own; they are still length-checked on decode, and a value
//! that does not parse is reported as corruption.

use super::error::{VfsError, VfsResult};

const PREFIX: &[u8; 3] = b"\0vf";

/// Format version of the file layer's records: 2 adds a checksum per piece of
/// every chunk value (`piece.rs`). Version 1 file layers are still read and
/// written in their own format.
pub const VFS_VERSION: u32 = 2;
const SUPER_MAGIC: &[u8; 8] = b"MASSE-VF";

/// Whether `k` is the key of a file-layer record (a tool that lists a pool's
/// keys tells them apart from key-value users' keys with this).
pub fn is_file_layer_key(k: &[u8]) -> bool {
    k.starts_with(PREFIX)
}

fn key(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + parts.iter().map(|p| p.len()).sum::<usize>());
    k.extend_from_slice(PREFIX);
    k.push(tag);
    for p in parts {
        k.extend_from_slice(p);
    }
    k
}

/// The file layer's superblock record.
pub fn super_key() -> Vec<u8> {
    key(b'S', &[])
}
/// The list of orphans (inodes with no name, kept while open or until purged).
pub fn orphan_key() -> Vec<u8> {
    key(b'O', &[])
}
/// An inode.
pub fn inode_key(ino: u64) -> Vec<u8> {
    key(b'I', &[&ino.to_be_bytes()])
}
/// One bucket page of a directory.
pub fn page_key(dir: u64, bucket: u32) -> Vec<u8> {
    key(b'P', &[&dir.to_be_bytes(), &bucket.to_be_bytes()])
}
/// One chunk of file data.
pub fn chunk_key(ino: u64, idx: u64) -> Vec<u8> {
    key(b'C', &[&ino.to_be_bytes(), &idx.to_be_bytes()])
}

fn corrupt(what: &str) -> VfsError {
    VfsError::Corrupt(format!("file-layer record does not parse: {what}"))
}

/// A little-endian reader that reports short input as corruption.
struct Rd<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> VfsResult<&'a [u8]> {
        if self.b.len() < n {
            return Err(corrupt(self.what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> VfsResult<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> VfsResult<u16> {
        let mut a = [0u8; 2];
        a.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(a))
    }
    fn u32(&mut self) -> VfsResult<u32> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self) -> VfsResult<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn i64(&mut self) -> VfsResult<i64> {
        Ok(self.u64()? as i64)
    }
}

/// The superblock: format version, chunk size, and the inode-number lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Super {
    /// Chunk size in bytes (power of two, 4 KiB – 1 MiB).
    pub chunk_size: u32,
    /// Inode numbers below this may have been handed out; a new open starts here.
    pub ino_limit: u64,
    /// Bytes per checksummed piece of a chunk value (format 2); 0 in format 1.
    pub piece: u32,
}

impl Super {
    /// Encode.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(32);
        v.extend_from_slice(SUPER_MAGIC);
        let version: u32 = if self.piece == 0 { 1 } else { 2 };
        v.extend_from_slice(&version.to_le_bytes());
        v.extend_from_slice(&self.chunk_size.to_le_bytes());
        v.extend_from_slice(&self.ino_limit.to_le_bytes());
        if version >= 2 {
            v.extend_from_slice(&self.piece.to_le_bytes());
        }
        v
    }
    /// Decode, refusing foreign records and newer versions.
    pub fn decode(b: &[u8]) -> VfsResult<Super> {
        let mut r = Rd {
            b,
            what: "superblock",
        };
        if r.take(8)? != SUPER_MAGIC {
            return Err(corrupt("superblock magic"));
        }
        let ver = r.u32()?;
        if ver > VFS_VERSION {
            return Err(VfsError::Corrupt(format!(
                "file layer format version {ver} is newer than this build supports ({VFS_VERSION})"
            )));
        }
        let chunk_size = r.u32()?;
        if !chunk_size.is_power_of_two() || !(4096..=1 << 20).contains(&chunk_size) {
            return Err(corrupt("superblock chunk size"));
        }
        let ino_limit = r.u64()?;
        let piece = if ver >= 2 { r.u32()? } else { 0 };
        if ver >= 2 && (!piece.is_power_of_two() || !(512..=chunk_size).contains(&piece)) {
            return Err(corrupt("superblock piece size"));
        }
        Ok(Super {
            chunk_size,
            ino_limit,
            piece,
        })
    }
}

/// What an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::File => 1,
            Kind::Dir => 2,
            Kind::Symlink => 3,
        }
    }
    fn from_code(c: u8) -> VfsResult<Kind> {
        match c {
            1 => Ok(Kind::File),
            2 => Ok(Kind::Dir),
            3 => Ok(Kind::Symlink),
            _ => Err(corrupt("inode kind")),
        }
    }
}

/// A timestamp: seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Time {
    /// Seconds (negative before 1970).
    pub secs: i64,
    /// Nanoseconds, < 10^9.
    pub nanos: u32,
}

impl Time {
    /// The current time.
    pub fn now() -> Time {
        Time::from_system(std::time::SystemTime::now())
    }
    /// Convert from `SystemTime`.
    pub fn from_system(t: std::time::SystemTime) -> Time {
        match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => Time {
                secs: d.as_secs() as i64,
                nanos: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                let (mut s, mut n) = (-(d.as_secs() as i64), d.subsec_nanos());
                if n > 0 {
                    s -= 1;
                    n = 1_000_000_000 - n;
                }
                Time { secs: s, nanos: n }
            }
        }
    }
    /// Convert to `SystemTime`.
    pub fn to_system(self) -> std::time::SystemTime {
        let base = std::time::UNIX_EPOCH;
        if self.secs >= 0 {
            base + std::time::Duration::new(self.secs as u64, self.nanos)
        } else {
            base - std::time::Duration::from_secs(self.secs.unsigned_abs())
                + std::time::Duration::from_nanos(self.nanos as u64)
        }
    }
}

/// An inode record, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    /// Kind.
    pub kind: Kind,
    /// Permission bits (`0o7777`).
    pub perm: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Links (names) to it; directories count `.` and each subdirectory's `..`.
    pub nlink: u32,
    /// Size in bytes (files: data; directories: entries; symlinks: target length).
    pub size: u64,
    /// Chunk records may exist only below this index (files).
    pub alloc_chunks: u64,
    /// Access time.
    pub atime: Time,
    /// Modification time.
    pub mtime: Time,
    /// Status change time.
    pub ctime: Time,
    /// Directories: the parent directory (the root is its own parent).
    pub parent: u64,
    /// Directories: linear-hashing level (2^level buckets before splits).
    pub level: u8,
    /// Directories: linear-hashing split pointer.
    pub split: u32,
    /// Symlinks: the target.
    pub target: Vec<u8>,
    /// Files: how many chunk records exist (holes excluded), for `st_blocks`;
    /// [`STORED_UNKNOWN`] until counted (records written before the field existed,
    /// or the first batch of a write-out a crash may cut short).
    pub stored_chunks: u64,
}

/// `Inode::stored_chunks` when the count must be taken again from the index.
pub const STORED_UNKNOWN: u64 = u64::MAX;

impl Inode {
    /// A new inode of `kind` with all times set to now.
    pub fn new(kind: Kind, perm: u32, uid: u32, gid: u32, parent: u64) -> Inode {
        let now = Time::now();
        Inode {
            kind,
            perm: perm & 0o7777,
            uid,
            gid,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            size: 0,
            alloc_chunks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            parent,
            level: 0,
            split: 0,
            target: Vec::new(),
            stored_chunks: 0,
        }
    }

    /// Encode.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(96 + self.target.len());
        v.push(self.kind.code());
        v.push(self.level);
        v.extend_from_slice(&(self.target.len() as u16).to_le_bytes());
        v.extend_from_slice(&self.perm.to_le_bytes());
        v.extend_from_slice(&self.uid.to_le_bytes());
        v.extend_from_slice(&self.gid.to_le_bytes());
        v.extend_from_slice(&self.nlink.to_le_bytes());
        v.extend_from_slice(&self.split.to_le_bytes());
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.alloc_chunks.to_le_bytes());
        for t in [self.atime, self.mtime, self.ctime] {
            v.extend_from_slice(&t.secs.to_le_bytes());
            v.extend_from_slice(&t.nanos.to_le_bytes());
        }
        v.extend_from_slice(&self.parent.to_le_bytes());
        v.extend_from_slice(&self.target);
        // Appended after the variable part: older builds ignore it, and records
        // they wrote decode as "unknown".
        v.extend_from_slice(&self.stored_chunks.to_le_bytes());
        v
    }

    /// Decode.
    pub fn decode(b: &[u8]) -> VfsResult<Inode> {
        let mut r = Rd { b, what: "inode" };
        let kind = Kind::from_code(r.u8()?)?;
        let level = r.u8()?;
        let tlen = r.u16()? as usize;
        let perm = r.u32()?;
        let uid = r.u32()?;
        let gid = r.u32()?;
        let nlink = r.u32()?;
        let split = r.u32()?;
        let size = r.u64()?;
        let alloc_chunks = r.u64()?;
        let mut ts = [Time::default(); 3];
        for t in ts.iter_mut() {
            let secs = r.i64()?;
            let nanos = r.u32()?;
            if nanos >= 1_000_000_000 {
                return Err(corrupt("inode time"));
            }
            *t = Time { secs, nanos };
        }
        let parent = r.u64()?;
        let target = r.take(tlen)?.to_vec();
        let stored_chunks = if r.b.len() >= 8 {
            r.u64()?
        } else {
            STORED_UNKNOWN
        };
        if level > 31 || (kind == Kind::Dir && split as u64 >= 1u64 << level) {
            return Err(corrupt("directory hashing state"));
        }
        Ok(Inode {
            kind,
            perm,
            uid,
            gid,
            nlink,
            size,
            alloc_chunks,
            atime: ts[0],
            mtime: ts[1],
            ctime: ts[2],
            parent,
            level,
            split,
            target,
            stored_chunks,
        })
    }
}

/// One directory entry, as stored in a bucket page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DEntry {
    /// The name (1–255 bytes, no `/` or NUL).
    pub name: Vec<u8>,
    /// The inode it names.
    pub ino: u64,
    /// The inode's kind (so listing a directory needs no inode reads).
    pub kind: Kind,
}

/// Bytes an entry takes in an encoded page.
pub fn dentry_len(name_len: usize) -> usize {
    1 + name_len + 8 + 1
}

/// Encode a bucket page.
pub fn encode_page(p: &[DEntry]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + p.iter().map(|e| dentry_len(e.name.len())).sum::<usize>());
    v.extend_from_slice(&(p.len() as u32).to_le_bytes());
    for e in p {
        v.push(e.name.len() as u8);
        v.extend_from_slice(&e.name);
        v.extend_from_slice(&e.ino.to_le_bytes());
        v.push(e.kind.code());
    }
    v
}

/// Decode a bucket page.
pub fn decode_page(b: &[u8]) -> VfsResult<Vec<DEntry>> {
    let mut r = Rd {
        b,
        what: "directory page",
    };
    let n = r.u32()? as usize;
    let mut out = Vec::with_capacity(n.min(b.len() / 10));
    for _ in 0..n {
        let l = r.u8()? as usize;
        let name = r.take(l)?.to_vec();
        let ino = r.u64()?;
        let kind = Kind::from_code(r.u8()?)?;
        if name.is_empty() {
            return Err(corrupt("empty name in directory page"));
        }
        out.push(DEntry { name, ino, kind });
    }
    Ok(out)
}

/// Encode the orphan list.
pub fn encode_orphans(v: &[u64]) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + v.len() * 8);
    b.extend_from_slice(&(v.len() as u32).to_le_bytes());
    for x in v {
        b.extend_from_slice(&x.to_le_bytes());
    }
    b
}

/// Decode the orphan list.
pub fn decode_orphans(b: &[u8]) -> VfsResult<Vec<u64>> {
    let mut r = Rd {
        b,
        what: "orphan list",
    };
    let n = r.u32()? as usize;
    (0..n).map(|_| r.u64()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_round_trip() {
        let mut i = Inode::new(Kind::Symlink, 0o777, 5, 6, 1);
        i.target = b"../x".to_vec();
        i.size = 4;
        i.atime = Time::from_system(std::time::UNIX_EPOCH - std::time::Duration::new(5, 7));
        i.stored_chunks = 7;
        assert_eq!(Inode::decode(&i.encode()).unwrap(), i);
        assert!(Inode::decode(&i.encode()[..20]).is_err());
        // A record of a build without the chunk count: the count is unknown.
        let old = i.encode();
        let mut want = i.clone();
        want.stored_chunks = STORED_UNKNOWN;
        assert_eq!(Inode::decode(&old[..old.len() - 8]).unwrap(), want);
    }

    #[test]
    fn page_round_trip() {
        let p = vec![
            DEntry {
                name: b"a".to_vec(),
                ino: 9,
                kind: Kind::File,
            },
            DEntry {
                name: vec![b'z'; 255],
                ino: 10,
                kind: Kind::Dir,
            },
        ];
        assert_eq!(decode_page(&encode_page(&p)).unwrap(), p);
        let s = Super {
            chunk_size: 16384,
            ino_limit: 77,
            piece: 1024,
        };
        assert_eq!(Super::decode(&s.encode()).unwrap(), s);
        let v1 = Super { piece: 0, ..s };
        assert_eq!(Super::decode(&v1.encode()).unwrap(), v1);
    }
}
