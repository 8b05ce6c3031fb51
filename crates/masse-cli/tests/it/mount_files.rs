//! Scenario: cp, dd and sha256sum on a mount — a large file and a sparse file round
//! trip, survive an unmount (by `fusermount3 -u` or umount) and a remount; errors
//! reach programs as the right errno; SIGTERM unmounts cleanly.

use crate::mountkit;

use mountkit::{have, ready, sh, sha256, Pool};
use std::io::ErrorKind;

#[test]
fn files_round_trip_through_a_mount() {
    if !ready(&["cp", "dd", "sha256sum", "cmp"]) {
        return;
    }
    let pool = Pool::new("2G");
    let src = pool.dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    // A 48 MiB file of random bytes, and a sparse file with data at a few far offsets.
    sh(&format!(
        "dd if=/dev/urandom of={}/large bs=1M count=48 status=none",
        src.display()
    ));
    let sparse = src.join("sparse");
    for (seek, count) in [(0, 3), (2500, 1), (40_000, 5)] {
        sh(&format!(
            "dd if=/dev/urandom of={} bs=4k seek={seek} count={count} conv=notrunc status=none",
            sparse.display()
        ));
    }
    sh(&format!("truncate -s 300M {}", sparse.display()));
    let (h_large, h_sparse) = (sha256(&src.join("large")), sha256(&sparse));

    let m = pool.mount(&[]);
    sh(&format!(
        "cp {}/large {}",
        src.display(),
        m.path("large").display()
    ));
    sh(&format!(
        "cp --sparse=always {} {}",
        sparse.display(),
        m.path("sparse").display()
    ));
    // dd in odd block sizes, through a subdirectory.
    std::fs::create_dir(m.path("sub")).unwrap();
    sh(&format!(
        "dd if={}/large of={} bs=12345 status=none && sync",
        src.display(),
        m.path("sub/large-dd").display()
    ));
    assert_eq!(sha256(&m.path("large")), h_large);
    assert_eq!(sha256(&m.path("sparse")), h_sparse);
    assert_eq!(sha256(&m.path("sub/large-dd")), h_large);
    assert_eq!(
        std::fs::metadata(m.path("sparse")).unwrap().len(),
        300 << 20
    );

    // errno as programs see it.
    let e = std::fs::create_dir(m.path("sub")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    let e = std::fs::remove_dir(m.path("sub")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY), "{e}");
    let e = std::fs::File::open(m.path("missing")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
    let e = std::fs::File::create(m.path(&"n".repeat(256))).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG), "{e}");
    // Rename over an existing file replaces it.
    std::fs::write(m.path("a"), b"first").unwrap();
    std::fs::write(m.path("b"), b"second").unwrap();
    std::fs::rename(m.path("b"), m.path("a")).unwrap();
    assert_eq!(std::fs::read(m.path("a")).unwrap(), b"second");
    assert!(!m.path("b").exists());

    let how = if have("fusermount3") {
        "fusermount"
    } else {
        "umount"
    };
    m.unmount_with(how);

    // Remount: the same bytes.
    let m = pool.mount(&["--direct-io"]);
    assert_eq!(sha256(&m.path("large")), h_large);
    assert_eq!(sha256(&m.path("sparse")), h_sparse);
    assert_eq!(sha256(&m.path("sub/large-dd")), h_large);
    sh(&format!(
        "cmp {}/large {}",
        src.display(),
        m.path("sub/large-dd").display()
    ));
    assert_eq!(std::fs::read(m.path("a")).unwrap(), b"second");
    m.unmount();
}
