//! Directories as linear-hashing bucket pages (docs/vfile.md §3).
//!
//! A directory's entries live in bucket pages, one record each. The bucket of a
//! name is chosen by linear hashing over xxh3(name): with level `L` and split
//! pointer `s`, bucket = h mod 2^L, or h mod 2^(L+1) when that is below `s`.
//! When an insert leaves a page above [`PAGE_TARGET`] bytes, bucket `s` is split
//! into `s` and `s + 2^L` in the same atomic batch. So a lookup reads one page,
//! a listing reads all pages, an insert or a rename rewrites one to three small
//! pages, and no operation ever scans the pool.
//!
//! Changes are planned on an overlay (`Plan`) that copies only the pages it
//! touches; the caller writes the plan's pages in one `WriteBatch` and installs
//! them in DRAM only after the batch is durable.

use super::record::{dentry_len, DEntry, Kind};
use std::collections::BTreeMap;

/// A page above this many encoded bytes triggers a split.
pub const PAGE_TARGET: usize = 16 * 1024;

/// The hash of a name (fixed seed: it is part of the on-disk format).
pub fn name_hash(name: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(name, 0x6d61_7373_6576_6631)
}

/// Bucket of hash `h` in a table at (`level`, `split`).
pub fn bucket_of(h: u64, level: u8, split: u32) -> u32 {
    let b = h & ((1u64 << level) - 1);
    if b < split as u64 {
        (h & ((1u64 << (level + 1)) - 1)) as u32
    } else {
        b as u32
    }
}

/// Number of buckets at (`level`, `split`).
pub fn bucket_count(level: u8, split: u32) -> u32 {
    (1u32 << level) + split
}

/// A loaded directory: its hashing state and every bucket page.
#[derive(Clone, Debug, Default)]
pub struct DirPages {
    /// Linear-hashing level.
    pub level: u8,
    /// Split pointer.
    pub split: u32,
    /// Pages, indexed by bucket.
    pub pages: Vec<Vec<DEntry>>,
    /// Entries in all pages.
    pub entries: u64,
}

fn page_bytes(p: &[DEntry]) -> usize {
    4 + p.iter().map(|e| dentry_len(e.name.len())).sum::<usize>()
}

impl DirPages {
    /// Find `name`.
    pub fn find(&self, name: &[u8]) -> Option<&DEntry> {
        let b = bucket_of(name_hash(name), self.level, self.split) as usize;
        self.pages.get(b)?.iter().find(|e| e.name == name)
    }

    /// Every entry, bucket by bucket.
    pub fn list(&self) -> impl Iterator<Item = &DEntry> {
        self.pages.iter().flatten()
    }

    /// Start planning changes.
    pub fn plan(&self) -> Plan<'_> {
        Plan {
            base: self,
            level: self.level,
            split: self.split,
            entries: self.entries,
            touched: BTreeMap::new(),
        }
    }

    /// Install a plan's result (after it is durable).
    pub fn apply(&mut self, level: u8, split: u32, entries: u64, pages: Vec<(u32, Vec<DEntry>)>) {
        self.level = level;
        self.split = split;
        self.entries = entries;
        let n = bucket_count(level, split) as usize;
        if self.pages.len() < n {
            self.pages.resize_with(n, Vec::new);
        }
        for (b, p) in pages {
            if let Some(slot) = self.pages.get_mut(b as usize) {
                *slot = p;
            }
        }
    }
}

/// Planned changes to one directory.
pub struct Plan<'a> {
    base: &'a DirPages,
    /// Level after the plan.
    pub level: u8,
    /// Split pointer after the plan.
    pub split: u32,
    /// Entry count after the plan.
    pub entries: u64,
    touched: BTreeMap<u32, Vec<DEntry>>,
}

impl Plan<'_> {
    fn page_mut(&mut self, b: u32) -> &mut Vec<DEntry> {
        let base = self.base;
        self.touched
            .entry(b)
            .or_insert_with(|| base.pages.get(b as usize).cloned().unwrap_or_default())
    }

    /// Remove `name`; returns the removed entry.
    pub fn remove(&mut self, name: &[u8]) -> Option<DEntry> {
        let b = bucket_of(name_hash(name), self.level, self.split);
        let p = self.page_mut(b);
        let i = p.iter().position(|e| e.name == name)?;
        let e = p.swap_remove(i);
        self.entries -= 1;
        Some(e)
    }

    /// Insert or replace `name`; returns the replaced entry. May split a bucket.
    pub fn insert(&mut self, e: DEntry) -> Option<DEntry> {
        let b = bucket_of(name_hash(&e.name), self.level, self.split);
        let p = self.page_mut(b);
        let old = match p.iter().position(|x| x.name == e.name) {
            Some(i) => Some(std::mem::replace(&mut p[i], e)),
            None => {
                p.push(e);
                None
            }
        };
        if old.is_none() {
            self.entries += 1;
        }
        if page_bytes(self.page_mut(b)) > PAGE_TARGET && self.level < 31 {
            self.split_one();
        }
        old
    }

    /// Split bucket `split` into `split` and `split + 2^level`.
    fn split_one(&mut self) {
        let (lvl, s) = (self.level, self.split);
        let src = std::mem::take(self.page_mut(s));
        let hi = s + (1u32 << lvl);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for e in src {
            let h = name_hash(&e.name);
            if (h >> lvl) & 1 == 0 {
                a.push(e);
            } else {
                b.push(e);
            }
        }
        self.touched.insert(s, a);
        self.touched.insert(hi, b);
        self.split += 1;
        if self.split == 1u32 << lvl {
            self.level += 1;
            self.split = 0;
        }
    }

    /// The touched pages (bucket, contents).
    pub fn into_pages(self) -> (u8, u32, u64, Vec<(u32, Vec<DEntry>)>) {
        (
            self.level,
            self.split,
            self.entries,
            self.touched.into_iter().collect(),
        )
    }
}

/// An entry's kind and inode, as listed.
pub fn entry(name: &[u8], ino: u64, kind: Kind) -> DEntry {
    DEntry {
        name: name.to_vec(),
        ino,
        kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_inserts_split_and_stay_findable() {
        let mut d = DirPages {
            pages: vec![Vec::new()],
            ..Default::default()
        };
        for i in 0..5000u64 {
            let name = format!("file-{i:06}-with-a-longish-name").into_bytes();
            let mut p = d.plan();
            assert!(p.insert(entry(&name, i + 2, Kind::File)).is_none());
            let (l, s, n, pages) = p.into_pages();
            d.apply(l, s, n, pages);
        }
        assert!(d.pages.len() > 8, "pages {}", d.pages.len());
        assert_eq!(d.entries, 5000);
        assert_eq!(d.list().count(), 5000);
        for i in 0..5000u64 {
            let name = format!("file-{i:06}-with-a-longish-name").into_bytes();
            assert_eq!(d.find(&name).map(|e| e.ino), Some(i + 2));
        }
        for p in &d.pages {
            assert!(page_bytes(p) < 4 * PAGE_TARGET);
        }
    }
}
