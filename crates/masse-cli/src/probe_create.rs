//! How `masse create` uses the probe: devices whose media the system does not
//! state are probed, the capacity tier's class is recorded in the superblock
//! (and sets the IU), and what was chosen is printed. `--capacity-media`,
//! `--iu` and `--no-probe` override it.

use crate::pool::{sim_arg, GeometryArgs, PoolArgs};
use masse::device::{Class, Media};
use masse::PoolConfig;

pub fn apply(pool: &PoolArgs, geo: &GeometryArgs, cfg: &mut PoolConfig) {
    if let Some(f) = &pool.fast {
        if sim_arg(f).is_none() {
            if let Some((class, v)) = crate::probe::class_for_create(f) {
                println!(
                    "probe: fast device {}: {} (from {})",
                    f.display(),
                    class.name(),
                    v.source
                );
                if class != Class::Scm {
                    println!(
                        "probe: warning: the fast tier is not SCM-class; every put is made durable on it, \
                         so put latency will follow its write latency"
                    );
                }
            }
        }
    }
    if geo.capacity_media.is_some() {
        return;
    }
    let Some(c) = pool.capacity.first() else {
        return;
    };
    if sim_arg(c).is_some() {
        return; // the emulator states its media, IU and reclaim unit
    }
    let Some((class, v)) = crate::probe::class_for_create(c) else {
        return;
    };
    let media = class.media();
    println!(
        "probe: capacity device {}: {} (from {}{}); recorded in the superblock (override with --capacity-media)",
        c.display(),
        class.name(),
        v.source,
        v.reasons.first().map(|r| format!(": {r}")).unwrap_or_default()
    );
    if media != Media::Unknown {
        cfg.capacity_media = Some(media);
    }
    if geo.iu.is_none() && v.iu >= 4096 && v.iu.is_power_of_two() && media != Media::Scm {
        cfg.iu = Some(v.iu);
    }
}
