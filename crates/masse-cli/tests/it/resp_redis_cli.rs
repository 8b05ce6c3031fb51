//! `masse serve resp` driven by redis-cli (Debian redis-tools): the command set and
//! error replies as a user sees them, mass insertion with --pipe, --scan, AUTH with
//! a password file, SHUTDOWN closing the pool cleanly.
use crate::resp_support;
use resp_support::*;

#[test]
fn redis_cli_command_set_and_errors() {
    if !have_tool("redis-cli") {
        return;
    }
    let pool = Pool::create("64M", "512M");
    let (srv, port) = serve(&pool, &[]);
    let cases: &[(&[&str], &str)] = &[
        (&["ping"], "PONG\n"),
        (&["set", "greeting", "hello world"], "OK\n"),
        (&["get", "greeting"], "hello world\n"),
        (&["append", "greeting", "!"], "12\n"),
        (&["incr", "visits"], "1\n"),
        (&["incrby", "visits", "9"], "10\n"),
        (&["decrby", "visits", "3"], "7\n"),
        (&["mset", "a", "1", "b", "2"], "OK\n"),
        (&["mget", "a", "b", "missing"], "1\n2\n\n"),
        (&["exists", "a", "b", "missing"], "2\n"),
        (&["strlen", "greeting"], "12\n"),
        (&["getdel", "a"], "1\n"),
        (&["del", "a", "b"], "1\n"),
        (&["setnx", "visits", "0"], "0\n"),
        (&["set", "visits", "8", "get"], "7\n"),
        (&["dbsize"], "2\n"),
        (&["incr", "greeting"], "ERR value is not an integer or out of range\n\n"),
        (&["set", "k", "v", "px", "100"], "ERR masse does not support key expiry yet: SET with EX, PX, EXAT or PXAT is refused\n\n"),
        (&["lpush", "list", "x"], "ERR unknown command 'lpush', with args beginning with: 'list' 'x' \n\n"),
        (&["get", "a", "b"], "ERR wrong number of arguments for 'get' command\n\n"),
        (&["select", "3"], "ERR DB index is out of range\n\n"),
        (&["config", "get", "appendonly"], "appendonly\nyes\n"),
        (&["client", "setname", "tester"], "OK\n"),
    ];
    for (args, want) in cases {
        assert_eq!(&cli(port, args), want, "redis-cli {args:?}");
    }
    assert!(cli(port, &["info"]).contains("masse_records_per_commit:"));
    assert!(cli(port, &["-3", "hello", "3"]).contains("proto 3\n"));
    assert!(cli(port, &["command", "docs", "get"]).contains("Returns the string value of a key."));

    // Mass insertion (redis-cli --pipe), then every key back with --scan.
    let mut proto = Vec::new();
    for i in 0..5000 {
        proto.extend(encode(&[
            b"SET",
            format!("bulk:{i}").as_bytes(),
            format!("v{i}").as_bytes(),
        ]));
    }
    let mut child = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "--pipe"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("redis-cli --pipe");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&proto)
        .expect("pipe");
    let o = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("errors: 0, replies: 5000"), "{text}");
    let scanned = cli(port, &["--scan", "--pattern", "bulk:*"]);
    let mut keys: Vec<&str> = scanned.lines().collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 5000, "--scan returns every key once");
    assert_eq!(cli(port, &["get", "bulk:4321"]), "v4321\n");
    let (st, err) = srv.stop();
    assert!(st.success(), "{err}");
    assert!(err.contains("pool closed cleanly"), "{err}");
}

#[test]
fn redis_cli_auth_and_shutdown() {
    if !have_tool("redis-cli") {
        return;
    }
    let pool = Pool::create("64M", "512M");
    let pw = pool.dir.path().join("password");
    std::fs::write(&pw, "correct horse\n").expect("password file");
    let (mut srv, port) = serve(&pool, &["--password-file", pw.to_str().expect("utf-8")]);
    assert_eq!(
        cli(port, &["get", "k"]),
        "NOAUTH Authentication required.\n\n",
        "redis-cli prints an error and a blank line"
    );
    let a = ["--no-auth-warning", "-a"];
    let o = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), a[0], a[1], "wrong", "get", "k"])
        .output()
        .expect("redis-cli");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("AUTH failed: WRONGPASS invalid username-password pair or user is disabled."),
        "{err}"
    );
    assert_eq!(
        cli(port, &[a[0], a[1], "correct horse", "set", "k", "durable"]),
        "OK\n"
    );
    assert_eq!(cli(port, &[a[0], a[1], "correct horse", "shutdown"]), "");
    let mut child = srv.child.take().expect("child");
    let st = child.wait().expect("wait");
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("stderr");
    assert!(
        st.success() && err.contains("pool closed cleanly"),
        "{st}: {err}"
    );
    // Reopened, the write is there.
    let (_srv, port) = serve(&pool, &["--requirepass", "correct horse"]);
    assert_eq!(
        cli(port, &[a[0], a[1], "correct horse", "get", "k"]),
        "durable\n"
    );
}

/// SIGTERM while a client pipelines writes: the server answers what it already took,
/// exits cleanly (pool closed), and after a restart every acknowledged write is there.
#[test]
fn sigterm_drains_writes_in_flight() {
    let pool = Pool::create("64M", "512M");
    let (srv, port) = serve(&pool, &[]);
    let writer = std::thread::spawn(move || {
        let mut c = Raw::connect(port);
        let mut acked = 0usize;
        'outer: for round in 0.. {
            let mut b = Vec::new();
            for j in 0..100 {
                let k = format!("w{}", round * 100 + j);
                b.extend(encode(&[b"SET", k.as_bytes(), k.as_bytes()]));
            }
            if c.send(&b).is_err() {
                break;
            }
            for _ in 0..100 {
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.reply())) {
                    Ok(r) if r == "+OK\r\n" => acked += 1,
                    _ => break 'outer,
                }
            }
        }
        acked
    });
    std::thread::sleep(std::time::Duration::from_millis(400));
    let (st, err) = srv.stop();
    let acked = writer.join().expect("writer");
    assert!(
        st.success() && err.contains("pool closed cleanly"),
        "{st}: {err}"
    );
    assert!(acked > 0, "nothing was acknowledged before SIGTERM");
    let (_srv, port) = serve(&pool, &[]);
    let mut c = Raw::connect(port);
    for i in 0..acked {
        let k = format!("w{i}");
        assert_eq!(
            c.cmd(&["GET", &k]),
            format!("${}\r\n{k}\r\n", k.len()),
            "acknowledged {k} lost"
        );
    }
    println!("{acked} acknowledged writes before SIGTERM, all present after the restart");
}
