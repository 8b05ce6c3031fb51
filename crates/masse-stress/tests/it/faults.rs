//! Injected faults (power cut, torn writes, bit flips, read and write I/O
//! errors) on in-memory devices: every class at least twice with a fixed seed,
//! then one round per class with a random seed that is printed for replay.
use masse_stress::faults::{run_faults, FaultConfig, CLASSES};

fn run(seed: u64, rounds: u64) {
    let cfg = FaultConfig {
        rounds,
        seed,
        ..FaultConfig::default()
    };
    let rep = match run_faults(&cfg, |_, _| {}) {
        Ok(r) => r,
        Err(v) => panic!(
            "seed {seed}: {v}\nreplay: masse stress --faults --rounds {rounds} --seed {seed}"
        ),
    };
    println!("seed {seed}: {rep:?}");
    assert_eq!(rep.rounds, rounds);
    for c in CLASSES {
        assert!(
            rep.injected.get(c).copied().unwrap_or(0) >= rounds / CLASSES.len() as u64,
            "{c} not injected"
        );
    }
    assert!(rep.acked_ops > 0 && rep.keys_verified > 0);
}

#[test]
fn every_fault_class_with_a_fixed_seed() {
    run(42, 10);
}

#[test]
fn every_fault_class_with_a_random_seed() {
    let seed = std::env::var("MASSE_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(7)
        });
    println!("random fault seed {seed} (replay with MASSE_STRESS_SEED={seed})");
    eprintln!("random fault seed {seed} (replay with MASSE_STRESS_SEED={seed})");
    run(seed, 5);
}
