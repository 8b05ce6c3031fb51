//! Which write stream a record goes to (design.md §9.5).
//!
//! With `Options::gc_separate` a tiered pool fills two open bands at once:
//! one with user writes, one with GC moves. Recovery tells a key's versions
//! apart by position — (band `first_seq`, slot, offset), later wins — so a
//! record may only land *after* its key's newest copy. Each record goes to
//! the stream it belongs to if that stream's open band is "after" the copy
//! (opened later than the copy's band, or the copy's band itself); otherwise
//! to the other stream, whose open band is then the newest. The key's newest
//! copy is, in this order:
//!
//! 1. a copy this group already placed: the record follows it in the same
//!    stream (the leader places a whole group before it updates the index);
//! 2. the copy the index names;
//! 3. none (a new key, or a key whose tombstone GC dropped while the
//!    tombstone may still be on disk): the newest band in use.
//!
//! So the copy the index names always has the largest position of all the
//! key's copies on disk, as with one stream, and recovery needs no change.
//!
//! Which stream a record *wants*: a GC move the `Gc` one; a user write the
//! `User` one, unless its key's newest copy sits in a band sealed more than
//! half the pool ago (`Options::cold_user_writes`): a key left
//! alone that long is likely to be left alone again, so its new version
//! joins the records that survived GC (design.md §9.5).

use super::request::{PendingRecord, RecordKind};
use super::segment::{Stream, WriteState};
use super::state::Engine;
use crate::format::{Loc, Mode};
use crate::index::{canonical, Digest};
use std::collections::HashMap;

impl Engine {
    /// Whether GC moves get a stream of their own: asked for, and a tiered
    /// pool (capacity-only and scm-only pools keep one chain of segments:
    /// their torn-write checks and atomic groups across bands rely on it).
    pub(crate) fn streams_on(&self) -> bool {
        self.opts.gc_separate && self.pool.geo.mode == Mode::Tiered
    }

    /// How many bands must have been opened (by either stream) since the band
    /// of a key's newest copy was sealed for a user write of the key to count
    /// as cold (`BandTable::records_age`): `Options::cold_age_bands`, by
    /// default half the pool's bands. Counted in bands opened, not in
    /// segment seqs: those jump at every open (the epoch is their top bits),
    /// which made every key written before a reopen look cold (found by
    /// review). Measured on the churn demo
    /// (docs/benchmarks.md, "Cold user writes"), 10^7 overwrites of 2·10^6
    /// keys: zipfian churn's host write amplification −3.8 %, uniform
    /// churn's +0.9 %. A third of the pool did as well in a first version;
    /// an eighth (the simulator's best, bench/gc-sim.py) sent 85 % of
    /// uniform churn's writes to the GC band.
    fn cold_age(&self) -> u64 {
        match self.opts.cold_age_bands {
            0 => self.layout.bands as u64 / 2,
            n => n,
        }
    }
}

/// Where [`StreamChoice::choose`] puts a record, and the stream the record
/// wanted: they differ when the placement rule sent it to the other one.
/// `want` is `None` for a record that followed its key's copy placed
/// earlier in the same group (rule 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pick {
    pub stream: Stream,
    pub want: Option<Stream>,
}

/// The stream of each key the group being selected places (rule 1).
#[derive(Default)]
pub(crate) struct StreamChoice {
    placed: HashMap<Digest, Stream>,
}

impl StreamChoice {
    /// The stream record `p` goes to, given the records of the group noted
    /// so far. Records of one request are all chosen before any is noted:
    /// same-key records of one request are all user writes or all one move,
    /// so they get the same answer.
    pub fn choose(&self, e: &Engine, ws: &WriteState, p: &PendingRecord) -> Pick {
        match self.placed.get(&canonical(p.digest)) {
            Some(&s) => Pick {
                stream: s,
                want: None,
            },
            None => by_newest_copy(e, ws, p),
        }
    }

    /// Record `p` will be placed in stream `s`. Only records that are kept:
    /// a stale GC move the group drops was judged against a copy the index
    /// no longer names, and a later write of its key must not follow it.
    pub fn note(&mut self, p: &PendingRecord, s: Stream) {
        self.placed.insert(canonical(p.digest), s);
    }
}

/// The stream a record belongs to by its kind: GC moves to `Gc`, the rest
/// to `User`.
fn by_kind(p: &PendingRecord) -> Stream {
    match p.kind {
        RecordKind::Relocate(..) => Stream::Gc,
        _ => Stream::User,
    }
}

fn other(s: Stream) -> Stream {
    match s {
        Stream::User => Stream::Gc,
        Stream::Gc => Stream::User,
    }
}

/// `first_seq` of the band stream `s` places its next record in: its open
/// band's, or, with none open, `u64::MAX`: it opens a new band, newer than
/// every band in use.
fn next_first(ws: &WriteState, s: Stream) -> u64 {
    match ws.band_of(s) {
        (Some(_), first) => first,
        (None, _) => u64::MAX,
    }
}

/// A key's newest copy on disk, looked up once and only when needed.
struct NewestCopy<'a> {
    e: &'a Engine,
    p: &'a PendingRecord,
    /// The copy's band's `first_seq`, and its records' age (`records_age`).
    band: Option<Option<(u64, u64)>>,
}

impl NewestCopy<'_> {
    /// `first_seq` of the band holding the copy (`None`: no copy): the one
    /// a move was read from, else the one the index names.
    fn band_first(&mut self) -> Option<u64> {
        self.band().map(|b| b.0)
    }

    /// The age of the copy's band's records (`None`: no copy).
    fn age(&mut self) -> Option<u64> {
        self.band().map(|b| b.1)
    }

    fn band(&mut self) -> Option<(u64, u64)> {
        let (e, p) = (self.e, self.p);
        *self.band.get_or_insert_with(|| {
            let copy = match p.kind {
                RecordKind::Relocate(old, _) | RecordKind::Replay(Some(old)) => Some(old),
                _ => e.index.get(p.digest).map(Loc),
            }?;
            let band = e.layout.band_of_slot(copy.slot()) as usize;
            let bt = e.bands.lock();
            Some((bt.bands[band].first_seq, bt.records_age(band)))
        })
    }
}

/// The stream `p` wants. Puts and deletes both follow their key's age, so
/// that same-key records of one request want (and get) the same stream.
/// Cold writes join the GC band only while one is open with slots left, so
/// they never open one: one that did would take a free band before GC had
/// run, and a nearly full pool then ran out of free bands before any band
/// held enough garbage to collect (`gc_churn`'s `tiered_90_percent` failed
/// with `NoSpace` right after its fill).
fn want(e: &Engine, ws: &WriteState, p: &PendingRecord, copy: &mut NewestCopy) -> Stream {
    let user = matches!(p.kind, RecordKind::Put | RecordKind::Delete);
    let gc_room =
        ws.band_of(Stream::Gc).0.is_some() && ws.parked.next_sib < e.layout.slots_per_band;
    if !user || !e.opts.cold_user_writes || !gc_room {
        return by_kind(p);
    }
    match copy.age() {
        Some(age) if age > e.cold_age() => Stream::Gc,
        _ => Stream::User,
    }
}

/// Rules 2 and 3: after the copy the index names, or in the newest band.
fn by_newest_copy(e: &Engine, ws: &WriteState, p: &PendingRecord) -> Pick {
    // Every band opened this run is newer than those recovery found, and
    // `band_first` starts at the newest of those: the newest band in use is
    // the one either stream opened last.
    let newest = ws.band_of(Stream::User).1.max(ws.band_of(Stream::Gc).1);
    let mut copy = NewestCopy { e, p, band: None };
    let want = want(e, ws, p, &mut copy);
    let at = next_first(ws, want);
    let stream = if at >= newest {
        want // after every band in use
    } else {
        match copy.band_first() {
            Some(first) if at >= first => want,
            // Rule 3 (no copy), or the copy is newer: `other` opened the newest band.
            _ => other(want),
        }
    };
    Pick {
        stream,
        want: Some(want),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Device, MemDevice};
    use crate::engine::request::{Req, WriteClass};
    use crate::{Db, DeviceSpec, GcPolicy, Options, PoolConfig};
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Arc;

    fn pool(fast: &MemDevice, cap: &MemDevice) -> PoolConfig {
        let dev = |d: &MemDevice| DeviceSpec::Device(Arc::new(d.clone()) as Arc<dyn Device>);
        PoolConfig {
            fast: Some(dev(fast)),
            capacity: vec![dev(cap)],
            mode: Some(Mode::Tiered),
            segment_size: Some(16 << 10),
            band_size: Some(256 << 10),
            ..Default::default()
        }
    }

    fn opts() -> Options {
        Options {
            background_gc: false,
            histograms: false,
            gc_separate: true,
            gc_policy: GcPolicy::Greedy,
            ..Options::default()
        }
    }

    fn val(k: u32, v: u32) -> Vec<u8> {
        let mut b = format!("{k}-{v}-").into_bytes();
        b.resize(900, b'a' + (k + v) as u8 % 26);
        b
    }

    fn key(k: u32) -> Vec<u8> {
        format!("key{k:06}").into_bytes()
    }

    /// Seal both streams' open segments and wait until they are durable, so
    /// the pad releases their batches: recovery then sees only the capacity
    /// tier's positions, not the pad's replay (which lands after everything).
    fn seal_all(db: &Db) {
        db.seal_open_segments().expect("seal");
    }

    /// Fill four bands, kill half of the first, and have GC move the rest
    /// into a band of its own, opened after the user writes' band. Returns
    /// the keys moved and each key's version.
    fn moved_into_newer_gc_band(db: &Db) -> (Vec<u32>, Vec<u32>) {
        let e = &db.engine;
        let n = 1000u32; // ≈ 4 bands of 256 KiB
        for k in 0..n {
            db.put(&key(k), &val(k, 0)).expect("fill");
        }
        let first_band = |k: u32| {
            let loc = Loc(e.index.get(e.digest(&key(k))).expect("indexed"));
            e.layout.band_of_slot(loc.slot())
        };
        let b0 = first_band(0);
        let in_b0: Vec<u32> = (0..n).filter(|&k| first_band(k) == b0).collect();
        let mut ver = vec![0u32; n as usize];
        for &k in in_b0.iter().step_by(2) {
            ver[k as usize] = 1;
            db.put(&key(k), &val(k, 1)).expect("overwrite");
        }
        seal_all(db);
        assert!(db.gc_once().expect("gc"), "GC freed a band");
        let ws = e.write_state.lock();
        let (user, gc) = (ws.band_of(Stream::User), ws.band_of(Stream::Gc));
        assert!(user.0.is_some() && gc.0.is_some(), "two open bands");
        assert!(gc.1 > user.1, "the GC band is the newer");
        let moved = in_b0.iter().skip(1).step_by(2).copied().collect();
        (moved, ver)
    }

    fn check_all(db: &Db, ver: &[u32]) {
        for (k, &v) in ver.iter().enumerate() {
            let got = db.get(&key(k as u32)).expect("get");
            assert_eq!(got, Some(val(k as u32, v)), "key {k} at version {v}");
        }
    }

    /// A user write of a key GC just moved into the newer GC band goes to
    /// that band (after the moved copy); one of a key still in an older band
    /// stays in the user band; a new key goes to the newest band. After a
    /// crash that leaves only the capacity tier to tell versions apart,
    /// every key reads its newest version. Without the rule the overwrite
    /// of the moved key lands in the older user band, and recovery brings
    /// the moved (older) version back.
    #[test]
    fn writes_land_after_their_keys_newest_copy() {
        let (fast, cap) = (MemDevice::new(64 << 20), MemDevice::new(16 << 20));
        let db = Db::create(&pool(&fast, &cap), opts()).expect("create");
        let (moved, mut ver) = moved_into_newer_gc_band(&db);
        let diverted = || db.engine.counters.stream_diverted.load(Relaxed);
        let before = diverted();
        let k = moved[0];
        ver[k as usize] = 2;
        db.put(&key(k), &val(k, 2))
            .expect("overwrite of a moved key");
        assert_eq!(diverted(), before + 1, "the overwrite went to the GC band");
        let j = ver.len() as u32 - 1; // written last: in the user band
        ver[j as usize] = 2;
        db.put(&key(j), &val(j, 2)).expect("overwrite");
        assert_eq!(
            diverted(),
            before + 1,
            "the other one stayed in the user band"
        );
        let new = ver.len() as u32;
        ver.push(0);
        db.put(&key(new), &val(new, 0)).expect("a new key");
        assert_eq!(diverted(), before + 2, "a new key goes to the newest band");
        seal_all(&db);
        drop(db); // a crash: no checkpoint, the pad released
        let db = Db::open(&pool(&fast, &cap), opts()).expect("recover");
        check_all(&db, &ver);
        db.close().expect("close");
    }

    /// A GC move made stale by a user write, then dropped from a group that
    /// also writes its key: the write must not follow the dropped move into
    /// the GC band. Bands: V (holds K) < G (GC stream) < U (user stream). A
    /// put of K goes to U; then one group holds a move of K out of V (stale)
    /// and another put of K. Judged against V the move would go to G, and
    /// the second put after it, below the first put's position in U:
    /// recovery would bring the first put back. (Found by review.)
    #[test]
    fn a_write_does_not_follow_a_dropped_move() {
        let (fast, cap) = (MemDevice::new(64 << 20), MemDevice::new(16 << 20));
        let db = Db::create(&pool(&fast, &cap), opts()).expect("create");
        let e = &db.engine;
        let (_, mut ver) = moved_into_newer_gc_band(&db);
        let gc_first = e.write_state.lock().band_of(Stream::Gc).1;
        // A key still in a band older than G.
        let band_first = |k: u32| {
            let loc = Loc(e.index.get(e.digest(&key(k))).expect("indexed"));
            let b = e.layout.band_of_slot(loc.slot()) as usize;
            (loc, e.bands.lock().bands[b].first_seq)
        };
        let k = (0..ver.len() as u32)
            .find(|&k| band_first(k).1 < gc_first)
            .expect("a key in a band older than the GC band");
        let (old_loc, _) = band_first(k);
        // User writes until the user stream opens a band after G: overwrites
        // of keys in the user band (new keys would go to G, the newest band).
        let mut f = 900u32;
        while e.write_state.lock().band_of(Stream::User).1 < gc_first {
            ver[f as usize] += 10;
            db.put(&key(f), &val(f, ver[f as usize])).expect("filler");
            f = if f == 999 { 900 } else { f + 1 };
        }
        ver[k as usize] = 5;
        db.put(&key(k), &val(k, 5)).expect("put K");
        let codec = e.layout.codec;
        let bytes = e
            .with_record(old_loc, |b| {
                let r = codec.decode(b)?;
                Ok((r.key.to_vec(), r.value.to_vec()))
            })
            .expect("read K's old record");
        let mut mv =
            PendingRecord::new(&bytes.0, &bytes.1, false, RecordKind::Relocate(old_loc, 1));
        mv.digest = e.digest(&key(k));
        let mut put = PendingRecord::new(&key(k), &val(k, 6), false, RecordKind::Put);
        put.digest = e.digest(&key(k));
        ver[k as usize] = 6;
        let reqs = [
            Req::new(vec![mv], WriteClass::Gc, codec),
            Req::new(vec![put], WriteClass::User, codec),
        ];
        {
            let mut ws = e.write_state.lock();
            e.commit_group(&mut ws, &reqs, &mut Vec::new())
                .expect("commit");
        }
        assert_eq!(db.get(&key(k)).expect("get"), Some(val(k, 6)));
        seal_all(&db);
        drop(db);
        let db = Db::open(&pool(&fast, &cap), opts()).expect("recover");
        assert_eq!(db.get(&key(k)).expect("get"), Some(val(k, 6)), "key {k}");
        db.close().expect("close");
    }

    /// A batch holding moved keys (in the newer GC band) and a key of the
    /// user band: its records go to both streams, each after its key's copy,
    /// and recover after a crash; then more churn, GC and a second crash.
    #[test]
    fn batches_across_both_streams_recover() {
        let (fast, cap) = (MemDevice::new(64 << 20), MemDevice::new(16 << 20));
        let db = Db::create(&pool(&fast, &cap), opts()).expect("create");
        let (moved, mut ver) = moved_into_newer_gc_band(&db);
        let mut b = crate::WriteBatch::new();
        for &k in moved.iter().take(3).chain([ver.len() as u32 - 2].iter()) {
            ver[k as usize] = 3;
            b.put(&key(k), &val(k, 3)).expect("batch put");
        }
        db.write(b).expect("batch");
        seal_all(&db);
        drop(db);
        let db = Db::open(&pool(&fast, &cap), opts()).expect("recover");
        check_all(&db, &ver);
        // More churn and GC after the reopen, then a power cut.
        for k in (0..ver.len() as u32).step_by(3) {
            ver[k as usize] = 4;
            db.put(&key(k), &val(k, 4)).expect("overwrite");
        }
        seal_all(&db);
        while db.gc_once().expect("gc") {}
        seal_all(&db);
        drop(db);
        let db = Db::open(&pool(&fast, &cap), opts()).expect("recover again");
        check_all(&db, &ver);
        let rep = db.check().expect("check");
        assert!(rep.is_clean(), "{:?}", rep.errors);
        db.close().expect("close");
    }

    /// The age of the band holding key `k`'s newest copy.
    fn copy_age(db: &Db, k: u32) -> u64 {
        let e = &db.engine;
        let loc = Loc(e.index.get(e.digest(&key(k))).expect("indexed"));
        let b = e.layout.band_of_slot(loc.slot()) as usize;
        e.bands.lock().records_age(b)
    }

    /// Overwrite keys 100..110 until key `k`'s band is older than the cold
    /// age.
    fn age_key(db: &Db, k: u32, ver: &mut [u32]) {
        let e = &db.engine;
        let mut h = 100u32;
        while copy_age(db, k) <= e.cold_age() {
            ver[h as usize] += 1;
            db.put(&key(h), &val(h, ver[h as usize])).expect("hot put");
            h = if h == 109 { 100 } else { h + 1 };
        }
    }

    /// Keys 300..600 (a band and more), half of them overwritten, then GC
    /// until it has moved survivors into a band of its own: cold writes
    /// join that band only while it is open.
    fn open_gc_band(db: &Db, ver: &mut [u32]) {
        for k in 300..600 {
            db.put(&key(k), &val(k, 0)).expect("put");
        }
        for k in 300..450 {
            ver[k as usize] = 1;
            db.put(&key(k), &val(k, 1)).expect("overwrite");
        }
        seal_all(db);
        let open = || db.engine.write_state.lock().band_of(Stream::Gc).0.is_some();
        while !open() {
            assert!(db.gc_once().expect("gc"), "GC moved nothing");
        }
    }

    /// A user write of a key left alone for more than the cold age goes to
    /// the GC stream's band; one of a key written just now stays in the
    /// user band; a put and a delete of a cold key in one batch go to the
    /// same band (else recovery's "later position wins" could bring the
    /// put back). All of it recovers after a crash. With the option off,
    /// nothing is cold.
    #[test]
    fn cold_user_writes_join_the_gc_moves() {
        for on in [true, false] {
            let (fast, cap) = (MemDevice::new(64 << 20), MemDevice::new(16 << 20));
            // Cold after two bands, not half the pool.
            let o = Options {
                cold_user_writes: on,
                cold_age_bands: 2,
                ..opts()
            };
            let db = Db::create(&pool(&fast, &cap), o.clone()).expect("create");
            let e = &db.engine;
            let cold = || e.counters.cold_writes.load(Relaxed);
            let mut ver = vec![0u32; 900];
            // Keys 0..3 in a band of keys never overwritten: no GC victim.
            for k in (0..3).chain(600..900).chain(100..110) {
                db.put(&key(k), &val(k, 0)).expect("put");
            }
            open_gc_band(&db, &mut ver);
            age_key(&db, 0, &mut ver);
            assert_eq!(cold(), 0, "nothing was cold yet");
            ver[0] = 1;
            db.put(&key(0), &val(0, 1)).expect("cold put");
            assert_eq!(cold(), on as u64, "key 0 was cold (option {on})");
            let gc_band = e.write_state.lock().band_of(Stream::Gc).0;
            let band = |k: u32| {
                let loc = Loc(e.index.get(e.digest(&key(k))).expect("indexed"));
                Some(e.layout.band_of_slot(loc.slot()))
            };
            assert_eq!(band(0) == gc_band, on, "key 0 in the GC band");
            ver[100] += 1;
            db.put(&key(100), &val(100, ver[100])).expect("hot put");
            assert_eq!(cold(), on as u64, "key 100 was not cold");
            let mut b = crate::WriteBatch::new();
            b.put(&key(1), &val(1, 9)).expect("batch put");
            b.delete(&key(1)).expect("batch delete");
            db.write(b).expect("batch");
            assert_eq!(cold(), 3 * on as u64, "both records of key 1 were cold");
            seal_all(&db);
            drop(db); // a crash: no checkpoint, the pad released
            let db = Db::open(&pool(&fast, &cap), o).expect("recover");
            assert_eq!(db.get(&key(1)).expect("get"), None, "key 1 stays deleted");
            for k in (0..1).chain(2..3).chain(100..110).chain(300..900) {
                let got = db.get(&key(k)).expect("get");
                assert_eq!(got, Some(val(k, ver[k as usize])), "key {k}");
            }
            db.close().expect("close");
        }
    }

    /// Keys written just before a reopen are not cold after it: the age is
    /// counted in bands opened, not in segment seqs, whose epoch (their top
    /// bits) grows at every open and made every older key look cold (found
    /// by review).
    #[test]
    fn a_reopen_does_not_make_old_keys_cold() {
        let (fast, cap) = (MemDevice::new(64 << 20), MemDevice::new(16 << 20));
        let o = Options {
            cold_age_bands: 10,
            ..opts()
        };
        let db = Db::create(&pool(&fast, &cap), o.clone()).expect("create");
        let mut ver = vec![0u32; 900];
        for k in (0..3).chain(600..900) {
            db.put(&key(k), &val(k, 0)).expect("put");
        }
        db.close().expect("close");
        let db = Db::open(&pool(&fast, &cap), o).expect("reopen");
        open_gc_band(&db, &mut ver);
        assert!(
            copy_age(&db, 600) <= db.engine.cold_age(),
            "key 600 is young"
        );
        ver[600] = 1;
        db.put(&key(600), &val(600, 1)).expect("put");
        assert_eq!(db.engine.counters.cold_writes.load(Relaxed), 0, "not cold");
        db.close().expect("close");
    }
}
