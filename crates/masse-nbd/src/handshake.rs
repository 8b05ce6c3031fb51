//! The fixed-newstyle handshake (NBD `doc/proto.md`, "Option haggling"), done on
//! the connection's thread under one deadline for the whole negotiation, and the
//! short exchange that tells a client the server is full.
//!
//! Separate from the transmission phase (`conn.rs`): it is a plain blocking
//! dialogue, one option after another, while transmission is an event loop.

use crate::config::Export;
use crate::conn::ConnInfo;
use crate::proto::*;
use crate::shared::Shared;
use crate::transport::Stream;
use std::io::{self, Read, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
pub(crate) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
pub(crate) fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// A protocol violation: the connection is closed.
#[derive(Debug)]
pub(crate) struct Violation(pub(crate) String);

impl From<io::Error> for Violation {
    fn from(e: io::Error) -> Violation {
        Violation(format!("socket: {e}"))
    }
}

/// What the handshake settled.
pub(crate) struct Session {
    pub(crate) export: Arc<Export>,
    pub(crate) structured: bool,
    pub(crate) meta: bool,
}

/// A blocking stream with one deadline for everything done through it: a client
/// that trickles its handshake a byte at a time cannot stretch it past the
/// deadline. Reads mark the connection as heard from.
pub(crate) struct Deadline<'a> {
    s: &'a mut Stream,
    until: Instant,
    info: Option<&'a ConnInfo>,
}

impl<'a> Deadline<'a> {
    pub(crate) fn new(s: &'a mut Stream, within: Duration, info: Option<&'a ConnInfo>) -> Self {
        Deadline {
            s,
            until: Instant::now() + within,
            info,
        }
    }
    fn left(&self) -> io::Result<Duration> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the handshake took too long",
            ));
        }
        Ok(left)
    }
}

impl Read for Deadline<'_> {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.s.set_read_timeout(Some(left))?;
        let n = self.s.read(b)?;
        if let Some(i) = self.info {
            i.heard();
        }
        Ok(n)
    }
}

impl Write for Deadline<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.s.set_write_timeout(Some(left))?;
        self.s.write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn opt_reply(s: &mut impl Write, opt: u32, kind: u32, data: &[u8]) -> io::Result<()> {
    let mut b = Vec::with_capacity(20 + data.len());
    b.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&kind.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b)
}

fn opt_error(s: &mut impl Write, opt: u32, kind: u32, msg: &str) -> io::Result<()> {
    opt_reply(s, opt, kind, msg.as_bytes())
}

fn transmission_flags(e: &Export, structured: bool) -> u16 {
    let mut f =
        FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_FUA | FLAG_CAN_MULTI_CONN | FLAG_SEND_CACHE;
    if e.read_only {
        f |= FLAG_READ_ONLY;
    } else {
        f |= FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FAST_ZERO;
    }
    if structured {
        // Reads always go out as one content chunk, so "don't fragment" holds anyway.
        f |= FLAG_SEND_DF;
    }
    f
}

/// Cursor over option data; running short is an invalid option.
struct Cur<'a>(&'a [u8]);
impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(be16)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(be32)
    }
    fn string(&mut self, n: usize) -> Option<&'a str> {
        if n > MAX_STRING {
            return None;
        }
        std::str::from_utf8(self.take(n)?).ok()
    }
}

fn find_export(sh: &Shared, name: &str) -> Option<Arc<Export>> {
    if name.is_empty() {
        return sh.exports.first().cloned();
    }
    sh.exports.iter().find(|e| e.name == name).cloned()
}

/// Parse NBD_OPT_{LIST,SET}_META_CONTEXT data: export name and queries.
fn parse_meta(data: &[u8]) -> Option<(&str, Vec<&str>)> {
    let mut c = Cur(data);
    let nl = c.u32()? as usize;
    let name = c.string(nl)?;
    let nq = c.u32()? as usize;
    let mut qs = Vec::new();
    for _ in 0..nq {
        let ql = c.u32()? as usize;
        qs.push(c.string(ql)?);
    }
    c.0.is_empty().then_some((name, qs))
}

/// Parse NBD_OPT_INFO / NBD_OPT_GO data: export name and information requests.
fn parse_info(data: &[u8]) -> Option<(String, Vec<u16>)> {
    let mut c = Cur(data);
    let nl = c.u32()? as usize;
    let name = c.string(nl)?;
    let n = c.u16()? as usize;
    let mut reqs = Vec::with_capacity(n);
    for _ in 0..n {
        reqs.push(c.u16()?);
    }
    c.0.is_empty().then_some((name.to_string(), reqs))
}

/// Greeting, then the client's flags. Returns whether it asked for no zeroes.
fn greet<S: Read + Write>(s: &mut S) -> Result<bool, Violation> {
    let mut hello = Vec::with_capacity(18);
    hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&hello)?;
    let mut b4 = [0u8; 4];
    s.read_exact(&mut b4)?;
    let cflags = be32(&b4);
    if cflags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(Violation(format!("unknown client flags {cflags:#x}")));
    }
    Ok(cflags & FLAG_C_NO_ZEROES != 0)
}

/// One option: its number and data (at most `MAX_OPTION_LEN` bytes).
fn read_option<S: Read>(s: &mut S) -> Result<(u32, Vec<u8>), Violation> {
    let mut h = [0u8; 16];
    s.read_exact(&mut h)?;
    if be64(&h) != IHAVEOPT {
        return Err(Violation(format!("bad option magic {:#x}", be64(&h))));
    }
    let opt = be32(&h[8..]);
    let len = be32(&h[12..]);
    if len > MAX_OPTION_LEN {
        return Err(Violation(format!(
            "option {opt} carries {len} bytes (at most {MAX_OPTION_LEN} accepted)"
        )));
    }
    let mut data = vec![0u8; len as usize];
    s.read_exact(&mut data)?;
    Ok((opt, data))
}

/// The negotiation: options until one selects an export (`Some`), or the client
/// aborts (`None`).
pub(crate) fn handshake<S: Read + Write>(
    sh: &Shared,
    s: &mut S,
) -> Result<Option<Session>, Violation> {
    let no_zeroes = greet(s)?;
    let mut n = Negotiation {
        sh,
        structured: false,
        meta: None,
    };
    for _ in 0..4096 {
        let (opt, data) = read_option(s)?;
        if sh.stopping.load(Relaxed) && opt != OPT_ABORT {
            if opt == OPT_EXPORT_NAME {
                return Ok(None);
            }
            opt_error(s, opt, REP_ERR_SHUTDOWN, "server is shutting down")?;
            continue;
        }
        let done = match opt {
            OPT_EXPORT_NAME => n.export_name(s, &data, no_zeroes).map(Some)?,
            OPT_ABORT => {
                let _ = opt_reply(s, opt, REP_ACK, &[]);
                return Ok(None);
            }
            OPT_LIST => n.list(s, &data).map(|_| None)?,
            OPT_STARTTLS => {
                opt_error(s, opt, REP_ERR_POLICY, "this server does not offer TLS")?;
                None
            }
            OPT_INFO | OPT_GO => n.info_go(s, opt, &data)?,
            OPT_STRUCTURED_REPLY => {
                if data.is_empty() {
                    n.structured = true;
                    opt_reply(s, opt, REP_ACK, &[])?;
                } else {
                    let m = "NBD_OPT_STRUCTURED_REPLY takes no data";
                    opt_error(s, opt, REP_ERR_INVALID, m)?;
                }
                None
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => n.meta(s, opt, &data).map(|_| None)?,
            _ => {
                let m = format!("option {opt} is not supported");
                opt_error(s, opt, REP_ERR_UNSUP, &m)?;
                None
            }
        };
        if done.is_some() {
            return Ok(done);
        }
    }
    Err(Violation("too many options".into()))
}

struct Negotiation<'a> {
    sh: &'a Shared,
    structured: bool,
    /// Export name for which base:allocation was selected.
    meta: Option<String>,
}

impl Negotiation<'_> {
    fn session(&self, export: Arc<Export>) -> Session {
        let meta = self.meta.as_deref() == Some(export.name.as_str());
        Session {
            export,
            structured: self.structured,
            meta,
        }
    }

    fn export_name<S: Write>(
        &self,
        s: &mut S,
        data: &[u8],
        no_zeroes: bool,
    ) -> Result<Session, Violation> {
        let Some(e) = std::str::from_utf8(data)
            .ok()
            .and_then(|n| find_export(self.sh, n))
        else {
            // This option cannot fail politely: the spec says close.
            return Err(Violation(format!(
                "NBD_OPT_EXPORT_NAME for unknown export {:?}",
                String::from_utf8_lossy(&data[..data.len().min(256)])
            )));
        };
        let mut b = Vec::with_capacity(134);
        b.extend_from_slice(&e.backend.size().to_be_bytes());
        b.extend_from_slice(&transmission_flags(&e, self.structured).to_be_bytes());
        if !no_zeroes {
            b.extend_from_slice(&[0u8; 124]);
        }
        s.write_all(&b)?;
        Ok(self.session(e))
    }

    fn list<S: Write>(&self, s: &mut S, data: &[u8]) -> io::Result<()> {
        if !data.is_empty() {
            return opt_error(s, OPT_LIST, REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
        }
        for e in &self.sh.exports {
            let mut d = Vec::new();
            d.extend_from_slice(&(e.name.len() as u32).to_be_bytes());
            d.extend_from_slice(e.name.as_bytes());
            d.extend_from_slice(e.backend.description().as_bytes());
            opt_reply(s, OPT_LIST, REP_SERVER, &d)?;
        }
        opt_reply(s, OPT_LIST, REP_ACK, &[])
    }

    fn info_go<S: Write>(
        &self,
        s: &mut S,
        opt: u32,
        data: &[u8],
    ) -> Result<Option<Session>, Violation> {
        let Some((name, reqs)) = parse_info(data) else {
            opt_error(s, opt, REP_ERR_INVALID, "malformed NBD_OPT_INFO/GO data")?;
            return Ok(None);
        };
        let Some(e) = find_export(self.sh, &name) else {
            let m = format!("no export named {name:?}");
            opt_error(s, opt, REP_ERR_UNKNOWN, &m)?;
            return Ok(None);
        };
        let mut d = Vec::with_capacity(12);
        d.extend_from_slice(&INFO_EXPORT.to_be_bytes());
        d.extend_from_slice(&e.backend.size().to_be_bytes());
        d.extend_from_slice(&transmission_flags(&e, self.structured).to_be_bytes());
        opt_reply(s, opt, REP_INFO, &d)?;
        if reqs.contains(&INFO_NAME) {
            let mut d = INFO_NAME.to_be_bytes().to_vec();
            d.extend_from_slice(e.name.as_bytes());
            opt_reply(s, opt, REP_INFO, &d)?;
        }
        if reqs.contains(&INFO_DESCRIPTION) {
            let mut d = INFO_DESCRIPTION.to_be_bytes().to_vec();
            d.extend_from_slice(e.backend.description().as_bytes());
            opt_reply(s, opt, REP_INFO, &d)?;
        }
        // Always sent: the minimum block size is enforced.
        let min = e.backend.min_block_size();
        let mut d = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
        d.extend_from_slice(&min.to_be_bytes());
        d.extend_from_slice(&e.backend.preferred_block_size().max(min).to_be_bytes());
        d.extend_from_slice(&MAX_PAYLOAD.to_be_bytes());
        opt_reply(s, opt, REP_INFO, &d)?;
        opt_reply(s, opt, REP_ACK, &[])?;
        Ok((opt == OPT_GO).then(|| self.session(e)))
    }

    fn meta<S: Write>(&mut self, s: &mut S, opt: u32, data: &[u8]) -> io::Result<()> {
        let set = opt == OPT_SET_META_CONTEXT;
        if set {
            // Replaced even when this option fails.
            self.meta = None;
        }
        if !self.structured {
            return opt_error(
                s,
                opt,
                REP_ERR_INVALID,
                "negotiate structured replies first",
            );
        }
        let Some((name, queries)) = parse_meta(data) else {
            return opt_error(s, opt, REP_ERR_INVALID, "malformed meta context data");
        };
        if queries.iter().any(|q| !q.contains(':')) {
            return opt_error(s, opt, REP_ERR_INVALID, "a query lacks its namespace");
        }
        let Some(e) = find_export(self.sh, name) else {
            let m = format!("no export named {name:?}");
            return opt_error(s, opt, REP_ERR_UNKNOWN, &m);
        };
        let selected = e.backend.has_block_status()
            && if set {
                queries.contains(&META_BASE_ALLOCATION)
            } else {
                queries.is_empty()
                    || queries
                        .iter()
                        .any(|q| *q == META_BASE_ALLOCATION || *q == "base:")
            };
        if selected {
            let id = if set { META_ID_BASE_ALLOCATION } else { 0 };
            let mut d = id.to_be_bytes().to_vec();
            d.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
            opt_reply(s, opt, REP_META_CONTEXT, &d)?;
            if set {
                self.meta = Some(e.name.clone());
            }
        }
        opt_reply(s, opt, REP_ACK, &[])
    }
}

/// How long a refused client is given to say what it wants before it is told.
const REFUSE_WITHIN: Duration = Duration::from_secs(2);

/// Tell a client the server is full: the greeting, then every option is answered
/// `NBD_REP_ERR_POLICY` with `why` until the one that picks an export (`GO` or
/// `INFO`: clients print the message and give up), then close. A client that
/// uses `NBD_OPT_EXPORT_NAME` (which cannot fail politely) or dawdles past 2 s is
/// just closed.
pub(crate) fn refuse(mut s: Stream, why: &str) {
    let mut d = Deadline::new(&mut s, REFUSE_WITHIN, None);
    let told = (|| -> Result<(), Violation> {
        greet(&mut d)?;
        for _ in 0..16 {
            let (opt, _) = read_option(&mut d)?;
            match opt {
                OPT_EXPORT_NAME => break,
                OPT_ABORT => {
                    opt_reply(&mut d, opt, REP_ACK, &[])?;
                    break;
                }
                _ => opt_error(&mut d, opt, REP_ERR_POLICY, why)?,
            }
            if opt == OPT_GO || opt == OPT_INFO {
                break;
            }
        }
        Ok(())
    })();
    if told.is_ok() {
        // Close only once the client has read the reply and hung up (or the time
        // is up): closing with its next option unread would reset the connection
        // and could lose the message.
        s.shutdown(std::net::Shutdown::Write);
        let mut d = Deadline::new(&mut s, REFUSE_WITHIN, None);
        let mut sink = [0u8; 512];
        while matches!(d.read(&mut sink), Ok(n) if n > 0) {}
    }
    s.shutdown(std::net::Shutdown::Both);
}
