//! What a crash state must hold: the scenario's operations, the values they
//! write, the expected state at any point of a trace, and the check of a
//! recovered pool against it.
//!
//! At a crash point every operation acknowledged before the cut must be
//! present; an operation in flight at the cut must be wholly applied or wholly
//! absent (a batch is all or nothing); nothing else may have changed, and no
//! key may hold a value that was never written for it.

use crate::gen::{key, parse_key};
use crate::trace::Event;
use masse::{Db, Error, Stats};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// A value version: the `ver`-th value written to a key, `len` bytes long.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Val {
    /// Version (1, 2, … per key).
    pub ver: u32,
    /// Length in bytes (at least 16, so the value names its version).
    pub len: u32,
}

/// A key's state: its value, or absent.
pub type KeyState = Option<Val>;

/// A change to several keys that must be applied all or nothing.
pub type Group = Vec<(u32, KeyState)>;

/// One scenario operation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Op {
    /// `Db::put`.
    Put {
        /// Key number.
        key: u32,
        /// Value written.
        val: Val,
    },
    /// `Db::delete`.
    Delete {
        /// Key number.
        key: u32,
    },
    /// `Db::write` of a batch (`None` = delete).
    Batch {
        /// The batch's puts and deletes, on distinct keys.
        items: Group,
    },
    /// `Db::gc_once`.
    Gc,
    /// `Db::checkpoint`.
    Checkpoint,
    /// `Db::flush`.
    Flush,
    /// `Db::seal_open_segments`: the pad then holds nothing older, so crash
    /// states that follow leave recovery only the capacity tier's order.
    SealOpen,
    /// `Db::close` then `Db::open`.
    Reopen,
    /// `Db::close`.
    Close,
    /// `Db::open` after a crash: the groups that were in flight at that crash
    /// and that the first recovery found applied. Until the open returns they
    /// may still be found either way; afterwards they are acknowledged.
    Recover {
        /// Resolved groups.
        groups: Vec<Group>,
    },
}

impl Op {
    /// The changes the operation makes, as atomic groups.
    pub fn groups(&self) -> Vec<Group> {
        match self {
            Op::Put { key, val } => vec![vec![(*key, Some(*val))]],
            Op::Delete { key } => vec![vec![(*key, None)]],
            Op::Batch { items } => vec![items.clone()],
            Op::Recover { groups } => groups.clone(),
            _ => Vec::new(),
        }
    }

    /// Keys the operation names.
    pub fn keys(&self) -> Vec<u32> {
        self.groups().iter().flatten().map(|(k, _)| *k).collect()
    }

    /// Short description for reports.
    pub fn describe(&self) -> String {
        let st = |s: &KeyState| match s {
            Some(v) => format!("v{} ({} B)", v.ver, v.len),
            None => "delete".into(),
        };
        match self {
            Op::Put { key, val } => format!("put key {key} {}", st(&Some(*val))),
            Op::Delete { key } => format!("delete key {key}"),
            Op::Batch { items } => format!(
                "batch [{}]",
                items
                    .iter()
                    .map(|(k, s)| format!("{k}: {}", st(s)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Op::Recover { groups } => {
                format!("open after a crash ({} groups resolved)", groups.len())
            }
            other => format!("{other:?}").to_lowercase(),
        }
    }
}

fn mix(a: u64, b: u64) -> u64 {
    xxh3_64_with_seed(&a.to_le_bytes(), b ^ 0x005e_ed0f_e4a6_u64)
}

/// The key bytes of key number `k` (1 to 1024 bytes, see [`crate::gen::key`]).
pub fn key_bytes(k: u32) -> Vec<u8> {
    key(k as u64)
}

/// The value bytes of version `v` of key `k`: a 16-byte header (version, key,
/// length, check word), then bytes derived from all three, so any value read
/// back names exactly which write it came from.
pub fn value_bytes(k: u32, v: Val) -> Vec<u8> {
    let len = v.len as usize;
    let mut out = Vec::with_capacity(len.max(16));
    out.extend_from_slice(&v.ver.to_le_bytes());
    out.extend_from_slice(&k.to_le_bytes());
    out.extend_from_slice(&v.len.to_le_bytes());
    out.extend_from_slice(&(mix(k as u64, v.ver as u64) as u32).to_le_bytes());
    let mut i = 0u64;
    while out.len() < len {
        out.extend_from_slice(&mix(((k as u64) << 32) | v.ver as u64, i).to_le_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// What `bytes` are, for reports: which version of which key, if any.
pub fn describe_value(k: u32, bytes: Option<&[u8]>) -> String {
    let Some(b) = bytes else {
        return "nothing".into();
    };
    if b.len() >= 16 {
        let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let v = Val {
            ver: w(0),
            len: w(8),
        };
        if w(4) == k && value_bytes(k, v) == b {
            return format!("version {} ({} B)", v.ver, v.len);
        }
        if value_bytes(w(4), v) == b {
            return format!("version {} of key {} (another key's value)", v.ver, w(4));
        }
    }
    format!("{} bytes never written by this scenario", b.len())
}

/// Whether `got` (a get's result) is the state `s` of key `k`.
pub fn state_matches(k: u32, s: &KeyState, got: &Option<Vec<u8>>) -> bool {
    match (s, got) {
        (None, None) => true,
        (Some(v), Some(g)) => *g == value_bytes(k, *v),
        _ => false,
    }
}

/// The expected state at one point of a trace.
#[derive(Clone, Debug, Default)]
pub struct Expected {
    /// Every key the run mentions, with its acknowledged state.
    pub acked: BTreeMap<u32, KeyState>,
    /// Operations in flight: (operation index, its groups).
    pub in_flight: Vec<(u32, Vec<Group>)>,
}

/// Follows a trace's operation events and yields the expected state at each
/// point.
pub struct Tracker<'a> {
    ops: &'a [Op],
    acked: BTreeMap<u32, KeyState>,
    in_flight: BTreeSet<u32>,
    /// `Begin` events seen.
    pub begins: usize,
    /// `End` events seen.
    pub ends: usize,
}

impl<'a> Tracker<'a> {
    /// Starts from the acknowledged state `base`.
    pub fn new(ops: &'a [Op], base: &BTreeMap<u32, KeyState>) -> Tracker<'a> {
        let mut acked = base.clone();
        for k in ops.iter().flat_map(|o| o.keys()) {
            acked.entry(k).or_insert(None);
        }
        Tracker {
            ops,
            acked,
            in_flight: BTreeSet::new(),
            begins: 0,
            ends: 0,
        }
    }

    /// Follows one event.
    pub fn apply(&mut self, e: &Event) {
        match e {
            Event::Begin { op } => {
                self.begins += 1;
                self.in_flight.insert(*op);
            }
            Event::End { op, .. } => {
                self.ends += 1;
                self.in_flight.remove(op);
                if let Some(o) = self.ops.get(*op as usize) {
                    for (k, s) in o.groups().into_iter().flatten() {
                        self.acked.insert(k, s);
                    }
                }
            }
            _ => {}
        }
    }

    /// The expected state now.
    pub fn expected(&self) -> Expected {
        Expected {
            acked: self.acked.clone(),
            in_flight: self
                .in_flight
                .iter()
                .filter_map(|&i| Some((i, self.ops.get(i as usize)?.groups())))
                .filter(|(_, g)| !g.is_empty())
                .collect(),
        }
    }

    /// Operations in flight now.
    pub fn in_flight(&self) -> Vec<u32> {
        self.in_flight.iter().copied().collect()
    }
}

/// Recovery findings that fail an *ordinary* crash: every recovery warning
/// and every counted corruption. A power cut is not damage, so recovering
/// from one must not report any. (When recovery tells real damage from notes
/// about the torn write frontier, only the damage belongs here: this is the
/// one place to change.)
pub fn ordinary_crash_findings(st: &Stats) -> Vec<String> {
    let mut out: Vec<String> = st
        .recovery_warnings
        .iter()
        .map(|w| format!("recovery warning after an ordinary crash: {w}"))
        .collect();
    if st.corruptions > 0 {
        out.push(format!(
            "{} corruptions counted after an ordinary crash",
            st.corruptions
        ));
    }
    out
}

/// What the check of a recovered pool found.
#[derive(Debug, Default)]
pub struct Checked {
    /// Broken guarantees (empty: the state is correct).
    pub violations: Vec<String>,
    /// Keys named in violations (for diagnostics).
    pub bad_keys: Vec<u32>,
    /// In-flight groups found applied (what a second crash must keep).
    pub applied: Vec<Group>,
    /// Keys compared.
    pub keys: u64,
    /// Keys whose acknowledged state was not found (nor an in-flight one).
    pub lost_keys: u64,
    /// Whether recovery or `check` reported anything (warnings, corruptions,
    /// check errors): a loss without it is silent.
    pub reported: bool,
}

/// Checks an open, recovered pool against `exp`: every key, the atomicity of
/// in-flight groups, a full iteration, `check()`, and the recovery report.
pub fn check_db(db: &Db, exp: &Expected) -> Checked {
    let mut c = Checked::default();
    let mut found: BTreeMap<u32, Option<Vec<u8>>> = BTreeMap::new();
    for (&k, acked) in &exp.acked {
        c.keys += 1;
        let got = match db.get(&key_bytes(k)) {
            Ok(g) => g,
            Err(e) => {
                c.violations.push(format!("get of key {k} failed: {e}"));
                c.bad_keys.push(k);
                c.lost_keys += 1;
                c.reported |= matches!(e, Error::Corruption(_));
                continue;
            }
        };
        let alts: Vec<&KeyState> = exp
            .in_flight
            .iter()
            .flat_map(|(_, gs)| gs.iter().flatten())
            .filter(|(kk, _)| *kk == k)
            .map(|(_, s)| s)
            .collect();
        if !state_matches(k, acked, &got) && !alts.iter().any(|s| state_matches(k, s, &got)) {
            c.violations.push(format!(
                "key {k}: found {}, expected the acknowledged {}{}",
                describe_value(k, got.as_deref()),
                state_name(acked),
                if alts.is_empty() {
                    String::new()
                } else {
                    format!(
                        " or the in-flight {}",
                        alts.iter()
                            .map(|s| state_name(s))
                            .collect::<Vec<_>>()
                            .join(" / ")
                    )
                }
            ));
            c.bad_keys.push(k);
            c.lost_keys += 1;
        }
        found.insert(k, got);
    }
    check_groups(exp, &found, &mut c);
    check_iteration(db, &found, &mut c);
    match db.check() {
        Ok(r) if r.is_clean() => {}
        Ok(r) => {
            c.reported = true;
            c.violations.push(format!(
                "check found {} problems: {}",
                r.errors.len(),
                r.errors[..r.errors.len().min(3)].join("; ")
            ))
        }
        Err(e) => c.violations.push(format!("check failed: {e}")),
    }
    let findings = ordinary_crash_findings(&db.stats());
    c.reported |= !findings.is_empty();
    c.violations.extend(findings);
    c
}

fn state_name(s: &KeyState) -> String {
    match s {
        Some(v) => format!("version {} ({} B)", v.ver, v.len),
        None => "absence".into(),
    }
}

/// Each in-flight group is wholly applied or wholly absent.
fn check_groups(exp: &Expected, found: &BTreeMap<u32, Option<Vec<u8>>>, c: &mut Checked) {
    for (op, groups) in &exp.in_flight {
        for g in groups {
            let (mut applied, mut absent) = (Vec::new(), Vec::new());
            for (k, s) in g {
                let Some(got) = found.get(k) else { continue };
                let acked = exp.acked.get(k).copied().flatten();
                if *s == acked {
                    continue; // no change either way (a delete of an absent key)
                }
                if state_matches(*k, s, got) {
                    applied.push(*k);
                } else {
                    absent.push(*k);
                }
            }
            if !applied.is_empty() && !absent.is_empty() {
                c.violations.push(format!(
                    "op {op} was in flight and is half applied: keys {applied:?} applied, {absent:?} not"
                ));
                c.bad_keys.extend(applied.iter().chain(absent.iter()));
            } else if !applied.is_empty() {
                c.applied.push(g.clone());
            }
        }
    }
}

/// A full iteration yields exactly the present keys with the values `get` gave.
fn check_iteration(db: &Db, found: &BTreeMap<u32, Option<Vec<u8>>>, c: &mut Checked) {
    let bound = found.keys().next_back().map_or(0, |k| *k as u64 + 1);
    let mut seen = BTreeSet::new();
    for kv in db.iter() {
        match kv {
            Ok((kb, v)) => match parse_key(&kb, bound).map(|k| k as u32) {
                Some(k) if found.get(&k).is_some_and(|g| g.as_deref() == Some(&v[..])) => {
                    seen.insert(k);
                }
                Some(k) => {
                    c.violations.push(format!(
                        "iteration yielded key {k} with {}, get gave {}",
                        describe_value(k, Some(&v)),
                        describe_value(k, found.get(&k).and_then(|g| g.as_deref()))
                    ));
                    c.bad_keys.push(k);
                }
                None => c.violations.push(format!(
                    "iteration yielded a key this scenario never wrote ({} bytes)",
                    kb.len()
                )),
            },
            Err(e) => {
                c.violations.push(format!("iteration failed: {e}"));
                return;
            }
        }
    }
    let present: BTreeSet<u32> = found
        .iter()
        .filter(|(_, g)| g.is_some())
        .map(|(k, _)| *k)
        .collect();
    if let Some(k) = present.difference(&seen).next() {
        c.violations.push(format!(
            "iteration missed {} present keys (first: key {k})",
            present.difference(&seen).count()
        ));
    }
}

/// `Db::trace_key` lines for the keys a check complained about (diagnostics).
pub fn trace_keys(db: &Db, keys: &[u32]) -> Vec<String> {
    let mut ks: Vec<u32> = keys.to_vec();
    ks.sort_unstable();
    ks.dedup();
    ks.iter()
        .take(4)
        .map(|&k| match db.trace_key(&key_bytes(k)) {
            Ok(t) => format!("key {k} records: {}", t.join("; ")),
            Err(Error::Closed(e)) => format!("key {k}: database closed: {e}"),
            Err(e) => format!("key {k}: trace failed: {e}"),
        })
        .chain(recovery_report(db))
        .collect()
}

/// What the failing open's recovery said and the bands it left in use: the
/// first thing to read when a crash state loses data.
fn recovery_report(db: &Db) -> Vec<String> {
    let s = db.stats();
    let mut out = vec![format!(
        "recovery: {} segments replayed from {}",
        s.recovery_segments_replayed, s.recovery_source
    )];
    out.extend(
        s.recovery_warnings
            .iter()
            .map(|w| format!("recovery warning: {w}")),
    );
    out.extend(
        s.recovery_notes
            .iter()
            .map(|n| format!("recovery note: {n}")),
    );
    let bands: Vec<String> = db
        .band_status()
        .iter()
        .filter(|b| b.state != "free")
        .map(|b| {
            format!(
                "{} {} from seq {} ({} slots)",
                b.band, b.state, b.first_seq, b.written_slots
            )
        })
        .collect();
    out.push(format!("bands in use: {}", bands.join(", ")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_name_their_version() {
        let v = Val { ver: 7, len: 300 };
        let b = value_bytes(42, v);
        assert_eq!(b.len(), 300);
        assert_eq!(describe_value(42, Some(&b)), "version 7 (300 B)");
        assert!(describe_value(43, Some(&b)).contains("another key"));
        assert_ne!(b, value_bytes(42, Val { ver: 8, len: 300 }));
        assert!(describe_value(42, Some(&b[..200])).contains("never written"));
    }

    #[test]
    fn the_tracker_follows_acknowledgements() {
        let ops = vec![
            Op::Put {
                key: 1,
                val: Val { ver: 1, len: 20 },
            },
            Op::Batch {
                items: vec![(1, None), (2, Some(Val { ver: 1, len: 30 }))],
            },
        ];
        let mut t = Tracker::new(&ops, &BTreeMap::new());
        t.apply(&Event::Begin { op: 0 });
        t.apply(&Event::End { op: 0, result: 0 });
        t.apply(&Event::Begin { op: 1 });
        let e = t.expected();
        assert_eq!(e.acked.get(&1), Some(&Some(Val { ver: 1, len: 20 })));
        assert_eq!(e.acked.get(&2), Some(&None));
        assert_eq!(e.in_flight.len(), 1);
        t.apply(&Event::End { op: 1, result: 0 });
        let e = t.expected();
        assert_eq!(e.acked.get(&1), Some(&None));
        assert!(e.in_flight.is_empty());
    }
}
