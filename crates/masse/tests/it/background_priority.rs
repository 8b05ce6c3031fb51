//! Background work (GC, checkpoints) runs on a thread of lower CPU priority,
//! so on a machine with few cores it does not delay the threads users wait on
//! (docs/benchmarks.md, "Overwrite churn"); the writer keeps the default.
use crate::common;
use common::*;
use masse::Db;

/// The nice value in a `/proc/.../stat` line (field 19).
fn nice_in(stat: &str) -> i64 {
    // Fields after the parenthesised command: state is field 3, nice field 19.
    let rest = &stat[stat.rfind(')').expect("comm end") + 2..];
    let nice = rest.split(' ').nth(16).expect("nice field");
    nice.parse().expect("a number")
}

/// The nice value of each of this process's threads named `name`.
fn nice_of(name: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let dir = t.expect("task").path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        if !stat.is_empty() {
            out.push(nice_in(&stat));
        }
    }
    out
}

#[test]
fn maintenance_thread_runs_at_lower_priority() {
    // Other tests of this binary run pools of their own at the same time, so
    // the check is over every writer and maintenance thread in the process:
    // writers keep the process's priority, maintenance threads run 10 lower.
    let process = nice_in(&std::fs::read_to_string("/proc/self/stat").expect("stat"));
    let p = MemPool::tiered(64 << 20, 256 << 20);
    let db = Db::create(&p.config(), opts()).expect("create");
    db.put(b"k", b"v").expect("put");
    // A thread names itself once it runs and the maintenance thread lowers its
    // own priority as it starts, so on a busy machine give them a moment.
    let want_maint = (process + 10).min(19);
    let (mut writers, mut maint) = (Vec::new(), Vec::new());
    for _ in 0..500 {
        writers = nice_of("masse-writer");
        maint = nice_of("masse-maint");
        let settled = !writers.is_empty()
            && !maint.is_empty()
            && writers.iter().all(|&n| n == process)
            && maint.iter().all(|&n| n == want_maint);
        if settled {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!writers.is_empty(), "a writer thread");
    assert!(
        writers.iter().all(|&n| n == process),
        "writers keep nice {process}: {writers:?}"
    );
    assert!(!maint.is_empty(), "a maintenance thread");
    assert!(
        maint.iter().all(|&n| n == want_maint),
        "maintenance threads at nice {want_maint}: {maint:?}"
    );
    db.close().expect("close");
}
