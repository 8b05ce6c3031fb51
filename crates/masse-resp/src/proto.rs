//! RESP parsing (multibulk and inline requests, incrementally, within limits) and
//! reply encoding (RESP2, and RESP3 after `HELLO 3`), with Redis's own error texts.

/// Request limits. Violations are protocol errors: the client gets the error and
/// its connection is closed, as Redis does.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Longest bulk string (argument).
    pub max_bulk: usize,
    /// Most arguments of one command.
    pub max_args: usize,
    /// Longest inline command line.
    pub max_inline: usize,
    /// Most bytes one command may take, its arguments together (the query buffer).
    pub max_query: usize,
}

/// Before AUTH, Redis accepts only tiny commands (at most 10 arguments of 16 KiB):
/// an unauthenticated client cannot make the server buffer much.
const UNAUTH_MAX_ARGS: usize = 10;
const UNAUTH_MAX_BULK: usize = 16 * 1024;
/// Longest `*N` / `$N` header line.
const MAX_HEADER: usize = 64 * 1024;

/// A request, one argument per element.
pub type Args = Vec<Vec<u8>>;

/// Where a multibulk request is: its argument count, the arguments read so far
/// and the length of the one being read.
#[derive(Debug, Default)]
pub struct Parser {
    argc: usize,
    args: Args,
    bulk: Option<usize>,
    bytes: usize,
}

/// A protocol violation, with Redis's message (sent as `-ERR <msg>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoError(pub String);

fn perr<T>(m: impl Into<String>) -> Result<T, ProtoError> {
    Err(ProtoError(format!("Protocol error: {}", m.into())))
}

/// Redis's `string2ll`: optional '-', digits, no leading zeros, no sign on zero.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty()
        || !digits.bytes().all(|c| c.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
        || s == "-0"
    {
        return None;
    }
    s.parse().ok()
}

/// The line at the start of `b` (without its CRLF) and the bytes it spans.
fn line(b: &[u8]) -> Option<(&[u8], usize)> {
    let nl = b.iter().position(|&c| c == b'\n')?;
    let l = &b[..nl];
    Some((l.strip_suffix(b"\r").unwrap_or(l), nl + 1))
}

impl Parser {
    /// True when no request is partly read.
    pub fn idle(&self) -> bool {
        self.argc == 0
    }

    /// The next complete request in `buf[*pos..]`, advancing `*pos` past what it
    /// consumed. `Ok(None)`: more bytes are needed. Empty requests are skipped.
    pub fn next(
        &mut self,
        buf: &[u8],
        pos: &mut usize,
        lim: &Limits,
        authed: bool,
    ) -> Result<Option<Args>, ProtoError> {
        loop {
            if self.argc == 0 {
                let b = &buf[*pos..];
                match b.first() {
                    None => return Ok(None),
                    Some(b'*') => {
                        if !self.start_multibulk(b, pos, lim, authed)? {
                            return Ok(None);
                        }
                        if self.argc == 0 {
                            continue; // "*0" or "*-1": nothing to run
                        }
                    }
                    Some(_) => match inline(b, lim)? {
                        None => return Ok(None),
                        Some((args, used)) => {
                            *pos += used;
                            if args.is_empty() {
                                continue;
                            }
                            return Ok(Some(args));
                        }
                    },
                }
            }
            if !self.read_args(buf, pos, lim, authed)? {
                return Ok(None);
            }
            self.argc = 0;
            self.bytes = 0;
            return Ok(Some(std::mem::take(&mut self.args)));
        }
    }

    fn start_multibulk(
        &mut self,
        b: &[u8],
        pos: &mut usize,
        lim: &Limits,
        authed: bool,
    ) -> Result<bool, ProtoError> {
        let Some((l, used)) = line(b) else {
            if b.len() > MAX_HEADER {
                return perr("too big mbulk count string");
            }
            return Ok(false);
        };
        let max = if authed {
            lim.max_args
        } else {
            UNAUTH_MAX_ARGS
        };
        let n = match parse_i64(&l[1..]) {
            Some(n) if n <= max as i64 => n,
            _ => return perr("invalid multibulk length"),
        };
        *pos += used;
        if n > 0 {
            self.argc = n as usize;
            self.args = Vec::with_capacity(self.argc.min(1024));
        }
        Ok(true)
    }

    /// Reads arguments until all `argc` are in; false when bytes run out first.
    fn read_args(
        &mut self,
        buf: &[u8],
        pos: &mut usize,
        lim: &Limits,
        authed: bool,
    ) -> Result<bool, ProtoError> {
        let max_bulk = if authed {
            lim.max_bulk
        } else {
            UNAUTH_MAX_BULK
        };
        while self.args.len() < self.argc {
            let b = &buf[*pos..];
            let len = match self.bulk {
                Some(len) => len,
                None => {
                    let Some((l, used)) = line(b) else {
                        if b.len() > MAX_HEADER {
                            return perr("too big bulk count string");
                        }
                        if !b.is_empty() && b[0] != b'$' {
                            return perr(format!("expected '$', got '{}'", b[0] as char));
                        }
                        return Ok(false);
                    };
                    if l.first() != Some(&b'$') {
                        let c = l.first().map_or('\n', |&c| c as char);
                        return perr(format!("expected '$', got '{c}'"));
                    }
                    let len = match parse_i64(&l[1..]) {
                        Some(n) if n >= 0 && n as u64 <= max_bulk as u64 => n as usize,
                        _ => return perr("invalid bulk length"),
                    };
                    self.bytes += len;
                    if self.bytes > lim.max_query {
                        return perr(format!(
                            "the command exceeds the client query buffer limit of {} bytes",
                            lim.max_query
                        ));
                    }
                    *pos += used;
                    self.bulk = Some(len);
                    len
                }
            };
            let b = &buf[*pos..];
            if b.len() < len + 2 {
                return Ok(false);
            }
            if &b[len..len + 2] != b"\r\n" {
                return perr("bulk string not followed by CRLF");
            }
            self.args.push(b[..len].to_vec());
            self.bulk = None;
            *pos += len + 2;
        }
        Ok(true)
    }

    /// Bytes still missing from the bulk string being read, if one is: lets the
    /// reader size its buffer once for a large argument.
    pub fn bulk_pending(&self) -> Option<usize> {
        self.bulk.map(|l| l + 2)
    }
}

/// An inline request (`SET a b\r\n`, as typed in telnet): the arguments and the
/// bytes consumed, or None when the line is not complete yet.
fn inline(b: &[u8], lim: &Limits) -> Result<Option<(Args, usize)>, ProtoError> {
    let Some((l, used)) = line(b) else {
        if b.len() > lim.max_inline {
            return perr("too big inline request");
        }
        return Ok(None);
    };
    if l.len() > lim.max_inline {
        return perr("too big inline request");
    }
    match split_args(l) {
        Some(a) => Ok(Some((a, used))),
        None => perr("unbalanced quotes in request"),
    }
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Redis's `sdssplitargs`: whitespace-separated words, "double quotes" with
/// `\n \r \t \b \a \\ \" \xHH` escapes, 'single quotes' with `\'`. None when a
/// quote is unbalanced or a closing quote is not followed by a space.
pub fn split_args(l: &[u8]) -> Option<Args> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < l.len() && l[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= l.len() {
            return Some(out);
        }
        let mut cur = Vec::new();
        let (mut dq, mut sq) = (false, false);
        loop {
            let c = l.get(i).copied();
            if dq {
                match c? {
                    b'\\' if i + 3 < l.len() && l[i + 1] == b'x' => {
                        match (hex(l[i + 2]), hex(l[i + 3])) {
                            (Some(h), Some(lo)) => {
                                cur.push(h * 16 + lo);
                                i += 3;
                            }
                            _ => cur.push(b'\\'),
                        }
                    }
                    b'\\' if i + 1 < l.len() => {
                        i += 1;
                        cur.push(match l[i] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 8,
                            b'a' => 7,
                            o => o,
                        });
                    }
                    b'"' => {
                        if l.get(i + 1).is_some_and(|c| !c.is_ascii_whitespace()) {
                            return None;
                        }
                        dq = false;
                        i += 1;
                        break;
                    }
                    o => cur.push(o),
                }
            } else if sq {
                match c? {
                    b'\\' if l.get(i + 1) == Some(&b'\'') => {
                        i += 1;
                        cur.push(b'\'');
                    }
                    b'\'' => {
                        if l.get(i + 1).is_some_and(|c| !c.is_ascii_whitespace()) {
                            return None;
                        }
                        sq = false;
                        i += 1;
                        break;
                    }
                    o => cur.push(o),
                }
            } else {
                match c {
                    None => break,
                    Some(c) if c.is_ascii_whitespace() => break,
                    Some(b'"') => dq = true,
                    Some(b'\'') => sq = true,
                    Some(o) => cur.push(o),
                }
            }
            i += 1;
        }
        let _ = (dq, sq);
        out.push(cur);
    }
}

/// Replies being built for one client, in its protocol version.
#[derive(Debug, Default)]
pub struct Out {
    /// Encoded bytes not yet sent.
    pub buf: Vec<u8>,
    /// RESP3 (after `HELLO 3`).
    pub resp3: bool,
    /// Error replies added (for INFO's `total_error_replies`).
    pub errors: u64,
}

impl Out {
    fn head(&mut self, c: u8, n: impl itoa_like::Int) {
        self.buf.push(c);
        n.push_to(&mut self.buf);
        self.buf.extend_from_slice(b"\r\n");
    }
    /// `+OK`
    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }
    /// A status reply (`+text`).
    pub fn simple(&mut self, s: &str) {
        self.buf.push(b'+');
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }
    /// An error reply: `msg` starts with its code (`ERR`, `WRONGPASS`...); line
    /// breaks are replaced by spaces, as Redis does.
    pub fn err(&mut self, msg: &str) {
        self.errors += 1;
        self.buf.push(b'-');
        self.buf.extend(
            msg.bytes()
                .map(|c| if c == b'\r' || c == b'\n' { b' ' } else { c }),
        );
        self.buf.extend_from_slice(b"\r\n");
    }
    /// An integer.
    pub fn int(&mut self, i: i64) {
        self.head(b':', i);
    }
    /// A bulk string.
    pub fn bulk(&mut self, b: &[u8]) {
        if b.len() >= 64 << 10 {
            // Grow by what a large value needs, not by doubling: a client's unsent
            // replies then cost their size, not up to twice it.
            self.buf.reserve_exact(b.len() + 32);
        }
        self.head(b'$', b.len());
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(b"\r\n");
    }
    /// A bulk string or the null reply.
    pub fn opt_bulk(&mut self, b: Option<&[u8]>) {
        match b {
            Some(b) => self.bulk(b),
            None => self.null(),
        }
    }
    /// The null reply (`$-1` in RESP2, `_` in RESP3).
    pub fn null(&mut self) {
        self.buf
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"$-1\r\n" });
    }
    /// An array of `n` elements (which follow).
    pub fn array(&mut self, n: usize) {
        self.head(b'*', n);
    }
    /// A map of `n` pairs (which follow): a flat array of 2n in RESP2.
    pub fn map(&mut self, n: usize) {
        if self.resp3 {
            self.head(b'%', n);
        } else {
            self.head(b'*', 2 * n);
        }
    }
    /// A set of `n` elements (an array in RESP2).
    pub fn set(&mut self, n: usize) {
        self.head(if self.resp3 { b'~' } else { b'*' }, n);
    }
    /// Text meant for people (INFO): a verbatim string in RESP3, bulk in RESP2.
    pub fn verbatim(&mut self, text: &str) {
        if self.resp3 {
            self.head(b'=', text.len() + 4);
            self.buf.extend_from_slice(b"txt:");
            self.buf.extend_from_slice(text.as_bytes());
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text.as_bytes());
        }
    }
}

/// Decimal formatting into a byte buffer without allocating.
mod itoa_like {
    pub trait Int {
        fn push_to(self, b: &mut Vec<u8>);
    }
    impl Int for i64 {
        fn push_to(self, b: &mut Vec<u8>) {
            if self < 0 {
                b.push(b'-');
            }
            self.unsigned_abs().push_to(b);
        }
    }
    impl Int for u64 {
        fn push_to(self, b: &mut Vec<u8>) {
            let mut tmp = [0u8; 20];
            let mut i = tmp.len();
            let mut v = self;
            loop {
                i -= 1;
                tmp[i] = b'0' + (v % 10) as u8;
                v /= 10;
                if v == 0 {
                    break;
                }
            }
            b.extend_from_slice(&tmp[i..]);
        }
    }
    impl Int for usize {
        fn push_to(self, b: &mut Vec<u8>) {
            (self as u64).push_to(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim() -> Limits {
        Limits {
            max_bulk: 1000,
            max_args: 100,
            max_inline: 64,
            max_query: 5000,
        }
    }

    fn all(input: &[u8], authed: bool) -> (Vec<Args>, Result<(), ProtoError>, usize) {
        let mut p = Parser::default();
        let mut pos = 0;
        let mut v = Vec::new();
        loop {
            match p.next(input, &mut pos, &lim(), authed) {
                Ok(Some(a)) => v.push(a),
                Ok(None) => return (v, Ok(()), pos),
                Err(e) => return (v, Err(e), pos),
            }
        }
    }

    fn a(s: &[&str]) -> Args {
        s.iter().map(|x| x.as_bytes().to_vec()).collect()
    }

    #[test]
    fn multibulk_and_inline_in_one_buffer() {
        let input = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n*0\r\n\r\nset 'a b' \"c\\x41\\n\"\r\n*1\r\n$4\r\nPI";
        let (v, r, pos) = all(input, true);
        assert_eq!(r, Ok(()));
        assert_eq!(
            v,
            vec![a(&["GET", "k"]), a(&["PING"]), a(&["set", "a b", "cA\n"])]
        );
        assert_eq!(pos, input.len() - 2, "stops inside the incomplete argument");
    }

    #[test]
    fn byte_by_byte_is_the_same_as_at_once() {
        let input = b"*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$0\r\n\r\nECHO x\r\n";
        let mut p = Parser::default();
        let mut buf = Vec::new();
        let mut pos = 0;
        let mut got = Vec::new();
        for &c in input {
            buf.push(c);
            while let Some(x) = p.next(&buf, &mut pos, &lim(), true).expect("valid") {
                got.push(x);
            }
        }
        assert_eq!(got, vec![a(&["SET", "hello", ""]), a(&["ECHO", "x"])]);
    }

    #[test]
    fn hostile_input_gets_redis_errors() {
        let e = |i: &[u8], authed| all(i, authed).1.expect_err("must fail").0;
        assert_eq!(
            e(b"*abc\r\n", true),
            "Protocol error: invalid multibulk length"
        );
        assert_eq!(
            e(b"*101\r\n", true),
            "Protocol error: invalid multibulk length"
        );
        assert_eq!(
            e(b"*11\r\n", false),
            "Protocol error: invalid multibulk length"
        );
        assert_eq!(
            e(b"*1\r\n$1001\r\n", true),
            "Protocol error: invalid bulk length"
        );
        assert_eq!(
            e(b"*1\r\n$-5\r\n", true),
            "Protocol error: invalid bulk length"
        );
        assert_eq!(
            e(b"*1\r\n$9999999999999999999999\r\n", true),
            "Protocol error: invalid bulk length"
        );
        assert_eq!(
            e(b"*1\r\n$16385\r\n", false),
            "Protocol error: invalid bulk length"
        );
        assert_eq!(
            e(b"*1\r\n:5\r\n", true),
            "Protocol error: expected '$', got ':'"
        );
        assert_eq!(
            e(b"*1\r\n$1\r\nab\r\n", true),
            "Protocol error: bulk string not followed by CRLF"
        );
        assert_eq!(
            e(b"set \"a\r\n", true),
            "Protocol error: unbalanced quotes in request"
        );
        assert_eq!(
            e(&[b'x'; 65], true),
            "Protocol error: too big inline request"
        );
        assert_eq!(
            e(&[b"*".as_slice(), &[b'1'; 70000]].concat(), true),
            "Protocol error: too big mbulk count string"
        );
        let six = b"*6\r\n$1000\r\n".to_vec();
        let mut big = six.clone();
        for _ in 0..5 {
            big.extend_from_slice(&[b'v'; 1000]);
            big.extend_from_slice(b"\r\n$1000\r\n");
        }
        assert!(e(&big, true).contains("query buffer limit"));
    }

    #[test]
    fn integers_are_strict() {
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"0"), Some(0));
        for bad in [
            &b""[..],
            b"-",
            b"01",
            b"-0",
            b"+1",
            b" 1",
            b"1 ",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn replies_in_both_protocols() {
        let mut o = Out::default();
        o.null();
        o.map(1);
        o.int(-7);
        o.verbatim("x");
        assert_eq!(o.buf, b"$-1\r\n*2\r\n:-7\r\n$1\r\nx\r\n");
        let mut o = Out {
            resp3: true,
            ..Out::default()
        };
        o.null();
        o.map(1);
        o.verbatim("x");
        o.err("ERR a\r\nb");
        assert_eq!(o.buf, b"_\r\n%1\r\n=5\r\ntxt:x\r\n-ERR a  b\r\n");
    }
}
