//! Scenario: sqlite3 on a mount — a database built by many small transactions
//! (each one fsynced by sqlite), then `PRAGMA integrity_check` and the row count
//! after an unmount and a remount.

use crate::mountkit;

use mountkit::{have, ready, sh, Pool};

const ROWS: u32 = 1500;

#[test]
fn sqlite_transactions_survive_a_remount() {
    // The sqlite3 shell, or else Python's sqlite3 module.
    let use_cli = have("sqlite3");
    if !ready(if use_cli { &["sqlite3"] } else { &["python3"] }) {
        return;
    }
    let pool = Pool::new("1G");
    let m = pool.mount(&[]);
    let db = m.path("app/test.db");
    std::fs::create_dir(m.path("app")).unwrap();
    if use_cli {
        // One transaction per statement group; sqlite3 fsyncs the journal and the
        // database at every commit.
        let mut script = String::from(
            "PRAGMA journal_mode=DELETE;\nCREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT UNIQUE, v BLOB);\n",
        );
        for i in 0..ROWS {
            script.push_str(&format!(
                "BEGIN; INSERT INTO t(k, v) VALUES('key-{i}', randomblob({})); UPDATE t SET v = randomblob(50) WHERE id = {}; COMMIT;\n",
                100 + (i * 37) % 3000,
                1 + i / 2
            ));
        }
        for i in (0..ROWS).step_by(10) {
            script.push_str(&format!("DELETE FROM t WHERE k = 'key-{i}';\n"));
        }
        let path = pool.dir.path().join("script.sql");
        std::fs::write(&path, script).unwrap();
        sh(&format!(
            "sqlite3 '{}' < '{}'",
            db.display(),
            path.display()
        ));
    } else {
        let py = format!(
            "import sqlite3\nc=sqlite3.connect('{}')\nc.execute('CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT UNIQUE, v BLOB)')\nc.commit()\nimport os\nfor i in range({ROWS}):\n  c.execute('INSERT INTO t(k,v) VALUES(?,?)', ('key-%d'%i, os.urandom(100+(i*37)%3000)))\n  c.execute('UPDATE t SET v=? WHERE id=?', (os.urandom(50), 1+i//2))\n  c.commit()\nfor i in range(0,{ROWS},10):\n  c.execute('DELETE FROM t WHERE k=?', ('key-%d'%i,)); c.commit()\nc.close()\n",
            db.display()
        );
        sh(&format!("python3 -c \"{py}\""));
    }
    m.unmount();

    let m = pool.mount(&[]);
    let q = |sql: &str| -> String {
        if use_cli {
            sh(&format!("sqlite3 '{}' \"{sql}\"", db.display()))
                .trim()
                .to_string()
        } else {
            sh(&format!(
                "python3 -c \"import sqlite3; print(sqlite3.connect('{}').execute('{sql}').fetchone()[0])\"",
                db.display()
            ))
            .trim()
            .to_string()
        }
    };
    assert_eq!(q("PRAGMA integrity_check"), "ok");
    assert_eq!(q("SELECT count(*) FROM t"), (ROWS - ROWS / 10).to_string());
    assert_eq!(q("SELECT count(*) FROM t WHERE k = 'key-11'"), "1");
    // No journal left behind: every transaction was completed.
    assert!(!m.path("app/test.db-journal").exists());
    m.unmount();
}
