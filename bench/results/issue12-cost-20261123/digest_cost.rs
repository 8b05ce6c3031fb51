// Cost of the index digest per key: unkeyed XXH3-128 (format v1) vs keyed SipHash-2-4-128 (v2).
use siphasher::sip128::{Hasher128, SipHasher24};
use std::hash::Hasher;
use std::time::Instant;
fn main() {
    let n = 20_000_000u64;
    for len in [23usize, 64, 256] {
        let keys: Vec<Vec<u8>> = (0..1024u64).map(|i| { let mut k = format!("{:0w$}", i * 7919, w = len).into_bytes(); k.truncate(len); k }).collect();
        let t = Instant::now(); let mut acc = 0u128;
        for i in 0..n { acc ^= xxhash_rust::xxh3::xxh3_128(&keys[(i & 1023) as usize]); }
        let x = t.elapsed().as_nanos() as f64 / n as f64;
        let t = Instant::now(); let mut acc2 = 0u128;
        for i in 0..n { let mut h = SipHasher24::new_with_key(&[7u8; 16]); h.write(&keys[(i & 1023) as usize]); acc2 ^= h.finish128().as_u128(); }
        let s = t.elapsed().as_nanos() as f64 / n as f64;
        println!("key {len:>3} B: xxh3-128 {x:.1} ns, siphash-2-4-128 {s:.1} ns, +{:.1} ns per op ({acc:x}{acc2:x})", s - x);
    }
}
