//! The HTTP server behind `--metrics`: GET only, one request per connection,
//! with every resource a client can make it hold bounded.
//!
//! Why not a general HTTP server crate. The one used before (tiny_http) started a
//! thread per connection and buffered a header line of any length: 1,500 half-sent
//! requests made 1,611 threads, four 256 MiB header lines a gigabyte of memory. A
//! scrape endpoint needs none of HTTP's generality, so this one is small enough to
//! bound by inspection:
//! - threads: one acceptor and [`WORKERS`] workers, fixed at start;
//! - connections: at most [`QUEUE`] accepted connections wait for a worker; more are
//!   answered 503 and closed at once, without a read;
//! - memory: a request (line and headers) is read into a buffer of at most
//!   [`MAX_REQUEST`] bytes; a longer one is answered 431 and closed;
//! - time: a request must arrive whole within [`READ_TIMEOUT`] (a total deadline,
//!   not per read, so a byte every few seconds does not keep a worker), and the reply
//!   must be taken within [`WRITE_TIMEOUT`].

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest request (request line and headers) read.
pub const MAX_REQUEST: usize = 8 << 10;
/// Threads answering requests.
pub const WORKERS: usize = 4;
/// Accepted connections waiting for a worker, beyond which connections are refused.
pub const QUEUE: usize = 16;
/// Time a client has to send its whole request.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a client has to take the reply.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A parsed request: what the handler needs.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// The `Authorization` header's value, if any.
    pub authorization: Option<String>,
}

/// A reply: status, content type, body.
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    /// Extra header lines (each ending in CRLF).
    pub headers: String,
}

impl Reply {
    pub fn text(status: u16, body: impl Into<String>) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
            headers: String::new(),
        }
    }
}

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("request larger than {MAX_REQUEST} bytes")]
    TooLarge,
    #[error("malformed request")]
    Malformed,
    #[error("request not sent within the time allowed")]
    Timeout,
    #[error("{0}")]
    Io(#[from] io::Error),
}

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

/// A running server; stops (and joins its threads) when dropped.
pub struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl HttpServer {
    /// Listens on `addr` and serves `handler` until dropped.
    pub fn start(addr: &str, handler: Arc<Handler>) -> io::Result<HttpServer> {
        let l = TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        let local = l.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = sync_channel::<Accepted>(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..WORKERS {
            let (rx, h, s) = (rx.clone(), handler.clone(), stop.clone());
            // Not joined: a stop waits for no client (see `Drop`).
            std::thread::Builder::new()
                .name(format!("metrics-http-{i}"))
                .spawn(move || worker(&rx, &*h, &s))?;
        }
        let s = stop.clone();
        let acceptor = std::thread::Builder::new()
            .name("metrics-accept".into())
            .spawn(move || acceptor(&l, tx, &s))?;
        Ok(HttpServer {
            addr: local,
            stop,
            acceptor: Some(acceptor),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Stops accepting (the listening socket is closed when this returns). Workers are
/// not waited for: one may be reading a slow request for up to [`READ_TIMEOUT`];
/// each drops the connections still queued and ends after its current one.
impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

/// A connection and when it was accepted: its request is due within
/// [`READ_TIMEOUT`] of that, time in the queue included.
type Accepted = (TcpStream, Instant);

/// Accepts until stopped (polled every 100 ms, so a drop never waits on a
/// client); a connection no worker can take soon is answered 503 and closed.
fn acceptor(l: &TcpListener, tx: SyncSender<Accepted>, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let mut p = libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut p, 1, 100) };
        loop {
            let s = match l.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break, // WouldBlock, or EMFILE: poll again shortly
            };
            match tx.try_send((s, Instant::now())) {
                Ok(()) => {}
                Err(TrySendError::Full((s, _))) => refuse(s),
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
    }
    // Dropping `tx` ends the workers once the queue is empty.
}

/// Best-effort 503 without reading or waiting (the socket's buffer takes it).
fn refuse(s: TcpStream) {
    let _ = s.set_nonblocking(true);
    let _ = (&s).write_all(
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
}

fn worker(rx: &Mutex<Receiver<Accepted>>, h: &Handler, stop: &AtomicBool) {
    loop {
        let next = match rx.lock() {
            Ok(r) => r.recv(),
            Err(_) => return,
        };
        let Ok((s, since)) = next else {
            return; // the acceptor stopped
        };
        if !stop.load(Ordering::SeqCst) {
            answer(s, since + READ_TIMEOUT, h);
        }
    }
}

/// Reads one request, answers it, closes.
fn answer(mut s: TcpStream, deadline: Instant, h: &Handler) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
    let reply = match read_request(&mut s, deadline) {
        Ok(r) => h(&r),
        Err(ReadError::TooLarge) => Reply::text(431, "request header fields too large\n"),
        Err(ReadError::Malformed) => Reply::text(400, "bad request\n"),
        Err(ReadError::Timeout) => Reply::text(408, "request timeout\n"),
        Err(ReadError::Io(_)) => return,
    };
    let _ = s.write_all(&encode(&reply));
    let _ = s.shutdown(std::net::Shutdown::Both);
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    }
}

fn encode(r: &Reply) -> Vec<u8> {
    let mut b = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len(),
        r.headers
    )
    .into_bytes();
    b.extend_from_slice(r.body.as_bytes());
    b
}

/// Reads up to the blank line ending the headers, within [`MAX_REQUEST`] bytes
/// and by `deadline`.
pub fn read_request(s: &mut impl ReadTimeout, deadline: Instant) -> Result<Request, ReadError> {
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut len = 0;
    loop {
        if let Some(end) = buf[..len].windows(4).position(|w| w == b"\r\n\r\n") {
            return parse(&buf[..end]);
        }
        if len == MAX_REQUEST {
            return Err(ReadError::TooLarge);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReadError::Timeout);
        }
        s.set_timeout(left)?;
        match s.read(&mut buf[len..]) {
            Ok(0) => return Err(ReadError::Malformed),
            Ok(n) => len += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(ReadError::Timeout)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// A stream whose reads can be given a timeout (a socket; a test double).
pub trait ReadTimeout: Read {
    fn set_timeout(&mut self, t: Duration) -> io::Result<()>;
}

impl ReadTimeout for TcpStream {
    fn set_timeout(&mut self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
}

/// The request line and the one header the server looks at.
fn parse(head: &[u8]) -> Result<Request, ReadError> {
    let text = std::str::from_utf8(head).map_err(|_| ReadError::Malformed)?;
    let mut lines = text.split("\r\n");
    let line = lines.next().ok_or(ReadError::Malformed)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ReadError::Malformed);
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(ReadError::Malformed);
    }
    let mut authorization = None;
    for h in lines {
        let (k, v) = h.split_once(':').ok_or(ReadError::Malformed)?;
        if k.trim().eq_ignore_ascii_case("authorization") {
            authorization = Some(v.trim().to_string());
        }
    }
    Ok(Request {
        method: method.to_string(),
        path: target.split('?').next().unwrap_or("").to_string(),
        authorization,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Slow(Vec<u8>, usize);
    impl Read for Slow {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            let n = b.len().min(self.0.len() - self.1).min(7);
            b[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
            self.1 += n;
            Ok(n)
        }
    }
    impl ReadTimeout for Slow {
        fn set_timeout(&mut self, _: Duration) -> io::Result<()> {
            Ok(())
        }
    }

    fn later() -> Instant {
        Instant::now() + READ_TIMEOUT
    }

    #[test]
    fn requests_are_parsed_and_bounded() {
        let mut ok = Slow(
            b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer t\r\n\r\n".to_vec(),
            0,
        );
        let r = read_request(&mut ok, later()).expect("request");
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/metrics"));
        assert_eq!(r.authorization.as_deref(), Some("Bearer t"));
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(1 << 20, b'a');
        let e = read_request(&mut Slow(big, 0), later());
        assert!(matches!(e, Err(ReadError::TooLarge)), "{e:?}");
        let e = read_request(&mut Slow(b"GARBAGE\r\n\r\n".to_vec(), 0), later());
        assert!(matches!(e, Err(ReadError::Malformed)), "{e:?}");
    }
}
