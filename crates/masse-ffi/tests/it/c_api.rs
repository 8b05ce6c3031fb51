//! The C API from a C program: tests/c/test_masse.c, compiled with the system C
//! compiler (`cc`, strict C11 warnings as errors) against include/masse.h and
//! linked with libmasse_ffi.a, then run on a temporary pool. The header is also
//! compiled as C++ (the RocksDB plugin includes it from C++).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where cargo put this build's libmasse_ffi.a: the test binary lives in
/// `target/<profile>/deps/`, the library in `target/<profile>/` (and `deps/`).
fn static_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    for dir in [deps.parent().expect("profile dir"), deps] {
        let p = dir.join("libmasse_ffi.a");
        if p.exists() {
            return p;
        }
    }
    panic!("libmasse_ffi.a not found next to {}", exe.display());
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The C compiler, or a skip (a failure under MASSE_REQUIRE_TOOLS=1).
fn have(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        assert!(
            std::env::var_os("MASSE_REQUIRE_TOOLS").is_none(),
            "{tool} is required (MASSE_REQUIRE_TOOLS is set)"
        );
        eprintln!("skipping: no `{tool}` on this machine");
    }
    ok
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

fn fast_dir() -> &'static Path {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        Path::new("/tmp")
    }
}

#[test]
fn c_program_uses_every_call_family() {
    if !have("cc") {
        return;
    }
    let dir = crate_dir();
    let work = tempfile::Builder::new()
        .prefix("masse-capi-")
        .tempdir_in(fast_dir())
        .expect("temp dir");
    let exe = work.path().join("test_masse");
    run(Command::new("cc")
        .args([
            "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-pthread",
        ])
        .arg("-I")
        .arg(dir.join("include"))
        .arg(dir.join("tests/c/test_masse.c"))
        .arg(static_lib())
        .args(["-ldl", "-lm", "-o"])
        .arg(&exe));
    let out = run(Command::new(&exe).arg(work.path()));
    println!("{out}");
    assert!(out.contains("c api: 0 failures"), "{out}");
}

#[test]
fn header_compiles_as_cpp() {
    if !have("c++") {
        return;
    }
    let work = tempfile::tempdir().expect("temp dir");
    let src = work.path().join("h.cc");
    std::fs::write(
        &src,
        "#include \"masse.h\"\nint main() { masse_pool *p = nullptr; return masse_pool_close(p); }\n",
    )
    .expect("write");
    run(Command::new("c++")
        .args([
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            "-I",
        ])
        .arg(crate_dir().join("include"))
        .arg(&src));
}
