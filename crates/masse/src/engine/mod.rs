//! The engine behind [`Db`](crate::Db): MASSé's concepts, one file each.
//!
//! Components own their state and rules:
//! - `state`: [`Engine`](state::Engine), the state every engine thread shares,
//!   composed of the components below;
//! - `band`: the band table and free list; `status`: the Segment Status Table
//!   (live and dead bytes per segment and band);
//! - `segment`: segments in DRAM and the write position (`WriteState`);
//! - `pad`: the fast-tier write pad — reserve, write, release, replay;
//! - `request`: write requests and the group-commit queue;
//! - `writer_jobs`: what the single writer is asked to do, and its queue;
//! - `scanner`: reading a band segment by segment (recovery, GC, check);
//! - `damage`: the pool's damage record, kept until an operator clears it.
//!
//! Processes combine them, top-down:
//! - `commit` (group commit) → `stream` (which open band a record goes to),
//!   `place` (placement) and `inplace` (scm-only updates in place); `writer` (the single capacity-tier writer thread);
//! - `read` (gets); `gc` (band GC) and `maintenance` (the background thread);
//! - `checkpoint` and `recovery` (at open; `torn` judges torn bursts);
//!   `check` (verification);
//!   `report` (stats and state dumps).
//!
//! No component imports a process, and no process imports one that imports
//! it: `tests/it/architecture.rs` keeps the crate's module graph free of circles.

pub(crate) mod band;
pub(crate) mod check;
pub(crate) mod checkpoint;
pub(crate) mod commit;
pub(crate) mod damage;
pub(crate) mod gc;
pub(crate) mod inplace;
pub(crate) mod maintenance;
pub(crate) mod pad;
pub(crate) mod place;
pub(crate) mod read;
pub(crate) mod recovery;
pub(crate) mod replay;
pub(crate) mod report;
pub(crate) mod request;
pub(crate) mod scanner;
pub(crate) mod segment;
pub(crate) mod state;
pub(crate) mod status;
pub(crate) mod stream;
pub(crate) mod torn;
pub(crate) mod writer;
pub(crate) mod writer_jobs;
