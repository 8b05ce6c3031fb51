//! Metadata damage, the size the default suite runs: after the checkpoint-gc
//! scenario (a clean close, and a crash state), a byte is flipped in a seeded
//! sample of every kind of metadata block the pool holds; each time the pool
//! must open (unless the format defines that damage as fatal), lose only keys
//! of the damaged unit, report any loss, and keep working (writes, GC, a
//! checkpoint, close, reopen). The long mode is `masse stress --damage`.

use masse_stress::damage::{damage_run, image_name, images, targets, DamageConfig, KINDS};
use masse_stress::enumerate::{rebuild, scenarios};
use masse_stress::trace::Image;
use std::collections::BTreeSet;

fn damage(mode: &str) {
    let sc = scenarios::all()
        .into_iter()
        .find(|s| s.name == "checkpoint-gc")
        .expect("scenario");
    let rec = sc.record(mode, 1).expect("record");
    let cfg = DamageConfig {
        per_kind: 3,
        crash_images: 1,
        ..DamageConfig::default()
    };
    let t0 = std::time::Instant::now();
    let (fig, fails) = damage_run(&rec, &cfg, |_, _| {});
    eprintln!(
        "checkpoint-gc {mode}: {} images, {} blocks damaged, {} fatal as defined, {} keys lost \
         (reported), {} silent losses, {} lost at the pad log's end as defined, {} losses beyond the \
         unit, {} times down; {:.1} s",
        fig.images,
        fig.blocks_damaged,
        fig.fatal_as_defined,
        fig.keys_lost_reported,
        fig.silent_losses,
        fig.frontier_losses,
        fig.losses_beyond_unit,
        fig.database_down,
        t0.elapsed().as_secs_f64()
    );
    let text: Vec<String> = fails
        .iter()
        .map(|f| {
            format!(
                "{} damaged [{}] {}:\n    {}\n",
                f.target.what,
                f.target.kind,
                image_name(&rec, f.k),
                f.symptom.join("\n    ")
            )
        })
        .collect();
    assert!(
        fails.is_empty(),
        "{} damaged blocks broke a guarantee:\n{}",
        fails.len(),
        text.join("")
    );
}

#[test]
fn metadata_damage_tiered() {
    damage("tiered");
}

#[test]
fn metadata_damage_capacity_only() {
    damage("capacity-only");
}

#[test]
fn metadata_damage_scm_only() {
    damage("scm-only");
}

/// The damage harness reaches every kind of metadata block: a tiered pool's
/// clean close and crash states hold all of them (pad batches only while
/// live); a capacity-only pool all but the pad's.
#[test]
fn every_kind_of_metadata_block_is_a_target() {
    let sc = scenarios::all()
        .into_iter()
        .find(|s| s.name == "checkpoint-gc")
        .expect("scenario");
    for mode in ["tiered", "capacity-only"] {
        let rec = sc.record(mode, 1).expect("record");
        let mut kinds = BTreeSet::new();
        for (k, lost) in images(&rec, 3) {
            let (devs, exp, _) = rebuild(&rec, k, &lost.into_iter().collect());
            let img = Image::read(&devs).expect("image");
            kinds.extend(targets(&img, &exp, 1).into_iter().map(|t| t.kind));
        }
        let want: BTreeSet<String> = KINDS
            .iter()
            .filter(|k| mode == "tiered" || !k.starts_with("pad"))
            .map(|k| k.to_string())
            .collect();
        let missing: Vec<_> = want.difference(&kinds).collect();
        assert!(missing.is_empty(), "{mode}: no target of kind {missing:?}");
    }
}
