//! Scenario: git on a mount — init, add a source tree, commit twice (with a
//! rename and a delete), and `git fsck --full` both live and after a remount.

use crate::mountkit;

use mountkit::{ready, sh, Pool};

#[test]
fn git_repository_on_a_mount_is_consistent() {
    if !ready(&["git"]) {
        return;
    }
    let pool = Pool::new("1G");
    let m = pool.mount(&[]);
    let repo = m.path("repo");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../masse/src");
    let g = format!(
        "cd '{}' && git -c user.name=t -c user.email=t@example.invalid -c init.defaultBranch=main",
        repo.display()
    );
    std::fs::create_dir(&repo).unwrap();
    sh(&format!(
        "{g} init -q . && cp -r '{src}' ./src && {g} add -A && {g} commit -qm first"
    ));
    sh(&format!(
        "{g} mv src/lib.rs src/lib2.rs && {g} rm -q src/engine/gc.rs && echo change >> src/db.rs && {g} commit -qam second"
    ));
    sh(&format!("{g} fsck --full --strict"));
    sh(&format!("{g} gc -q --aggressive && {g} fsck --full"));
    let log = sh(&format!("{g} log --oneline"));
    assert_eq!(log.lines().count(), 2, "{log}");
    m.unmount();

    let m = pool.mount(&[]);
    sh(&format!("{g} fsck --full --strict"));
    let st = sh(&format!("{g} status --porcelain"));
    assert!(
        st.trim().is_empty(),
        "work tree differs after remount: {st}"
    );
    assert!(m.path("repo/src/lib2.rs").exists() && !m.path("repo/src/gc.rs").exists());
    m.unmount();
}
