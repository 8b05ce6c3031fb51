//! Malformed and hostile handshakes get the protocol's error replies (or, where the
//! spec says so, a closed connection), and the server keeps serving other clients:
//! after every bad session a well-behaved client still reads back its data.
use crate::common;
use common::*;
use masse::vblock::VolumeSpec;
use masse_nbd::proto::*;
use masse_nbd::ServerConfig;
use std::io::Write;

fn good_client_still_works(r: &Running, round: u64) {
    let mut c = Client::connect(r, "disk", true, false);
    let data = pattern(round, 4096);
    assert_eq!(c.write(round, round * 4096, &data), 0);
    let (e, got) = c.read(round + 1000, round * 4096, 4096);
    assert_eq!(e, 0);
    assert_eq!(got, data);
    c.disconnect();
}

#[test]
fn hostile_handshakes() {
    let r = start(VolumeSpec::new(8 << 20), ServerConfig::default());
    let mut round = 0;
    let mut next = |r: &Running| {
        round += 1;
        good_client_still_works(r, round);
    };

    // Unknown client flags: the server must drop the connection.
    let mut s = raw_connect(&r);
    greet(&mut s, 1 << 7);
    assert!(closed(&mut s));
    next(&r);

    // Bad option magic.
    let mut s = raw_connect(&r);
    greet(&mut s, FLAG_C_FIXED_NEWSTYLE);
    s.write_all(&[0x55; 16]).expect("send");
    assert!(closed(&mut s));
    next(&r);

    // Oversized option data (a denial-of-service length) closes the connection.
    let mut s = raw_connect(&r);
    greet(&mut s, FLAG_C_FIXED_NEWSTYLE);
    let mut b = IHAVEOPT.to_be_bytes().to_vec();
    b.extend_from_slice(&OPT_GO.to_be_bytes());
    b.extend_from_slice(&u32::MAX.to_be_bytes());
    s.write_all(&b).expect("send");
    assert!(closed(&mut s));
    next(&r);

    // Hang up in the middle of an option.
    let mut s = raw_connect(&r);
    greet(&mut s, FLAG_C_FIXED_NEWSTYLE);
    s.write_all(&IHAVEOPT.to_be_bytes()[..5]).expect("send");
    drop(s);
    next(&r);

    // One session full of bad options: each gets its error, and the session goes on.
    let mut s = raw_connect(&r);
    greet(&mut s, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
    send_opt(&mut s, 4242, b"whatever");
    assert_eq!(opt_reply(&mut s).1, REP_ERR_UNSUP, "unknown option");
    send_opt(&mut s, OPT_STARTTLS, &[]);
    assert_eq!(opt_reply(&mut s).1, REP_ERR_POLICY, "STARTTLS without TLS");
    send_opt(&mut s, OPT_LIST, b"x");
    assert_eq!(opt_reply(&mut s).1, REP_ERR_INVALID, "LIST with data");
    send_opt(&mut s, OPT_STRUCTURED_REPLY, b"x");
    assert_eq!(
        opt_reply(&mut s).1,
        REP_ERR_INVALID,
        "STRUCTURED_REPLY with data"
    );
    send_opt(
        &mut s,
        OPT_SET_META_CONTEXT,
        &meta_data("disk", &["base:allocation"]),
    );
    assert_eq!(
        opt_reply(&mut s).1,
        REP_ERR_INVALID,
        "meta context before structured replies"
    );
    // Name length pointing past the data.
    let mut d = 1000u32.to_be_bytes().to_vec();
    d.extend_from_slice(b"disk\0\0");
    send_opt(&mut s, OPT_GO, &d);
    assert_eq!(
        opt_reply(&mut s).1,
        REP_ERR_INVALID,
        "GO with a bad name length"
    );
    // Trailing bytes after the information requests.
    let mut d = go_data("disk", &[]);
    d.push(9);
    send_opt(&mut s, OPT_INFO, &d);
    assert_eq!(
        opt_reply(&mut s).1,
        REP_ERR_INVALID,
        "INFO with trailing bytes"
    );
    // Names that are not UTF-8.
    send_opt(&mut s, OPT_INFO, &{
        let mut d = 2u32.to_be_bytes().to_vec();
        d.extend_from_slice(&[0xff, 0xfe, 0, 0]);
        d
    });
    assert_eq!(opt_reply(&mut s).1, REP_ERR_INVALID, "non-UTF-8 name");
    send_opt(&mut s, OPT_GO, &go_data("nope", &[]));
    assert_eq!(opt_reply(&mut s).1, REP_ERR_UNKNOWN, "unknown export");
    send_opt(&mut s, OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(opt_reply(&mut s).1, REP_ACK);
    let mut bad = meta_data("disk", &[]);
    bad.truncate(bad.len() - 1);
    send_opt(&mut s, OPT_LIST_META_CONTEXT, &bad);
    assert_eq!(
        opt_reply(&mut s).1,
        REP_ERR_INVALID,
        "truncated meta context data"
    );
    send_opt(
        &mut s,
        OPT_SET_META_CONTEXT,
        &meta_data("disk", &["nocolon"]),
    );
    assert_eq!(
        opt_reply(&mut s).1,
        REP_ERR_INVALID,
        "query without namespace"
    );
    // Unknown namespaces are ignored, not errors.
    send_opt(
        &mut s,
        OPT_LIST_META_CONTEXT,
        &meta_data("disk", &["x-foo:bar"]),
    );
    assert_eq!(opt_reply(&mut s).1, REP_ACK);
    // After all that, the session still works: INFO, then ABORT is acknowledged.
    send_opt(
        &mut s,
        OPT_INFO,
        &go_data("disk", &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]),
    );
    let mut seen = Vec::new();
    loop {
        let (o, t, d) = opt_reply(&mut s);
        assert_eq!(o, OPT_INFO);
        if t == REP_ACK {
            break;
        }
        assert_eq!(t, REP_INFO);
        let it = u16::from_be_bytes([d[0], d[1]]);
        if it == INFO_BLOCK_SIZE {
            assert_eq!(d.len(), 14);
            assert_eq!(be32(&d[2..]), 4096, "minimum block size");
            assert_eq!(be32(&d[10..]), MAX_PAYLOAD, "maximum block size");
        }
        if it == INFO_EXPORT {
            assert_eq!(d.len(), 12);
            assert_eq!(be64(&d[2..]), 8 << 20);
        }
        if it == INFO_NAME {
            assert_eq!(&d[2..], b"disk");
        }
        seen.push(it);
    }
    seen.sort();
    assert_eq!(
        seen,
        [INFO_EXPORT, INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]
    );
    send_opt(&mut s, OPT_ABORT, &[]);
    assert_eq!(opt_reply(&mut s).1, REP_ACK);
    assert!(closed(&mut s));
    next(&r);

    // NBD_OPT_EXPORT_NAME with an unknown name cannot fail politely: closed.
    let mut s = raw_connect(&r);
    greet(&mut s, FLAG_C_FIXED_NEWSTYLE);
    send_opt(&mut s, OPT_EXPORT_NAME, b"nope");
    assert!(closed(&mut s));
    next(&r);

    // NBD_OPT_EXPORT_NAME for the default export (empty name), with the 124 zero bytes.
    let mut s = raw_connect(&r);
    greet(&mut s, FLAG_C_FIXED_NEWSTYLE);
    send_opt(&mut s, OPT_EXPORT_NAME, b"");
    let b: [u8; 134] = rd(&mut s);
    assert_eq!(be64(&b), 8 << 20);
    let flags = u16::from_be_bytes([b[8], b[9]]);
    assert!(flags & FLAG_HAS_FLAGS != 0 && flags & FLAG_READ_ONLY == 0);
    assert!(b[10..].iter().all(|&x| x == 0));
    drop(s);
    next(&r);

    // Transmission-phase garbage: bad request magic closes that connection only.
    let mut c = Client::connect(&r, "disk", false, false);
    c.s.write_all(&[0xAB; 28]).expect("send");
    assert!(closed(&mut c.s));
    next(&r);

    // A write announcing more than 32 MiB of payload is a hard disconnect.
    let mut c = Client::connect(&r, "disk", true, false);
    c.send(0, CMD_WRITE, 1, 0, MAX_PAYLOAD + 4096, &[]);
    assert!(closed(&mut c.s));
    next(&r);

    // A client hanging up in the middle of a write payload.
    let mut c = Client::connect(&r, "disk", true, false);
    c.send(0, CMD_WRITE, 1, 0, 8192, &[1u8; 100]);
    drop(c);
    next(&r);

    // Many connections that never finish the handshake do not block others.
    let idle: Vec<_> = (0..20).map(|_| raw_connect(&r)).collect();
    next(&r);
    drop(idle);
    let (_, _, _) = r.shutdown();
}
