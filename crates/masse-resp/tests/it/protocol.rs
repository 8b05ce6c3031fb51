//! Exact replies of the command set in RESP2 and RESP3, key checks, atomic
//! read-modify-writes under concurrency, SCAN under concurrent writes, and the
//! batching of pipelined writes into group commits, against an in-process server.
use crate::common;
use common::*;
use masse_resp::Config;
use std::collections::HashSet;

fn server() -> Running {
    Running::start(Config::default())
}

#[test]
fn string_commands_reply_like_redis() {
    let s = server();
    let mut c = s.client();
    let cases: &[(&[&str], &str)] = &[
        (&["PING"], "+PONG\r\n"),
        (&["ping", "hi"], "$2\r\nhi\r\n"),
        (&["ECHO", "x y"], "$3\r\nx y\r\n"),
        (&["GET", "k"], "$-1\r\n"),
        (&["SET", "k", "v1"], "+OK\r\n"),
        (&["GET", "k"], "$2\r\nv1\r\n"),
        (&["SET", "k", "v2", "NX"], "$-1\r\n"),
        (&["SET", "k", "v2", "XX", "GET"], "$2\r\nv1\r\n"),
        (&["SET", "new", "n", "XX"], "$-1\r\n"),
        (&["SET", "k", "v", "NX", "XX"], "-ERR syntax error\r\n"),
        (&["SET", "k", "v", "EX", "10"], "-ERR masse does not support key expiry yet: SET with EX, PX, EXAT or PXAT is refused\r\n"),
        (&["SETNX", "k", "z"], ":0\r\n"),
        (&["SETNX", "n1", "z"], ":1\r\n"),
        (&["STRLEN", "k"], ":2\r\n"),
        (&["STRLEN", "nope"], ":0\r\n"),
        (&["APPEND", "k", "abc"], ":5\r\n"),
        (&["APPEND", "fresh", "abc"], ":3\r\n"),
        (&["GETDEL", "fresh"], "$3\r\nabc\r\n"),
        (&["GETDEL", "fresh"], "$-1\r\n"),
        (&["INCR", "c"], ":1\r\n"),
        (&["INCRBY", "c", "41"], ":42\r\n"),
        (&["DECR", "c"], ":41\r\n"),
        (&["DECRBY", "c", "-9"], ":50\r\n"),
        (&["INCR", "k"], "-ERR value is not an integer or out of range\r\n"),
        (&["INCRBY", "c", "x"], "-ERR value is not an integer or out of range\r\n"),
        (&["SET", "big", "9223372036854775807"], "+OK\r\n"),
        (&["INCR", "big"], "-ERR increment or decrement would overflow\r\n"),
        (&["MSET", "a", "1", "b", "2"], "+OK\r\n"),
        (&["MSET", "a", "1", "b"], "-ERR wrong number of arguments for 'mset' command\r\n"),
        (&["MGET", "a", "nope", "b"], "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n2\r\n"),
        (&["MSETNX", "a", "x", "zz", "y"], ":0\r\n"),
        (&["MSETNX", "zz", "y", "yy", "x"], ":1\r\n"),
        (&["EXISTS", "a", "a", "nope"], ":2\r\n"),
        (&["DEL", "a", "a", "nope", "b"], ":2\r\n"),
        (&["UNLINK", "zz"], ":1\r\n"),
        (&["DBSIZE"], ":5\r\n"),
        (&["SELECT", "0"], "+OK\r\n"),
        (&["SELECT", "1"], "-ERR DB index is out of range\r\n"),
        (&["GET"], "-ERR wrong number of arguments for 'get' command\r\n"),
        (&["FLUSHALL"], "-ERR unknown command 'FLUSHALL', with args beginning with: \r\n"),
        (&["foo", "a", "b"], "-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n"),
        (&["CLIENT", "NOPE"], "-ERR unknown subcommand 'NOPE'. Try CLIENT HELP.\r\n"),
        (&["CLIENT", "SETNAME", "app"], "+OK\r\n"),
        (&["CLIENT", "GETNAME"], "$3\r\napp\r\n"),
        (&["CLIENT", "SETNAME", "a b"], "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"),
        (&["CONFIG", "GET", "appendfsync"], "*2\r\n$11\r\nappendfsync\r\n$6\r\nalways\r\n"),
        (&["AUTH", "x"], "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n"),
        (&["HELLO", "4"], "-NOPROTO unsupported protocol version\r\n"),
        (&["SHUTDOWN", "ABORT"], "-ERR No shutdown in progress.\r\n"),
    ];
    for (args, want) in cases {
        assert_eq!(&c.cmd(args), want, "{args:?}");
    }
    let n: usize = c.cmd(&["COMMAND", "COUNT"])[1..]
        .trim()
        .parse()
        .expect("count");
    assert!(c.cmd(&["COMMAND"]).starts_with(&format!("*{n}\r\n")));
    assert!(c
        .cmd(&["COMMAND", "INFO", "get"])
        .starts_with("*1\r\n*10\r\n$3\r\nget\r\n:2\r\n"));
    assert!(c.cmd(&["COMMAND", "DOCS", "set"]).contains("summary"));
    let id = c.cmd(&["CLIENT", "ID"]);
    assert!(c
        .cmd(&["CLIENT", "INFO"])
        .contains(&format!("id={} ", id[1..].trim())));
    let info = c.cmd(&["INFO"]);
    for f in [
        "redis_version:",
        "connected_clients:1",
        "masse_commit_groups:",
        "db0:keys=5",
        "used_memory:",
    ] {
        assert!(info.contains(f), "INFO lacks {f}: {info}");
    }
    assert_eq!(c.cmd(&["QUIT"]), "+OK\r\n");
    assert_eq!(c.until_closed(), "");
}

#[test]
fn resp3_after_hello_3() {
    let s = server();
    let mut c = s.client();
    let h = c.cmd(&["HELLO", "3", "SETNAME", "r3"]);
    assert!(
        h.starts_with("%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n"),
        "{h}"
    );
    assert!(h.contains("$5\r\nproto\r\n:3\r\n"));
    assert_eq!(c.cmd(&["GET", "none"]), "_\r\n");
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "databases"]),
        "%1\r\n$9\r\ndatabases\r\n$1\r\n1\r\n"
    );
    assert!(
        c.cmd(&["INFO", "server"]).starts_with("="),
        "INFO is a verbatim string"
    );
    assert_eq!(c.cmd(&["MGET", "none"]), "*1\r\n_\r\n");
    assert!(c.cmd(&["HELLO", "2"]).starts_with("*14\r\n"));
    assert_eq!(c.cmd(&["GET", "none"]), "$-1\r\n");
}

#[test]
fn reserved_prefixes_are_unreachable() {
    let s = server();
    s.db.put(b"\xffMVBdir", b"volume directory").expect("put");
    s.db.put(b"\0vf\x01inode", b"file layer").expect("put");
    s.db.put(b"user", b"u").expect("put");
    let mut c = s.client();
    let refused = "-ERR keys starting with \"\\xffMVB\" or \"\\x00vf\" are reserved for masse's block and file layers\r\n";
    for k in [&b"\xffMVBdir"[..], b"\0vf\x01inode", b"\xffMVBnew"] {
        assert_eq!(c.cmd_bytes(&[b"GET", k]), refused);
        assert_eq!(c.cmd_bytes(&[b"SET", k, b"x"]), refused);
        assert_eq!(c.cmd_bytes(&[b"DEL", k]), refused);
        assert_eq!(c.cmd_bytes(&[b"MSET", b"ok", b"1", k, b"x"]), refused);
        assert_eq!(c.cmd_bytes(&[b"APPEND", k, b"x"]), refused);
    }
    assert_eq!(
        c.cmd_bytes(&[b"SET", b"", b"x"]),
        "-ERR empty keys are not supported by masse\r\n"
    );
    assert_eq!(
        s.db.get(b"\xffMVBdir").expect("get").as_deref(),
        Some(&b"volume directory"[..])
    );
    assert_eq!(
        s.db.get(b"ok").expect("get"),
        None,
        "a refused MSET writes nothing"
    );
    let r = c.cmd(&["SCAN", "0", "COUNT", "1000"]);
    assert_eq!(r, "*2\r\n$1\r\n0\r\n*1\r\n$4\r\nuser\r\n");
}

#[test]
fn incr_and_append_are_atomic_across_clients() {
    let s = server();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let addr = s.addr;
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                for _ in 0..200 {
                    assert!(c.cmd(&["INCR", "ctr"]).starts_with(':'));
                    assert!(c.cmd(&["APPEND", "log", &format!("{t}")]).starts_with(':'));
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().expect("client"));
    let mut c = s.client();
    assert_eq!(c.cmd(&["GET", "ctr"]), "$4\r\n1600\r\n");
    assert_eq!(c.cmd(&["STRLEN", "log"]), ":1600\r\n");
}

/// Every key present for the whole scan is returned, while other clients insert,
/// overwrite and delete keys between the pages.
#[test]
fn scan_cursor_survives_concurrent_writes() {
    let s = server();
    let mut c = s.client();
    let mut pipe = Vec::new();
    for i in 0..3000 {
        pipe.extend(encode(&[b"SET", format!("stable:{i}").as_bytes(), b"v"]));
    }
    c.send_raw(&pipe);
    (0..3000).for_each(|_| assert_eq!(c.reply(), "+OK\r\n"));
    let addr = s.addr;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let st = stop.clone();
    let churn = std::thread::spawn(move || {
        let mut w = Client::connect(addr);
        let mut i = 0u64;
        while !st.load(std::sync::atomic::Ordering::Relaxed) {
            w.cmd(&["SET", &format!("churn:{i}"), "x"]);
            w.cmd(&["DEL", &format!("churn:{}", i / 2)]);
            w.cmd(&["SET", &format!("stable:{}", i % 3000), "overwritten"]);
            i += 1;
        }
        i
    });
    let mut cursor = "0".to_string();
    let mut seen = HashSet::new();
    loop {
        let r = c.cmd(&["SCAN", &cursor, "MATCH", "stable:*", "COUNT", "50"]);
        let parts: Vec<&str> = r.split("\r\n").collect();
        cursor = parts[2].to_string();
        for k in parts.iter().filter(|p| p.starts_with("stable:")) {
            seen.insert(k.to_string());
        }
        assert!(
            !parts.iter().any(|p| p.starts_with("churn:")),
            "MATCH filters"
        );
        if cursor == "0" {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = churn.join().expect("churn");
    assert!(writes > 0);
    for i in 0..3000 {
        assert!(
            seen.contains(&format!("stable:{i}")),
            "stable:{i} missed by SCAN"
        );
    }
}

/// A client's pipelined SETs are committed as one engine batch, so the engine
/// sees fewer group commits than records.
#[test]
fn pipelined_sets_share_group_commits() {
    let s = server();
    let before = s.db.stats();
    let mut c = s.client();
    let mut pipe = Vec::new();
    for i in 0..1000 {
        pipe.extend(encode(&[b"SET", format!("p{i}").as_bytes(), b"value"]));
    }
    pipe.extend(encode(&[b"GET", b"p999"]));
    c.send_raw(&pipe);
    (0..1000).for_each(|_| assert_eq!(c.reply(), "+OK\r\n"));
    assert_eq!(
        c.reply(),
        "$5\r\nvalue\r\n",
        "a GET after SETs in one pipeline sees them"
    );
    let st = s.db.stats();
    let groups = st.commit_groups - before.commit_groups;
    let recs = st.commit_records - before.commit_records;
    assert_eq!(recs, 1000);
    assert!(
        groups * 10 <= recs,
        "{groups} group commits for {recs} pipelined SETs"
    );
}

#[test]
fn auth_is_required_when_a_password_is_set() {
    let s = Running::start(Config {
        password: Some(b"s3cret".to_vec()),
        ..Config::default()
    });
    let mut c = s.client();
    assert_eq!(c.cmd(&["GET", "k"]), "-NOAUTH Authentication required.\r\n");
    assert_eq!(c.cmd(&["FOO"]), "-NOAUTH Authentication required.\r\n");
    assert!(c
        .cmd(&["HELLO", "3"])
        .starts_with("-NOAUTH HELLO must be called"));
    assert_eq!(
        c.cmd(&["AUTH", "wrong"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(
        c.cmd(&["AUTH", "other", "s3cret"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    // Before AUTH a command may have at most 10 arguments (as in Redis).
    let mut d = s.client();
    d.send_raw(b"*11\r\n");
    assert_eq!(
        d.until_closed(),
        "-ERR Protocol error: invalid multibulk length\r\n"
    );
    // AUTH pipelined with a large write: the write is parsed after AUTH ran.
    let big = "v".repeat(100_000);
    let mut p = encode(&[b"AUTH", b"s3cret"]);
    p.extend(encode(&[b"SET", b"k", big.as_bytes()]));
    c.send_raw(&p);
    assert_eq!(c.reply(), "+OK\r\n");
    assert_eq!(c.reply(), "+OK\r\n");
    let mut e = s.client();
    assert!(e
        .cmd(&["HELLO", "3", "AUTH", "default", "s3cret"])
        .starts_with("%7"));
    assert_eq!(e.cmd(&["STRLEN", "k"]), ":100000\r\n");
}

/// SHUTDOWN: the writes already answered are durable, the server stops, the pool
/// closes cleanly and reopens with them.
#[test]
fn shutdown_stops_the_server() {
    let s = server();
    let mut c = s.client();
    assert_eq!(c.cmd(&["SET", "before", "1"]), "+OK\r\n");
    c.send_raw(&encode(&[b"SHUTDOWN"]));
    assert_eq!(c.until_closed(), "");
    let db = s.db.clone();
    s.shutdown();
    assert_eq!(db.get(b"before").expect("get").as_deref(), Some(&b"1"[..]));
}

/// Pipelined GETs are read together (one get_many) and answered in order.
#[test]
fn pipelined_gets_answer_in_order() {
    let s = server();
    let mut c = s.client();
    for i in (0..200).step_by(3) {
        assert_eq!(
            c.cmd(&["SET", &format!("g{i}"), &format!("v{i}")]),
            "+OK\r\n"
        );
    }
    let mut pipe = Vec::new();
    for i in 0..200 {
        pipe.extend(encode(&[b"GET", format!("g{i}").as_bytes()]));
    }
    c.send_raw(&pipe);
    for i in 0..200 {
        let want = if i % 3 == 0 {
            format!("${}\r\nv{i}\r\n", format!("v{i}").len())
        } else {
            "$-1\r\n".into()
        };
        assert_eq!(c.reply(), want, "GET g{i}");
    }
}

/// A pipeline whose replies exceed the output limit is run in parts as the client
/// reads them: every reply arrives, in order.
#[test]
fn large_pipelined_replies_resume_as_the_client_reads() {
    let s = server();
    let mut c = s.client();
    let big = "b".repeat(1 << 20);
    assert_eq!(c.cmd(&["SET", "big", &big]), "+OK\r\n");
    let mut pipe = Vec::new();
    for i in 0..40 {
        pipe.extend(encode(&[b"GET", b"big"]));
        pipe.extend(encode(&[b"ECHO", format!("{i}").as_bytes()]));
    }
    c.send_raw(&pipe);
    let want = format!("${}\r\n{big}\r\n", big.len());
    for i in 0..40 {
        assert!(c.reply() == want, "GET {i}");
        assert_eq!(c.reply(), format!("${}\r\n{i}\r\n", format!("{i}").len()));
    }
}
