//! The fuzz targets on stable Rust: every file of the seed corpus
//! (`fuzz/corpus/<target>/`), the built-in seeds, and deterministic mutations of
//! each (bit flips, truncations, splices, random bytes) must be handled without
//! a panic. Real fuzzing: `cargo +nightly fuzz run <target>` in `fuzz/`.
use masse_stress::fuzz::{seeds, TARGETS};
use masse_stress::workload::Rng;
use std::path::PathBuf;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

fn mutations(seed: &[u8], rng: &mut Rng, n: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for _ in 0..n {
        let mut m = seed.to_vec();
        match rng.below(4) {
            0 if !m.is_empty() => {
                for _ in 0..1 + rng.below(4) {
                    let i = rng.below(m.len() as u64) as usize;
                    m[i] ^= 1 << rng.below(8);
                }
            }
            1 => m.truncate(rng.below(m.len() as u64 + 1) as usize),
            2 if !m.is_empty() => {
                let i = rng.below(m.len() as u64) as usize;
                let len = (rng.below(64) as usize).min(m.len() - i);
                for b in &mut m[i..i + len] {
                    *b = rng.next_u64() as u8;
                }
            }
            _ => m.extend((0..rng.below(64)).map(|_| rng.next_u64() as u8)),
        }
        out.push(m);
    }
    out
}

#[test]
fn corpus_and_mutations_never_panic() {
    let mut rng = Rng::new(2026);
    let mut all: Vec<(&str, Vec<u8>)> = seeds();
    for (name, _) in TARGETS {
        if let Ok(rd) = std::fs::read_dir(corpus_dir().join(name)) {
            for e in rd.flatten() {
                if let Ok(b) = std::fs::read(e.path()) {
                    all.push((name, b));
                }
            }
        }
    }
    let mut runs = 0;
    for (name, f) in TARGETS {
        let mine: Vec<&Vec<u8>> = all
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, b)| b)
            .collect();
        assert!(!mine.is_empty(), "no seeds for target {name}");
        // The pool image targets open a pool per input: fewer mutations.
        let per = match *name {
            "pool_image" => 6,
            "superblock_geometry" => 40,
            _ => 200,
        };
        for s in mine {
            f(s);
            runs += 1;
            for m in mutations(s, &mut rng, per) {
                f(&m);
                runs += 1;
            }
        }
    }
    println!("{runs} fuzz inputs handled");
}

#[test]
#[ignore = "writes fuzz/corpus/; run to refresh the seed corpus"]
fn write_seed_corpus() {
    for (i, (name, b)) in seeds().into_iter().enumerate() {
        let d = corpus_dir().join(name);
        std::fs::create_dir_all(&d).expect("corpus dir");
        std::fs::write(d.join(format!("seed-{i:03}")), b).expect("write seed");
    }
}
