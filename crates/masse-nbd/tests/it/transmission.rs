//! The transmission phase: many requests in flight with replies matched by handle,
//! structured and simple replies, every command's error codes per the spec, trim and
//! write-zeroes reading back as zeros, block status, read-only exports, and
//! NBD_CMD_DISC answering everything in flight before closing.
use crate::common;
use common::*;
use masse::vblock::VolumeSpec;
use masse_nbd::proto::*;
use masse_nbd::ServerConfig;
use std::collections::HashMap;

const SIZE: u64 = 8 << 20;

#[test]
fn pipelined_requests_and_errors() {
    let spec = VolumeSpec {
        size: SIZE,
        block_size: 512,
        chunk_size: 4096,
    };
    let r = start(
        spec,
        ServerConfig {
            workers: 8,
            max_inflight: 16,
            ..Default::default()
        },
    );

    // 300 writes of 512..8192 bytes sent without waiting, then 300 reads, all in flight.
    let mut c = Client::connect(&r, "disk", true, true);
    assert_eq!(c.size, SIZE);
    let f = c.flags;
    for flag in [
        FLAG_HAS_FLAGS,
        FLAG_SEND_FLUSH,
        FLAG_SEND_FUA,
        FLAG_SEND_TRIM,
        FLAG_SEND_WRITE_ZEROES,
        FLAG_CAN_MULTI_CONN,
        FLAG_SEND_DF,
    ] {
        assert!(f & flag != 0, "flag {flag:#x} not advertised");
    }
    assert_eq!(f & FLAG_READ_ONLY, 0);
    let mut model = vec![0u8; SIZE as usize];
    let mut expect: HashMap<u64, (u64, usize)> = HashMap::new();
    let writer = {
        let mut reqs = Vec::new();
        for i in 0..300u64 {
            let off = (i * 7919 * 512) % (SIZE - 8192);
            let len = 512 * (1 + (i % 16) as usize);
            let data = pattern(i, len);
            model[off as usize..off as usize + len].copy_from_slice(&data);
            reqs.push((i, off, data));
        }
        reqs
    };
    // Overlapping writes in flight may land in any order: keep them disjoint per batch
    // by sending in order and waiting for all before reading.
    let mut s2 = c.s.try_clone().expect("clone");
    let sender = std::thread::spawn(move || {
        use std::io::Write;
        let mut buf = Vec::new();
        for (i, off, data) in &writer {
            buf.clear();
            buf.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
            buf.extend_from_slice(&CMD_FLAG_FUA.to_be_bytes());
            buf.extend_from_slice(&CMD_WRITE.to_be_bytes());
            buf.extend_from_slice(&i.to_be_bytes());
            buf.extend_from_slice(&off.to_be_bytes());
            buf.extend_from_slice(&(data.len() as u32).to_be_bytes());
            buf.extend_from_slice(data);
            s2.write_all(&buf).expect("send");
        }
        writer
    });
    let mut order = Vec::new();
    for _ in 0..300 {
        let rep = c.reply(|_| 0);
        assert_eq!(rep.error, 0);
        order.push(rep.handle);
    }
    let writer = sender.join().expect("sender");
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        (0..300).collect::<Vec<_>>(),
        "every handle answered once"
    );
    // Overlapping writes raced: the model must follow completion order for those.
    // Re-apply writes in reply order (a reply means the write is done).
    model.fill(0);
    for h in &order {
        let (_, off, data) = &writer[*h as usize];
        model[*off as usize..*off as usize + data.len()].copy_from_slice(data);
    }
    for i in 0..300u64 {
        let off = (i * 4099 * 512) % (SIZE - 65536);
        let len = 512 * (1 + (i % 128) as u32);
        c.send(0, CMD_READ, 10_000 + i, off, len, &[]);
        expect.insert(10_000 + i, (off, len as usize));
    }
    for _ in 0..300 {
        let rep = c.reply(|_| 0);
        assert_eq!(rep.error, 0);
        let (off, len) = expect.remove(&rep.handle).expect("known handle");
        assert_eq!(rep.data.len(), len);
        assert!(
            rep.data == model[off as usize..off as usize + len],
            "read {off}+{len} differs"
        );
    }

    // Error codes.
    let e = |c: &mut Client, flags, kind, off, len| c.cmd(flags, kind, off, len).error;
    let (err, _) = c.read(1, SIZE - 512, 1024);
    assert_eq!(err, EINVAL, "read beyond the end");
    let (err, _) = c.read(2, 100, 512);
    assert_eq!(err, EINVAL, "unaligned read");
    let (err, _) = c.read(3, 0, MAX_PAYLOAD + 512);
    assert_eq!(err, EINVAL, "read above the maximum");
    assert_eq!(
        c.write(4, SIZE - 512, &[1u8; 1024]),
        ENOSPC,
        "write beyond the end"
    );
    assert_eq!(c.write(5, 512, &[1u8; 100]), EINVAL, "unaligned write");
    assert_eq!(e(&mut c, 0, 99, 0, 0), EINVAL, "unknown command");
    assert_eq!(e(&mut c, 1 << 9, CMD_FLUSH, 0, 0), EINVAL, "unknown flag");
    assert_eq!(
        e(&mut c, CMD_FLAG_REQ_ONE, CMD_WRITE_ZEROES, 0, 512),
        EINVAL,
        "flag of another command"
    );
    assert_eq!(
        e(&mut c, 0, CMD_TRIM, SIZE, 512),
        EINVAL,
        "trim beyond the end"
    );
    assert_eq!(
        e(&mut c, 0, CMD_WRITE_ZEROES, SIZE, 512),
        ENOSPC,
        "zero beyond the end"
    );
    assert_eq!(
        e(&mut c, 0, CMD_BLOCK_STATUS, SIZE - 512, 1024),
        EINVAL,
        "status beyond the end"
    );
    assert_eq!(e(&mut c, 0, CMD_FLUSH, 0, 0), 0);
    assert_eq!(e(&mut c, CMD_FLAG_FUA, CMD_CACHE, 0, 4096), 0);
    assert_eq!(
        e(&mut c, CMD_FLAG_FAST_ZERO, CMD_WRITE_ZEROES, 512, 512),
        ENOTSUP,
        "fast zero of a partial chunk"
    );

    // Trim and write-zeroes read back as zeros and show up as holes.
    let data = pattern(9, 65536);
    assert_eq!(c.write(6, 1 << 20, &data), 0);
    assert_eq!(e(&mut c, 0, CMD_WRITE_ZEROES, (1 << 20) + 512, 4096), 0);
    assert_eq!(
        e(
            &mut c,
            CMD_FLAG_FAST_ZERO | CMD_FLAG_FUA,
            CMD_WRITE_ZEROES,
            (1 << 20) + 16384,
            8192
        ),
        0
    );
    assert_eq!(e(&mut c, 0, CMD_TRIM, (1 << 20) + 32768, 32768), 0);
    let (err, got) = c.read(7, 1 << 20, 65536);
    assert_eq!(err, 0);
    let mut want = data.clone();
    want[512..4608].fill(0);
    want[16384..24576].fill(0);
    want[32768..].fill(0);
    assert!(got == want, "zeroed ranges do not read as zeros");
    let st = c.cmd(0, CMD_BLOCK_STATUS, 1 << 20, 65536);
    assert_eq!(st.error, 0);
    let total: u64 = st.extents.iter().map(|x| x.0 as u64).sum();
    assert!(total > 0 && total <= 65536);
    let mut pos = 0usize;
    for (len, flags) in &st.extents {
        assert_eq!(len % 512, 0);
        if flags & STATE_ZERO != 0 {
            assert!(
                want[pos..pos + *len as usize].iter().all(|&x| x == 0),
                "zero extent has data"
            );
        }
        pos += *len as usize;
    }
    assert!(
        st.extents.iter().any(|x| x.1 == STATE_HOLE | STATE_ZERO),
        "trimmed chunks are holes"
    );
    let one = c.cmd(CMD_FLAG_REQ_ONE, CMD_BLOCK_STATUS, 0, SIZE as u32);
    assert_eq!(one.extents.len(), 1);
    c.disconnect();

    // Without meta context negotiation, block status is refused.
    let mut c = Client::connect(&r, "disk", true, false);
    assert_eq!(c.cmd(0, CMD_BLOCK_STATUS, 0, 4096).error, EINVAL);
    c.disconnect();

    // Simple replies (no structured negotiation): reads carry raw data.
    let mut c = Client::connect(&r, "disk", false, false);
    assert_eq!(c.flags & FLAG_SEND_DF, 0, "DF without structured replies");
    let (err, got) = c.read(8, 1 << 20, 512);
    assert_eq!(err, 0);
    assert_eq!(got, want[..512]);
    let (err, got) = c.read(9, SIZE, 512);
    assert_eq!(err, EINVAL);
    assert!(got.is_empty(), "no payload after an error in simple mode");
    c.disconnect();

    // Read-only export.
    let mut c = Client::connect(&r, "ro", true, false);
    assert!(c.flags & FLAG_READ_ONLY != 0);
    assert_eq!(c.write(10, 0, &[1u8; 512]), EPERM);
    assert_eq!(c.cmd(0, CMD_TRIM, 0, 512).error, EPERM);
    assert_eq!(c.cmd(0, CMD_WRITE_ZEROES, 0, 512).error, EPERM);
    let (err, got) = c.read(11, 0, 4096);
    assert_eq!(err, 0);
    assert!(got.iter().all(|&x| x == 0));

    // NBD_CMD_DISC right after a burst: every request before it is answered.
    let mut c = Client::connect(&r, "disk", true, false);
    for i in 0..50u64 {
        c.send(0, CMD_WRITE, i, i * 4096, 4096, &pattern(i + 500, 4096));
    }
    c.send(0, CMD_DISC, 999, 0, 0, &[]);
    let mut got = Vec::new();
    for _ in 0..50 {
        let rep = c.reply(|_| 0);
        assert_eq!(rep.error, 0);
        got.push(rep.handle);
    }
    got.sort();
    assert_eq!(got, (0..50).collect::<Vec<_>>());
    assert!(closed(&mut c.s), "connection must close after DISC");
    let mut c = Client::connect(&r, "disk", true, false);
    for i in 0..50u64 {
        let (err, d) = c.read(i, i * 4096, 4096);
        assert_eq!(err, 0);
        assert_eq!(d, pattern(i + 500, 4096));
    }
    c.disconnect();
    r.shutdown();
}
