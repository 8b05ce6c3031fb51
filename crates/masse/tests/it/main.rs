//! The integration tests of `masse`, in one binary: one test binary per
//! crate links once instead of once per file (rust-analyzer's and cargo's
//! practice). Each file is a module; a test is named `file::test`, e.g.
//! `cargo test --release -p masse --test it absorbed_overwrites::`.

mod common;

mod absorbed_overwrites;
mod architecture;
mod background_priority;
mod batch_across_bands;
mod bitflip;
mod checkpoint_dram_entries;
mod checkpoint_large;
mod checkpoint_legacy;
mod clean_close_pad;
mod concurrency;
mod crash_replay_pad;
mod cut_batch;
mod damage_record;
mod damaged_segment_header;
mod damaged_summary;
mod device_backends;
mod drive_geometry;
mod format_versions;
mod gc_churn;
mod gc_pacing;
mod gc_policy;
mod get_many;
mod get_parts;
mod key_collision;
mod limits;
mod mid_pad_damage;
mod model_proptest;
mod nospace;
mod nospace_big_records;
mod nospace_churn_live;
mod nospace_small_bands;
mod one_process;
mod pool_identity;
mod reopen_stable;
mod scan;
mod scm_in_place;
mod seal_footer_trust;
mod sim_db_powercut;
mod sim_determinism;
mod sim_engine_suite;
mod sim_faults;
mod sim_ftl_model;
mod sim_model_proptest;
mod sim_time_modes;
mod sim_waf;
mod small_defects;
mod smoke;
mod space;
mod stale_tail;
mod status_table;
mod torn_burst;
mod torn_history;
mod vblock_concurrent;
mod vblock_model;
mod vfile_crash;
mod vfile_model_proptest;
mod vfile_nospace;
mod vfile_partial_read;
mod vfile_semantics;
mod write_error;
mod writer_inflight;
