//! Fuzz target: see `masse_stress::fuzz::pool_image`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| masse_stress::fuzz::pool_image(data));
