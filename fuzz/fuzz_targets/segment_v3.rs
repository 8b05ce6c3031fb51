//! Fuzz target: see `masse_stress::fuzz::segment_v3`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| masse_stress::fuzz::segment_v3(data));
