//! Bodies of the fuzz targets in `fuzz/fuzz_targets/` (cargo-fuzz / libFuzzer).
//! Each takes arbitrary bytes and must return without panicking, hanging or
//! reading out of bounds; a decoder must answer garbage with a clean error.
//! They live here so the seed corpus (`fuzz/corpus/`) also runs as an ordinary
//! test on stable Rust (`tests/it/fuzz_corpus.rs`).

use masse::device::{AlignedBuf, Device, MemDevice};
use masse::format::*;
use masse::index::Index;
use masse::{Db, DeviceSpec, Options, PoolConfig};
use std::sync::{Arc, OnceLock};

/// A record: `decode_record` and `peek_record`.
pub fn record(data: &[u8]) {
    let peek = peek_record(data);
    if let Ok((h, k, v)) = decode_record(data) {
        // A decoded record is internally consistent.
        assert_eq!(k.len(), h.key_len as usize);
        assert_eq!(v.len(), h.val_len as usize);
        assert!(!k.is_empty() && k.len() <= MAX_KEY_LEN);
        assert!(peek.is_some());
    }
}

/// A segment tail: footer, then the summary it describes.
pub fn segment(data: &[u8]) {
    if let Some(f) = decode_footer(data) {
        if let Ok(entries) = decode_summary(data, &f) {
            assert_eq!(entries.len(), f.nrec as usize);
        }
    }
    let _ = SegmentHeader::decode(data);
}

/// A version-3 or -4 segment: its tail (footer, summary with derived
/// offsets), and the record codec on the same bytes, with both seq rules.
pub fn segment_v3(data: &[u8]) {
    use masse::format::v3::*;
    for rule in [SeqRule::Max, SeqRule::Follow] {
        segment_tail(data, rule);
    }
    for at in [0, 8] {
        if let Ok(r) = decode_v3_record(data.get(at..).unwrap_or_default()) {
            assert!(at + r.len <= data.len() && !r.key.is_empty());
        }
    }
    // The summary-less parse (recovery's path for a torn or damaged
    // segment), with the tag the bytes at 68 claim so marks can match.
    if let Some(t) = data.get(68..72) {
        let tag = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
        for rule in [SeqRule::Max, SeqRule::Follow] {
            let parse = masse::format::v3seg::parse_v3_records;
            let (es, end) = parse(data, tag, usize::MAX, &|_| 0, rule);
            assert!(end <= data.len());
            assert!(es.windows(2).all(|w| w[0].offset + w[0].len <= w[1].offset));
        }
    }
}

/// `segment_v3`'s tail and summary decoding with seq rule `rule`.
fn segment_tail(data: &[u8], rule: masse::format::v3::SeqRule) {
    use masse::format::v3::*;
    if let Ok((f, entries)) = decode_v3_tail(data, rule) {
        assert_eq!(entries.len(), f.nrec as usize);
    }
    // The summary decoder on its own, since fuzzed bytes rarely pass the
    // tail's checksum: `nrec` and `data_len` from the first 8 bytes.
    if let (Some(n), Some(d), Some(sum)) = (data.get(0..4), data.get(4..8), data.get(8..)) {
        let nrec = u32::from_le_bytes([n[0], n[1], n[2], n[3]]) % 4096;
        let data_len = u32::from_le_bytes([d[0], d[1], d[2], d[3]]);
        if let Ok(entries) = decode_v3_summary(sum, nrec, data_len, rule) {
            // Accepted summaries are canonical: they encode back to themselves.
            let (mut again, mut expect) = (Vec::new(), 0u64);
            for e in &entries {
                encode_v3_entry(&mut again, e, &mut expect, rule);
            }
            assert_eq!(again, sum, "a decoded summary re-encodes to the same bytes");
        }
    }
}

/// A superblock copy.
pub fn superblock(data: &[u8]) {
    let _ = Superblock::decode(data);
}

/// A superblock whose checksum is valid but whose geometry comes from the
/// input: every field of the template pool's geometry is replaced by input
/// bytes, the superblock re-encoded (a valid crc) into both copies, and the
/// pool opened. Nonsense geometry must be refused with an error, never a
/// panic (a segment size of 0 once divided by zero after the epoch was bumped).
pub fn superblock_geometry(data: &[u8]) {
    let img = template();
    let SuperblockProbe::Found(mut sb) = Superblock::decode(&img[..4096]) else {
        return;
    };
    let mut words = data
        .chunks(8)
        .map(|c| c.iter().rev().fold(0u64, |a, &b| a << 8 | b as u64));
    let mut next = |cur: u64| words.next().unwrap_or(cur);
    let g = &mut sb.geometry;
    g.segment_size = next(g.segment_size as u64) as u32;
    g.band_size = next(g.band_size);
    g.band_header_size = next(g.band_header_size as u64) as u32;
    g.iu = next(g.iu as u64) as u32;
    for b in g.bands_per_device.iter_mut() {
        *b = next(*b as u64) as u32;
    }
    g.pad_offset = next(g.pad_offset);
    g.pad_size = next(g.pad_size);
    g.ckpt_offset = next(g.ckpt_offset);
    g.ckpt_slot_size = next(g.ckpt_slot_size);
    g.data_start = next(g.data_start);
    let enc = sb.encode();
    let dev = MemDevice::new(POOL_IMAGE_SIZE);
    let mut b = AlignedBuf::new(1 << 20);
    for (i, chunk) in img.chunks(1 << 20).enumerate() {
        b.copy_from_slice(chunk);
        if i == 0 {
            b[..enc.len()].copy_from_slice(&enc);
            b[SUPERBLOCK_SIZE..SUPERBLOCK_SIZE + enc.len()].copy_from_slice(&enc);
        }
        if dev.write_at(&b, (i as u64) << 20).is_err() {
            return;
        }
    }
    if let Ok(db) = Db::open(&pool_config(&dev), opts()) {
        let _ = db.get(b"key1");
        let _ = db.put(b"after", b"fuzz");
        let _ = db.close();
    }
}

/// Every other fixed metadata block: epoch, band header, pad header, batch
/// header (with its crc over the payload), checkpoint header, band record.
pub fn metadata(data: &[u8]) {
    let _ = EpochBlock::decode(data);
    let _ = BandHeader::decode(data);
    let _ = PadHeader::decode(data);
    if let Some(h) = peek_batch(data) {
        let _ = verify_batch(data, &h);
    }
    let _ = CheckpointHeader::decode(data);
    let _ = BandRecord::decode(data);
}

/// A checkpoint's index shard image.
pub fn index_image(data: &[u8]) {
    let idx = Index::with_shards(4, 0);
    if idx.load_shard_image(1, data).is_ok() {
        // A loaded image is usable: walk it, scan it in order, probe it.
        let mut n = 0usize;
        idx.for_each_in_shard(1, |_| n += 1);
        let mut scanned = 0usize;
        idx.scan_shard(1, 0, |_, _| {
            scanned += 1;
            true
        });
        assert_eq!(n, scanned);
        assert_eq!(n, idx.len());
        let _ = idx.get(0x1234_5678_9abc_def0_0fed_cba9_8765_4321);
    }
}

/// Size of the template pool device of [`pool_image`].
pub const POOL_IMAGE_SIZE: u64 = 8 << 20;

fn pool_config(dev: &MemDevice) -> PoolConfig {
    let mut c =
        PoolConfig::capacity_only(DeviceSpec::Device(Arc::new(dev.clone()) as Arc<dyn Device>));
    c.segment_size = Some(16 << 10);
    c.band_size = Some(256 << 10);
    c
}

fn opts() -> Options {
    Options {
        histograms: false,
        background_gc: false,
        ..Options::default()
    }
}

/// The template: a small capacity-only pool with live, overwritten and deleted
/// keys, a checkpoint, and more writes after it, left as after a crash.
fn template() -> &'static [u8] {
    static T: OnceLock<Vec<u8>> = OnceLock::new();
    T.get_or_init(|| {
        let dev = MemDevice::new(POOL_IMAGE_SIZE);
        let build = || -> masse::Result<()> {
            let db = Db::create(&pool_config(&dev), opts())?;
            for i in 0..400u32 {
                db.put(
                    format!("key{i}").as_bytes(),
                    &vec![i as u8; (i % 700) as usize],
                )?;
            }
            for i in (0..400u32).step_by(7) {
                db.delete(format!("key{i}").as_bytes())?;
            }
            db.checkpoint()?;
            for i in 0..150u32 {
                db.put(format!("key{i}").as_bytes(), format!("v2-{i}").as_bytes())?;
            }
            drop(db); // crash: recovery must replay after the checkpoint
            Ok(())
        };
        let mut img = vec![0u8; POOL_IMAGE_SIZE as usize];
        if build().is_ok() {
            let mut b = AlignedBuf::new(1 << 20);
            for (i, chunk) in img.chunks_mut(1 << 20).enumerate() {
                if dev.read_at(&mut b, (i as u64) << 20).is_ok() {
                    chunk.copy_from_slice(&b);
                }
            }
        }
        img
    })
}

/// Opens a corrupted pool image: the template with `data` applied as patches
/// (`[offset u32][len u8][bytes]…`, offsets modulo the device size), then
/// reads, iterates and checks whatever opens. Errors are fine; panics are not.
pub fn pool_image(data: &[u8]) {
    let mut img = template().to_vec();
    let mut p = data;
    while p.len() >= 5 {
        let off = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize % img.len();
        let len = (p[4] as usize).min(p.len() - 5);
        let end = (off + len).min(img.len());
        img[off..end].copy_from_slice(&p[5..5 + (end - off)]);
        p = &p[5 + len..];
    }
    let dev = MemDevice::new(POOL_IMAGE_SIZE);
    let mut b = AlignedBuf::new(1 << 20);
    for (i, chunk) in img.chunks(1 << 20).enumerate() {
        if chunk.iter().any(|&x| x != 0) {
            b.copy_from_slice(chunk);
            if dev.write_at(&b, (i as u64) << 20).is_err() {
                return;
            }
        }
    }
    let Ok(db) = Db::open(&pool_config(&dev), opts()) else {
        return;
    };
    for i in (0..400u32).step_by(13) {
        let _ = db.get(format!("key{i}").as_bytes());
    }
    for kv in db.iter().take(1000) {
        let _ = kv;
    }
    let _ = db.check();
    let _ = db.put(b"after", b"fuzz");
    let _ = db.gc_once();
    let _ = db.close();
}

/// Seed inputs per target, made from real encodings: records, slices of the
/// template pool (superblock, epoch and band headers, segments, the checkpoint
/// slot) and patch lists for the pool image. Written to `fuzz/corpus/` by the
/// ignored test `write_seed_corpus`; also run directly by the corpus test.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut out: Vec<(&'static str, Vec<u8>)> = Vec::new();
    for (k, v) in [
        (&b"k"[..], &b""[..]),
        (b"key-1", b"value"),
        (&[0xffu8; 64][..], &[7u8; 300][..]),
    ] {
        let mut r = vec![0u8; record_len(k.len(), v.len())];
        encode_record(&mut r, 0x1234_5678, 42, 0, k, v);
        out.push(("record", r.clone()));
        r[RECORD_HEADER] ^= 1; // bad crc
        out.push(("record", r));
    }
    let img = template();
    let sb = img[..4096].to_vec();
    out.push(("superblock", sb));
    // The template's own geometry (no field replaced), then a few nonsense ones.
    out.push(("superblock_geometry", Vec::new()));
    out.push(("superblock_geometry", vec![0u8; 8]));
    out.push((
        "superblock_geometry",
        [16u64 << 10, 64]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect(),
    ));
    out.push((
        "superblock_geometry",
        [u64::MAX; 11]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect(),
    ));
    // Geometry of the template, to slice it (see `pool_config`).
    let dev = MemDevice::new(POOL_IMAGE_SIZE);
    if let Ok(db) = Db::create(&pool_config(&dev), opts()) {
        let g = db.geometry().clone();
        let _ = db.close();
        let at =
            |off: u64, len: usize| img[off as usize..(off as usize + len).min(img.len())].to_vec();
        out.push(("metadata", at(4096, 4096)));
        out.push(("metadata", at(8192, 4096)));
        out.push(("metadata", at(g.data_start, 4096)));
        out.push(("metadata", at(g.ckpt_offset, 4096)));
        let seg = g.segment_size as u64;
        for i in 0..3u64 {
            out.push((
                "segment",
                at(
                    g.data_start + g.band_header_size as u64 + i * seg,
                    seg as usize,
                ),
            ));
        }
        // Patch lists: a byte in the superblock, the band header, a segment, the checkpoint.
        for off in [
            16u64,
            g.data_start + 8,
            g.data_start + g.band_header_size as u64 + 100,
            g.ckpt_offset + 64,
        ] {
            let mut p = (off as u32).to_le_bytes().to_vec();
            p.push(1);
            p.push(0x5a);
            out.push(("pool_image", p));
        }
    }
    let (seg, direct) = v3_seed();
    out.push(("segment_v3", seg));
    out.push(("segment_v3", direct));
    let mut rec = Vec::new();
    let t = masse::format::v3::Trailer {
        abs: true,
        more: false,
        s: 42,
    };
    masse::format::v3::encode_v3_record(&mut rec, false, b"key", b"value", Some(t));
    out.push(("segment_v3", rec));
    let idx = Index::with_shards(4, 0);
    for i in 1..50u128 {
        let _ = idx.insert(
            i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834),
            i as u64,
        );
    }
    out.push(("index_image", idx.shard_image(1)));
    out.push(("pool_image", Vec::new()));
    out
}

/// A 32 KiB version-4 segment (a mark, then records of growing values, some
/// straddling a block, their summary and footer), and the same summary as
/// `segment_v3` reads it on its own (`nrec`, `data_len`, summary).
fn v3_seed() -> (Vec<u8>, Vec<u8>) {
    use masse::format::v3::*;
    let (mut data, mut sum) = (vec![0u8; SEG_HEADER], Vec::new());
    let rule = SeqRule::Follow;
    let (mut cur, mut expect) = (masse::format::v3seg::V3Cursor::new(rule), 0u64);
    for i in 0..20u64 {
        let value = vec![i as u8; (i * 97) as usize];
        let s = cur.slot(V3_HEADER + 3 + value.len(), 100 + i, i % 5 == 1, false);
        if let Some((m, back)) = s.mark_back() {
            data.resize(m, 0);
            encode_mark(&mut data, 7, back);
        }
        data.resize(s.spot.record, 0);
        encode_v3_record(&mut data, false, b"key", &value, s.trailer);
        encode_v3_entry(
            &mut sum,
            &s.entry(i as u128, 100 + i, false),
            &mut expect,
            rule,
        );
        cur.advance(&s, 100 + i);
    }
    let mut seg = vec![0u8; 32 << 10];
    seg[..data.len()].copy_from_slice(&data);
    let f = V3Footer {
        rule,
        segment_seq: 1,
        pool_tag: 2,
        nrec: 20,
        nslots: 1,
        data_len: data.len() as u32,
        sum_len: sum.len() as u32,
        min_seq: 100,
        max_seq: 119,
    };
    encode_v3_tail(&mut seg, &sum, &f);
    assert!(
        decode_v3_tail(&seg, rule).is_ok(),
        "the v3 seed is a valid segment"
    );
    let mut direct = 20u32.to_le_bytes().to_vec();
    direct.extend_from_slice(&(data.len() as u32).to_le_bytes());
    direct.extend_from_slice(&sum);
    (seg, direct)
}

/// Every target by name, for the corpus runner and the fuzz binaries.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("record", record),
    ("segment", segment),
    ("segment_v3", segment_v3),
    ("superblock", superblock),
    ("superblock_geometry", superblock_geometry),
    ("metadata", metadata),
    ("index_image", index_image),
    ("pool_image", pool_image),
];
