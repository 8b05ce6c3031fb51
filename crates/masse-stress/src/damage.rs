//! Metadata damage: after a scenario (a clean close, or a crash), flip a byte
//! in one metadata block of every kind the pool holds — superblock copies,
//! epoch blocks, pad headers, pad batches, checkpoint headers and payloads,
//! band headers, segment headers, summaries and footers — reopen, and check
//! what the engine promises about damage (design.md §11):
//!
//! * **loss is limited to the damaged unit**: only keys whose records the
//!   damaged block describes (its segment, band or pad batch) may change;
//! * **it is reported**: a key that lost its value is allowed only if recovery
//!   warned, counted a corruption, `check` complained, or the read itself
//!   returned `Corruption` — never a silent older value;
//! * **the database stays up**: open succeeds, and later writes, GC, a
//!   checkpoint, a close and a reopen work.
//!
//! Where the format keeps a structure whose loss is defined as fatal — both
//! superblock copies of a device (the device is no longer a pool), both epoch
//! copies, both pad headers — a failed open is counted as such
//! ([`fatal_as_defined`]), not as a failure.

use crate::enumerate::model::{describe_value, key_bytes, value_bytes, Expected, Val};
use crate::enumerate::script::{options, Recorded, Setup};
use crate::enumerate::{rebuild, STATE_TIMEOUT};
use crate::gen::parse_key;
use crate::trace::{BlockId, Image, BLOCK};
use crate::workload::Rng;
use masse::device::{AlignedBuf, Device, MemDevice};
use masse::format::*;
use masse::{Db, Error};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc;

/// Kinds of metadata block.
pub const KINDS: &[&str] = &[
    "superblock (one copy)",
    "superblock (both copies)",
    "epoch block (one copy)",
    "epoch block (both copies)",
    "pad header (one copy)",
    "pad header (both copies)",
    "pad batch header",
    "pad batch payload",
    "checkpoint header",
    "checkpoint payload",
    "band header",
    "segment header",
    "segment summary",
    "segment footer",
];

/// Damage the format defines as fatal: the open may fail (with a clear
/// error) instead of recovering. Everything else must open.
pub fn fatal_as_defined(kind: &str) -> bool {
    kind.ends_with("(both copies)")
}

/// One damaged block.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Target {
    /// One of [`KINDS`].
    pub kind: String,
    /// Which block, e.g. `band 3 slot 5 footer`.
    pub what: String,
    /// Bytes flipped: (device, offset, xor mask).
    pub flips: Vec<(u8, u64, u8)>,
    /// Keys whose records the block describes: the only keys allowed to lose
    /// their value (and only if the loss is reported).
    pub unit: BTreeSet<u32>,
    /// The block belongs to the newest batch of the pad log. Recovery cannot
    /// tell its damage from a write torn by the crash (nothing follows it to
    /// prove it was complete), so the format defines it as the log's end
    /// (format.md §13): its unit may be lost unreported. Such losses are
    /// counted apart ([`DamageFigures::frontier_losses`]), never hidden.
    #[serde(default)]
    pub frontier: bool,
}

/// How much to damage.
#[derive(Clone, Debug, Serialize)]
pub struct DamageConfig {
    /// Seed of the byte choices and of sampling.
    pub seed: u64,
    /// At most this many blocks of each kind per image (a seeded sample).
    pub per_kind: usize,
    /// Crash images per scenario run, besides the clean close.
    pub crash_images: usize,
    /// Threads.
    pub jobs: usize,
}

impl Default for DamageConfig {
    fn default() -> Self {
        DamageConfig {
            seed: 1,
            per_kind: usize::MAX,
            crash_images: 2,
            jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
        }
    }
}

/// What damage did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DamageFigures {
    /// Images damaged (clean closes and crash states).
    pub images: u64,
    /// Blocks damaged, one reopen each.
    pub blocks_damaged: u64,
    /// Per kind.
    pub by_kind: BTreeMap<String, u64>,
    /// Opens that failed where the format defines the damage as fatal.
    pub fatal_as_defined: u64,
    /// Keys that lost their value inside the damaged unit, reported.
    pub keys_lost_reported: u64,
    /// Keys that lost their value with nothing reported.
    pub silent_losses: u64,
    /// Keys of the pad log's newest batch lost unreported: the format cannot
    /// tell that damage from a torn write ([`Target::frontier`]).
    pub frontier_losses: u64,
    /// Keys that lost their value outside the damaged unit.
    pub losses_beyond_unit: u64,
    /// Damage after which the database did not open or stopped working.
    pub database_down: u64,
    /// Damaged blocks that broke a guarantee.
    pub failures: u64,
}

/// One broken guarantee.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DamageSpec {
    /// Crash point of the image (`events.len()`: the clean close).
    pub k: usize,
    /// Unsynced blocks lost at that crash point.
    pub lost: Vec<BlockId>,
    /// The damage.
    pub target: Target,
    /// What went wrong.
    pub symptom: Vec<String>,
}

fn read(img: &Image, dev: u8, off: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let Some(m) = img.blocks.get(dev as usize) else {
        return out;
    };
    let first = off / BLOCK * BLOCK;
    for (&o, b) in m.range(first..off + len as u64) {
        for (i, &x) in b.iter().enumerate() {
            let p = o + i as u64;
            if p >= off && p < off + len as u64 {
                out[(p - off) as usize] = x;
            }
        }
    }
    out
}

/// Keys of the records a segment span holds (version 2: records carry their
/// segment's tag; versions 3 and 4: its block marks do).
fn segment_keys(codec: Codec, span: &[u8], seq: u64, bound: u64) -> BTreeSet<u32> {
    let tag = seg_tag(seq);
    let mut keys = BTreeSet::new();
    if codec.v3_records() {
        let found = std::cell::RefCell::new(BTreeSet::new());
        let digest = |k: &[u8]| {
            if let Some(i) = parse_key(k, bound) {
                found.borrow_mut().insert(i as u32);
            }
            0
        };
        let (_, _) = v3seg::parse_v3_records(span, tag, usize::MAX, &digest, codec.seq_rule());
        return found.into_inner();
    }
    let mut o = SEG_HEADER;
    while o + RECORD_HEADER <= span.len() {
        match decode_record(&span[o..]) {
            Ok((h, k, _)) if h.seg_tag == tag => {
                if let Some(i) = parse_key(k, bound) {
                    keys.insert(i as u32);
                }
                o += h.total_len().div_ceil(8) * 8;
            }
            _ => o += 8,
        }
    }
    keys
}

fn batch_keys(codec: Codec, payload: &[u8], bound: u64) -> BTreeSet<u32> {
    let mut keys = BTreeSet::new();
    let mut o = 0;
    while let Some(Ok(r)) = payload.get(o..).map(|b| codec.decode(b)) {
        if let Some(i) = parse_key(r.key, bound) {
            keys.insert(i as u32);
        }
        o += match codec {
            Codec::V2 => r.len.div_ceil(8) * 8,
            Codec::V3 | Codec::V4 => r.len,
        };
    }
    keys
}

struct Ctx<'a> {
    img: &'a Image,
    geo: Geometry,
    codec: Codec,
    tag: u64,
    fast: u8,
    bound: u64,
    rng: Rng,
    out: Vec<Target>,
}

impl Ctx<'_> {
    fn add(&mut self, kind: &str, what: String, at: &[(u8, u64, u64)], unit: BTreeSet<u32>) {
        // One byte in each given range (device, start, length).
        let flips = at
            .iter()
            .map(|&(d, s, len)| (d, s + self.rng.below(len.max(1)), 1u8 << self.rng.below(8)))
            .collect();
        self.out.push(Target {
            kind: kind.to_string(),
            what,
            flips,
            unit,
            frontier: false,
        });
    }

    fn cap(&self, ci: usize) -> u8 {
        self.fast + ci as u8
    }
}

/// `(records, summary bytes)` of the valid footer of segment `seq` in `span`.
fn summary_of(codec: Codec, span: &[u8], seq: u64) -> Option<(u32, u64)> {
    match codec {
        Codec::V2 => decode_footer(span)
            .filter(|f| f.segment_seq == seq)
            .map(|f| (f.nrec, f.nrec as u64 * SUMMARY_ENTRY as u64)),
        Codec::V3 | Codec::V4 => v3::decode_v3_tail(span, codec.seq_rule())
            .ok()
            .filter(|(f, _)| f.segment_seq == seq)
            .map(|(f, _)| (f.nrec, f.sum_len as u64)),
    }
}

/// Every metadata block of the pool in `img`, as damage targets.
pub fn targets(img: &Image, exp: &Expected, seed: u64) -> Vec<Target> {
    let SuperblockProbe::Found(sb) = Superblock::decode(&read(img, 0, 0, 4096)) else {
        return Vec::new();
    };
    let fast = u8::from(sb.geometry.has_fast);
    let mut c = Ctx {
        img,
        tag: sb.pool_id as u64,
        codec: Codec::of_version(sb.version),
        geo: sb.geometry,
        fast,
        bound: exp.acked.keys().next_back().map_or(0, |k| *k as u64 + 1),
        rng: Rng::new(seed),
        out: Vec::new(),
    };
    for d in 0..img.sizes.len() as u8 {
        let name = if d < fast {
            "fast".to_string()
        } else {
            format!("cap{}", d - fast)
        };
        for copy in 0..2u64 {
            c.add(
                "superblock (one copy)",
                format!("{name} superblock copy {copy}"),
                &[(d, copy * 4096 + 16, 104)],
                BTreeSet::new(),
            );
        }
        c.add(
            "superblock (both copies)",
            format!("{name} superblocks"),
            &[(d, 16, 104), (d, 4096 + 16, 104)],
            BTreeSet::new(),
        );
    }
    two_copies(&mut c, "epoch block", EPOCH_OFFSET, |b, t| {
        EpochBlock::decode(b).is_some_and(|e| e.pool_tag == t)
    });
    if c.geo.has_fast {
        two_copies(&mut c, "pad header", EPOCH_OFFSET + EPOCH_AREA, |b, t| {
            PadHeader::decode(b).is_some_and(|h| h.pool_tag == t)
        });
        pad_batches(&mut c);
    }
    checkpoints(&mut c);
    bands(&mut c);
    c.out
}

fn two_copies(c: &mut Ctx, name: &str, at: u64, valid: impl Fn(&[u8], u64) -> bool) {
    let ok: Vec<u64> = (0..2u64)
        .filter(|i| valid(&read(c.img, 0, at + i * 4096, 4096), c.tag))
        .collect();
    for &i in &ok {
        c.add(
            &format!("{name} (one copy)"),
            format!("{name} copy {i}"),
            &[(0, at + i * 4096 + 8, 56)],
            BTreeSet::new(),
        );
    }
    c.add(
        &format!("{name} (both copies)"),
        format!("{name}s"),
        &[(0, at + 8, 56), (0, at + 4096 + 8, 56)],
        BTreeSet::new(),
    );
}

fn pad_batches(c: &mut Ctx) {
    let at = EPOCH_OFFSET + EPOCH_AREA;
    let hdr = (0..2u64)
        .filter_map(|i| PadHeader::decode(&read(c.img, 0, at + i * 4096, 4096)))
        .filter(|h| h.pool_tag == c.tag)
        .max_by_key(|h| h.hdr_seq);
    let Some(h) = hdr else { return };
    let (base, size) = (c.geo.pad_offset, c.geo.pad_size);
    let (mut v, mut expect, mut n) = (h.tail, h.tail_batch_seq, 0);
    // Targets of the newest data batch start here (none if the log ends in a
    // wrap marker: that is a later batch, so damage before it is provable).
    let mut newest = None;
    while n < size / BLOCK {
        n += 1;
        let phys = base + v % size;
        let first = read(c.img, 0, phys, 4096);
        let Some(bh) = peek_batch(&first) else { break };
        let total = (BATCH_HEADER + bh.payload_len as usize).div_ceil(4096) * 4096;
        if bh.pool_tag != c.tag
            || bh.batch_seq != expect
            || bh.virt != v
            || v % size + total as u64 > size
        {
            break;
        }
        let whole = read(c.img, 0, phys, total);
        if !verify_batch(&whole, &bh) {
            break;
        }
        if bh.flags & BATCH_WRAP != 0 {
            v = (v / size + 1) * size;
            newest = None;
        } else {
            newest = Some(c.out.len());
            let unit = batch_keys(
                c.codec,
                &whole[BATCH_HEADER..BATCH_HEADER + bh.payload_len as usize],
                c.bound,
            );
            let what = format!("pad batch {} (virt {v:#x})", bh.batch_seq);
            c.add(
                "pad batch header",
                format!("{what} header"),
                &[(0, phys + 8, 56)],
                unit.clone(),
            );
            c.add(
                "pad batch payload",
                format!("{what} payload"),
                &[(0, phys + BATCH_HEADER as u64, bh.payload_len as u64)],
                unit,
            );
            v += total as u64;
        }
        expect += 1;
    }
    if let Some(i) = newest {
        c.out[i..].iter_mut().for_each(|t| t.frontier = true);
    }
}

fn checkpoints(c: &mut Ctx) {
    let (off, size) = (c.geo.ckpt_offset, c.geo.ckpt_slot_size);
    for slot in 0..2u64 {
        let at = off + slot * size;
        let Some(h) = CheckpointHeader::decode(&read(c.img, 0, at, 4096)) else {
            continue;
        };
        if h.pool_tag != c.tag || h.payload_len == 0 {
            continue;
        }
        let what = format!("checkpoint {} (slot {slot})", h.ckpt_seq);
        c.add(
            "checkpoint header",
            format!("{what} header"),
            &[(0, at + 8, 120)],
            BTreeSet::new(),
        );
        let table = (h.bands as u64 * BAND_RECORD as u64).min(h.payload_len);
        c.add(
            "checkpoint payload",
            format!("{what} band table"),
            &[(0, at + CKPT_HEADER, table)],
            BTreeSet::new(),
        );
        if h.payload_len > table {
            c.add(
                "checkpoint payload",
                format!("{what} index images"),
                &[(0, at + CKPT_HEADER + table, h.payload_len - table)],
                BTreeSet::new(),
            );
        }
    }
}

fn bands(c: &mut Ctx) {
    for b in 0..c.geo.bands() {
        let Some((ci, off)) = c.geo.band_addr(b) else {
            continue;
        };
        let d = c.cap(ci);
        let Some(h) = BandHeader::decode(&read(c.img, d, off, 4096)) else {
            continue;
        };
        if h.pool_tag != c.tag || h.band != b {
            continue;
        }
        let (unit, state) = if h.state == BAND_IN_USE {
            (segments(c, b, h.first_seq), "in use")
        } else {
            (BTreeSet::new(), "free")
        };
        let what = format!("band {b} header ({state})");
        c.add("band header", what, &[(d, off + 12, 52)], unit);
    }
}

/// The segments of in-use band `b` as targets; returns the band's keys.
fn segments(c: &mut Ctx, b: u32, first_seq: u64) -> BTreeSet<u32> {
    let spb = c.geo.slots_per_band();
    let seg = c.geo.segment_size as u64;
    let mut band_unit = BTreeSet::new();
    let mut i = 0;
    while i < spb {
        let Some((ci, so)) = c.geo.slot_addr(b as u64 * spb + i) else {
            break;
        };
        let d = c.cap(ci);
        let Some(sh) = SegmentHeader::decode(&read(c.img, d, so, 4096)) else {
            break;
        };
        let k = sh.nslots.max(1) as u64;
        if sh.pool_tag != c.tag || sh.segment_seq < first_seq || i + k > spb {
            break;
        }
        let span = read(c.img, d, so, (k * seg) as usize);
        let unit = segment_keys(c.codec, &span, sh.segment_seq, c.bound);
        let what = format!("band {b} slot {i}");
        c.add(
            "segment header",
            format!("{what} header"),
            &[(d, so + 8, 56)],
            unit.clone(),
        );
        if let Some((nrec, len)) = summary_of(c.codec, &span, sh.segment_seq) {
            let foot = so + k * seg - SEG_FOOTER as u64;
            c.add(
                "segment footer",
                format!("{what} footer"),
                &[(d, foot + 8, 56)],
                unit.clone(),
            );
            if nrec > 0 {
                c.add(
                    "segment summary",
                    format!("{what} summary"),
                    &[(d, foot - len, len)],
                    unit.clone(),
                );
            }
        }
        band_unit.extend(unit);
        i += k;
    }
    band_unit
}

/// What one damaged block led to.
#[derive(Debug, Default)]
pub struct Verdict {
    /// The open failed and the format defines this damage as fatal.
    pub fatal_as_defined: bool,
    /// Keys that lost their value inside the unit, reported.
    pub lost_reported: u64,
    /// Keys that lost their value silently.
    pub silent: u64,
    /// Keys of the pad log's newest batch lost unreported, as the format
    /// defines ([`Target::frontier`]).
    pub frontier: u64,
    /// Keys that lost their value outside the unit.
    pub beyond: u64,
    /// The database did not open or stopped working.
    pub down: bool,
    /// Broken guarantees (empty: fine).
    pub symptom: Vec<String>,
}

/// Flips the target's bytes on `devs` (synced).
pub fn apply(devs: &[MemDevice], t: &Target) {
    for &(d, off, mask) in &t.flips {
        let Some(dev) = devs.get(d as usize) else {
            continue;
        };
        let at = off / BLOCK * BLOCK;
        let mut b = AlignedBuf::new(BLOCK as usize);
        if dev.read_at(&mut b, at).is_ok() {
            b[(off - at) as usize] ^= mask;
            let _ = dev.write_at(&b, at);
            let _ = dev.sync();
        }
    }
}

type Found = BTreeMap<u32, Result<Option<Vec<u8>>, String>>;

/// Damages `img` as `t` says, opens it, and checks the guarantees.
pub fn check_target(setup: &Setup, img: &Image, exp: &Expected, t: &Target) -> Verdict {
    let mut v = Verdict::default();
    let devs = img.to_devices();
    apply(&devs, t);
    let db = match Db::open(&setup.config_mem(&devs), options(&setup)) {
        Ok(db) => db,
        Err(e) if fatal_as_defined(&t.kind) => {
            v.fatal_as_defined = true;
            let _ = e;
            return v;
        }
        Err(e) => {
            v.down = true;
            v.symptom.push(format!("open failed: {e}"));
            return v;
        }
    };
    let st = db.stats();
    let mut reported = !st.recovery_warnings.is_empty() || st.corruptions > 0;
    let (found, lost, corrupt) = classify(&db, exp, &mut v);
    match db.check() {
        Ok(r) => reported |= !r.is_clean(),
        Err(e) => {
            v.down = true;
            v.symptom.push(format!("check failed: {e}"));
        }
    }
    let beyond: Vec<u32> = lost
        .iter()
        .chain(&corrupt)
        .filter(|k| !t.unit.contains(k))
        .copied()
        .collect();
    if !beyond.is_empty() {
        v.beyond = beyond.len() as u64;
        v.symptom.push(format!(
            "loss beyond the damaged unit: keys {}",
            keys_text(&beyond, exp, &found)
        ));
    }
    let inside: Vec<u32> = lost
        .iter()
        .filter(|k| t.unit.contains(k))
        .copied()
        .collect();
    if !inside.is_empty() && !reported && t.frontier {
        v.frontier = inside.len() as u64;
    } else if !inside.is_empty() && !reported {
        v.silent = inside.len() as u64;
        v.symptom.push(format!(
            "silent loss (no recovery warning, no corruption counted, check clean): keys {}",
            keys_text(&inside, exp, &found)
        ));
    } else {
        v.lost_reported =
            (inside.len() + corrupt.iter().filter(|k| t.unit.contains(k)).count()) as u64;
    }
    if let Err(e) = keep_working(setup, &devs, db, exp, &found, &t.unit) {
        v.down = true;
        v.symptom.push(e);
    }
    if !v.symptom.is_empty() {
        v.symptom.push(format!(
            "recovery: {} warnings {:?}, {} corruptions",
            st.recovery_warnings.len(),
            &st.recovery_warnings[..st.recovery_warnings.len().min(3)],
            st.corruptions
        ));
    }
    v
}

fn keys_text(keys: &[u32], exp: &Expected, found: &Found) -> String {
    let mut s: Vec<String> = keys
        .iter()
        .take(4)
        .map(|k| {
            let now = match found.get(k) {
                Some(Ok(g)) => describe_value(*k, g.as_deref()),
                Some(Err(e)) => e.clone(),
                None => "?".into(),
            };
            let want = match exp.acked.get(k).copied().flatten() {
                Some(v) => format!("version {}", v.ver),
                None => "absence".into(),
            };
            format!("{k} (reads {now}, expected {want})")
        })
        .collect();
    if keys.len() > 4 {
        s.push(format!("… {} in all", keys.len()));
    }
    s.join(", ")
}

/// Reads every key: (what each read gave, keys with a wrong value, keys that
/// read as `Corruption`). Values never written for a key break a guarantee
/// whatever was damaged.
fn classify(db: &Db, exp: &Expected, v: &mut Verdict) -> (Found, Vec<u32>, Vec<u32>) {
    let (mut found, mut lost, mut corrupt) = (Found::new(), Vec::new(), Vec::new());
    for (&k, acked) in &exp.acked {
        let alts = exp
            .in_flight
            .iter()
            .flat_map(|(_, g)| g.iter().flatten())
            .filter(|(kk, _)| *kk == k);
        match db.get(&key_bytes(k)) {
            Ok(g) => {
                let ok = crate::enumerate::model::state_matches(k, acked, &g)
                    || alts
                        .clone()
                        .any(|(_, s)| crate::enumerate::model::state_matches(k, s, &g));
                if !ok {
                    if describe_value(k, g.as_deref()).contains("never written") {
                        v.symptom
                            .push(format!("key {k} holds a value never written for it"));
                    }
                    lost.push(k);
                }
                found.insert(k, Ok(g));
            }
            Err(Error::Corruption(e)) => {
                corrupt.push(k);
                found.insert(k, Err(format!("Corruption ({e})")));
            }
            Err(e) => {
                v.down = true;
                v.symptom.push(format!("get of key {k} failed: {e}"));
                found.insert(k, Err(e.to_string()));
            }
        }
    }
    (found, lost, corrupt)
}

/// After damage the database keeps working: writes, GC, a checkpoint, a
/// close and a reopen succeed, the new writes read back, and nothing else
/// changes on the way.
fn keep_working(
    setup: &Setup,
    devs: &[MemDevice],
    db: Db,
    exp: &Expected,
    found: &Found,
    unit: &BTreeSet<u32>,
) -> Result<(), String> {
    let mut picks: Vec<u32> = unit.iter().next().copied().into_iter().collect();
    picks.extend(exp.acked.keys().next());
    picks.extend(exp.acked.keys().next_back());
    picks.dedup();
    let mut wrote: BTreeMap<u32, Val> = BTreeMap::new();
    for (j, &k) in picks.iter().enumerate() {
        let val = Val {
            ver: 1_000_000 + j as u32,
            len: 700,
        };
        db.put(&key_bytes(k), &value_bytes(k, val))
            .map_err(|e| format!("the database went down: a put after the damage failed: {e}"))?;
        wrote.insert(k, val);
    }
    db.gc_once()
        .map_err(|e| format!("the database went down: GC after the damage failed: {e}"))?;
    db.checkpoint().map_err(|e| {
        format!("the database went down: a checkpoint after the damage failed: {e}")
    })?;
    db.close()
        .map_err(|e| format!("the database went down: close after the damage failed: {e}"))?;
    let db = Db::open(&setup.config_mem(devs), options(setup))
        .map_err(|e| format!("the database went down: reopen after the damage failed: {e}"))?;
    for (&k, before) in found {
        let now = db.get(&key_bytes(k)).map_err(|e| match e {
            Error::Corruption(e) => format!("Corruption ({e})"),
            e => e.to_string(),
        });
        let want: Result<Option<Vec<u8>>, String> = match wrote.get(&k) {
            Some(v) => Ok(Some(value_bytes(k, *v))),
            None => before.clone(),
        };
        let same = match (&now, &want) {
            (Ok(a), Ok(b)) => a == b,
            (Err(_), Err(_)) => true,
            _ => false,
        };
        if !same {
            let show = |r: &Result<Option<Vec<u8>>, String>| match r {
                Ok(g) => describe_value(k, g.as_deref()),
                Err(e) => e.clone(),
            };
            return Err(format!(
                "after writes, GC, a checkpoint and a reopen, key {k} reads {} instead of {}",
                show(&now),
                show(&want)
            ));
        }
    }
    db.close()
        .map_err(|e| format!("close after the reopen failed: {e}"))
}

/// Runs `f` on its own thread; `None` if it did not finish in
/// [`STATE_TIMEOUT`] (the thread is left behind).
fn timed<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("masse-damage-check".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .ok()?;
    rx.recv_timeout(STATE_TIMEOUT).ok()
}

/// At most `per_kind` targets of each kind (a seeded sample).
fn sample(targets: Vec<Target>, per_kind: usize, seed: u64) -> Vec<Target> {
    let mut by: BTreeMap<String, Vec<Target>> = BTreeMap::new();
    for t in targets {
        by.entry(t.kind.clone()).or_default().push(t);
    }
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for (_, mut v) in by {
        while v.len() > per_kind {
            let i = rng.below(v.len() as u64) as usize;
            v.swap_remove(i);
        }
        out.extend(v);
    }
    out
}

/// The images of a run that get damaged: its clean close, and `n` crash
/// states (every unsynced block lost) at evenly spaced crash points.
pub fn images(rec: &Recorded, n: usize) -> Vec<(usize, Vec<BlockId>)> {
    let pts: Vec<usize> = (rec.first_crash.max(1)..=rec.events.len())
        .filter(|&k| rec.events[k - 1].is_device_event())
        .collect();
    let mut out = vec![(rec.events.len(), Vec::new())];
    for j in 0..n.min(pts.len()) {
        let k = pts[(j + 1) * pts.len() / (n + 1)];
        let mut rp = crate::trace::Replayer::new(&rec.base);
        rec.events[..k].iter().for_each(|e| rp.apply(e));
        out.push((k, rp.unsynced()));
    }
    out
}

/// Damages every metadata block (or a sample) of each image of `rec`.
/// Crash images that already fail as ordinary crash states are skipped.
pub fn damage_run(
    rec: &Recorded,
    cfg: &DamageConfig,
    mut progress: impl FnMut(u64, u64),
) -> (DamageFigures, Vec<DamageSpec>) {
    let mut fig = DamageFigures::default();
    let mut fails = Vec::new();
    for (k, lost) in images(rec, cfg.crash_images) {
        let lost_set: BTreeSet<BlockId> = lost.iter().copied().collect();
        let (devs, exp, _) = rebuild(rec, k, &lost_set);
        let Ok(img) = Image::read(&devs) else {
            continue;
        };
        if k < rec.events.len()
            && !crate::enumerate::check_state(&rec.setup, &devs, &exp)
                .violations
                .is_empty()
        {
            continue;
        }
        fig.images += 1;
        let ts = sample(
            targets(&img, &exp, cfg.seed ^ k as u64),
            cfg.per_kind,
            cfg.seed ^ k as u64,
        );
        let total = ts.len() as u64;
        let results = check_all(&rec.setup, &img, &exp, ts, cfg.jobs, &mut progress, total);
        for (t, v) in results {
            fig.blocks_damaged += 1;
            *fig.by_kind.entry(t.kind.clone()).or_default() += 1;
            fig.fatal_as_defined += u64::from(v.fatal_as_defined);
            fig.keys_lost_reported += v.lost_reported;
            fig.silent_losses += v.silent;
            fig.frontier_losses += v.frontier;
            fig.losses_beyond_unit += v.beyond;
            fig.database_down += u64::from(v.down);
            if !v.symptom.is_empty() {
                fig.failures += 1;
                fails.push(DamageSpec {
                    k,
                    lost: lost.clone(),
                    target: t,
                    symptom: v.symptom,
                });
            }
        }
    }
    (fig, fails)
}

fn check_all(
    setup: &Setup,
    img: &Image,
    exp: &Expected,
    ts: Vec<Target>,
    jobs: usize,
    progress: &mut dyn FnMut(u64, u64),
    total: u64,
) -> Vec<(Target, Verdict)> {
    let queue = std::sync::Mutex::new(ts);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            let tx = tx.clone();
            let queue = &queue;
            s.spawn(move || loop {
                let Some(t) = queue.lock().ok().and_then(|mut q| q.pop()) else {
                    return;
                };
                let (setup, img, exp, t2) = (setup.clone(), img.clone(), exp.clone(), t.clone());
                let v = timed(move || check_target(&setup, &img, &exp, &t2)).unwrap_or_else(|| {
                    Verdict {
                        down: true,
                        symptom: vec![format!(
                            "hang: open and checks did not finish in {} s",
                            STATE_TIMEOUT.as_secs()
                        )],
                        ..Default::default()
                    }
                });
                let _ = tx.send((t, v));
            });
        }
        drop(tx);
        let mut out = Vec::new();
        for r in rx {
            out.push(r);
            progress(out.len() as u64, total);
        }
        out
    })
}

/// A clean close or a crash image, for reports.
pub fn image_name(rec: &Recorded, k: usize) -> String {
    if k >= rec.events.len() {
        "after a clean close".into()
    } else {
        format!("after a crash at event {k}")
    }
}

/// Rebuilds the image of a saved damage failure, damages it again and checks.
pub fn replay_damage(rec: &Recorded, spec: &DamageSpec) -> Verdict {
    let lost: BTreeSet<BlockId> = spec.lost.iter().copied().collect();
    let (devs, exp, _) = rebuild(rec, spec.k, &lost);
    match Image::read(&devs) {
        Ok(img) => check_target(&rec.setup, &img, &exp, &spec.target),
        Err(e) => Verdict {
            symptom: vec![format!("reading the image: {e}")],
            ..Default::default()
        },
    }
}

/// One damage failure, as reported.
#[derive(Clone, Debug, Serialize)]
pub struct DamageFailure {
    /// Scenario name.
    pub scenario: String,
    /// Pool mode.
    pub mode: String,
    /// `after a clean close` or `after a crash at event k`.
    pub image: String,
    /// The case.
    pub spec: DamageSpec,
    /// The saved trace, if any.
    pub trace_file: Option<std::path::PathBuf>,
    /// Command that rebuilds and damages the image again.
    pub replay: Option<String>,
}

impl std::fmt::Display for DamageFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = &self.spec.target;
        writeln!(
            f,
            "{} ({}), {}: {} damaged [{}]",
            self.scenario, self.mode, self.image, t.what, t.kind
        )?;
        for s in &self.spec.symptom {
            writeln!(f, "    {s}")?;
        }
        if let Some(r) = &self.replay {
            writeln!(f, "    replay: {r}")?;
        }
        Ok(())
    }
}

/// What damage did to one scenario in one mode.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DamageScenarioReport {
    /// Scenario name.
    pub scenario: String,
    /// Pool mode.
    pub mode: String,
    /// Figures.
    pub figures: DamageFigures,
    /// Failing cases by kind of block (all of them counted).
    pub failures_by_kind: BTreeMap<String, u64>,
    /// The first failure of each kind of block and symptom.
    pub failures: Vec<DamageFailure>,
    /// Wall time.
    pub seconds: f64,
}

/// What a damage run found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DamageReport {
    /// Per scenario and mode.
    pub scenarios: Vec<DamageScenarioReport>,
    /// Totals.
    pub total: DamageFigures,
    /// Wall time.
    pub seconds: f64,
}

impl DamageFigures {
    fn add(&mut self, o: &DamageFigures) {
        self.images += o.images;
        self.blocks_damaged += o.blocks_damaged;
        for (k, v) in &o.by_kind {
            *self.by_kind.entry(k.clone()).or_default() += v;
        }
        self.fatal_as_defined += o.fatal_as_defined;
        self.keys_lost_reported += o.keys_lost_reported;
        self.silent_losses += o.silent_losses;
        self.frontier_losses += o.frontier_losses;
        self.losses_beyond_unit += o.losses_beyond_unit;
        self.database_down += o.database_down;
        self.failures += o.failures;
    }
}

/// Runs the scenarios matching `filter` (all when empty) in the modes
/// matching `modes` (all when empty) and damages their metadata; failing
/// runs are saved to `save_dir`. `progress(scenario, mode, done, total)`.
pub fn run_all(
    filter: &[String],
    modes: &[String],
    cfg: &DamageConfig,
    scale: u32,
    save_dir: Option<&std::path::Path>,
    progress: &mut dyn FnMut(&str, &str, u64, u64),
) -> DamageReport {
    let t0 = std::time::Instant::now();
    let mut rep = DamageReport::default();
    for sc in crate::enumerate::scenarios::all() {
        if !filter.is_empty() && !filter.iter().any(|f| f == sc.name) {
            continue;
        }
        for &mode in sc.modes {
            if !modes.is_empty() && !modes.iter().any(|m| m == mode) {
                continue;
            }
            let t1 = std::time::Instant::now();
            let mut r = DamageScenarioReport {
                scenario: sc.name.to_string(),
                mode: mode.to_string(),
                ..Default::default()
            };
            match sc.record(mode, scale) {
                Ok(rec) => {
                    let (fig, fails) = damage_run(&rec, cfg, |d, t| progress(sc.name, mode, d, t));
                    r.figures = fig;
                    report(&mut r, &rec, fails, save_dir);
                }
                Err(v) => {
                    r.figures.failures = 1;
                    *r.failures_by_kind
                        .entry("scenario (live run)".into())
                        .or_default() += 1;
                    let target = Target {
                        kind: "scenario (live run)".into(),
                        what: "nothing".into(),
                        flips: Vec::new(),
                        unit: BTreeSet::new(),
                        frontier: false,
                    };
                    r.failures.push(DamageFailure {
                        scenario: r.scenario.clone(),
                        mode: r.mode.clone(),
                        image: "live run".into(),
                        spec: DamageSpec {
                            k: 0,
                            lost: Vec::new(),
                            target,
                            symptom: vec![v.0],
                        },
                        trace_file: None,
                        replay: None,
                    });
                }
            }
            r.seconds = t1.elapsed().as_secs_f64();
            rep.total.add(&r.figures);
            rep.scenarios.push(r);
        }
    }
    rep.seconds = t0.elapsed().as_secs_f64();
    rep
}

fn report(
    r: &mut DamageScenarioReport,
    rec: &Recorded,
    fails: Vec<DamageSpec>,
    dir: Option<&std::path::Path>,
) {
    if fails.is_empty() {
        return;
    }
    let file = dir.and_then(|d| {
        crate::enumerate::save_run_with(rec, &r.scenario, "damage", &[], &fails, d).ok()
    });
    let mut seen = BTreeSet::new();
    for spec in fails {
        *r.failures_by_kind
            .entry(spec.target.kind.clone())
            .or_default() += 1;
        let sig = crate::enumerate::signature(spec.symptom.first().map_or("", |s| s.as_str()));
        if !seen.insert((spec.target.kind.clone(), sig)) {
            continue;
        }
        r.failures.push(DamageFailure {
            scenario: r.scenario.clone(),
            mode: r.mode.clone(),
            image: image_name(rec, spec.k),
            spec,
            trace_file: file.clone(),
            replay: file.as_deref().map(crate::enumerate::replay_command),
        });
    }
}
