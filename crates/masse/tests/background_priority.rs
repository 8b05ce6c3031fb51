//! Background work (GC, checkpoints) runs on a thread of lower CPU priority,
//! so on a machine with few cores it does not delay the threads users wait on
//! (docs/benchmarks.md, "Overwrite churn"); the writer keeps the default.
mod common;
use common::*;
use masse::Db;

/// The nice value of each of this process's threads named `name`.
fn nice_of(name: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let dir = t.expect("task").path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).expect("stat");
        // Fields after the parenthesised command: state is field 3, nice field 19.
        let rest = &stat[stat.rfind(')').expect("comm end") + 2..];
        let nice = rest.split(' ').nth(16).expect("nice field");
        out.push(nice.parse().expect("a number"));
    }
    out
}

#[test]
fn maintenance_thread_runs_at_lower_priority() {
    let p = MemPool::tiered(64 << 20, 256 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    db.put(b"k", b"v").expect("put");
    // The writer keeps the process's priority; the maintenance thread lowers
    // its own by 10 as it starts (give it a moment). A thread's name is set by
    // the thread itself once it runs, so on a busy machine it may not show yet.
    let mut base = nice_of("masse-writer");
    for _ in 0..500 {
        if !base.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        base = nice_of("masse-writer");
    }
    assert_eq!(base.len(), 1, "one writer thread");
    let want = vec![(base[0] + 10).min(19)];
    let mut nice = Vec::new();
    for _ in 0..100 {
        nice = nice_of("masse-maint");
        if nice == want {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(nice, want, "maintenance thread nice value");
    db.close().expect("close");
}
