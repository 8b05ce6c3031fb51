//! Fuzz target: see `masse_stress::fuzz::metadata`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| masse_stress::fuzz::metadata(data));
