//! Fuzz target: see `masse_stress::fuzz::index_image`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| masse_stress::fuzz::index_image(data));
