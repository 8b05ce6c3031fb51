//! Fuzz target: see `masse_stress::fuzz::superblock_geometry`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| masse_stress::fuzz::superblock_geometry(data));
