//! Generates `include/masse.h` from the crate's `extern "C"` items with
//! cbindgen. The header is committed (C users and the RocksDB plugin read it
//! from the tree); the file is rewritten only when its text changes, so builds
//! do not touch it needlessly.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let cfg = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(cfg)
        .generate()
        .expect("cbindgen could not generate include/masse.h");
    let mut text = Vec::new();
    bindings.write(&mut text);
    let out = dir.join("include/masse.h");
    if std::fs::read(&out).ok().as_deref() != Some(&text[..]) {
        std::fs::write(&out, text).expect("writing include/masse.h");
    }
}
