//! The integration tests of `masse-cli`, in one binary: one test binary per
//! crate links once instead of once per file (rust-analyzer's and cargo's
//! practice). Each file is a module; a test is named `file::test`, e.g.
//! `cargo test --release -p masse-cli --test it bench_cli::`.

mod mountkit;
mod nbd_support;
mod poolkit;
mod resp_support;

mod bench_cli;
mod cli_roundtrip;
mod demo_smoke;
mod dump_load;
mod first_contact;
mod logs;
mod metrics_nbd;
mod migrate;
mod mount_db_bench;
mod mount_files;
mod mount_fio;
mod mount_full_pool;
mod mount_git;
mod mount_privileges;
mod mount_sqlite;
mod mount_user;
mod nbd_fio_verify;
mod nbd_nbdinfo;
mod nbd_qemu_img;
mod probe_classify;
mod probe_cli;
mod resp_benchmark;
mod resp_hostile;
mod resp_metrics;
mod resp_redis_cli;
mod resp_redis_py;
mod resp_twemproxy;
mod salvage;
mod sigkill_recovery;
mod stress_crash_loop;
mod top_tmux;
mod two_process_open;
