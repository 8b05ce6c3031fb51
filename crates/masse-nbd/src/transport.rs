//! The transport: the sockets the server listens on and the streams it serves,
//! over TCP or a Unix socket alike.
//!
//! Kept apart so the rest of the crate sees one [`Stream`] type and never asks
//! which kind of socket it holds; the per-socket setup (Nagle off, keep-alive,
//! blocking mode) is decided here, once, at accept.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

/// An accepted client connection, TCP or Unix.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub(crate) fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
    /// Send what the socket takes now (WouldBlock if nothing); no SIGPIPE.
    pub(crate) fn send_now(&self, b: &[u8]) -> io::Result<usize> {
        // SAFETY: sends from a live buffer of b.len() bytes.
        let n = unsafe {
            libc::send(
                self.fd(),
                b.as_ptr().cast(),
                b.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
    /// Receive what has arrived (WouldBlock if nothing; 0 at end of stream).
    pub(crate) fn recv_now(&self, b: &mut [u8]) -> io::Result<usize> {
        // SAFETY: receives into a live buffer of b.len() bytes.
        let n = unsafe {
            libc::recv(
                self.fd(),
                b.as_mut_ptr().cast(),
                b.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
    pub(crate) fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }
    pub(crate) fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(how),
            Stream::Unix(s) => s.shutdown(how),
        };
    }
    pub(crate) fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }
    pub(crate) fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Unix(s) => s.set_write_timeout(t),
        }
    }
    pub(crate) fn peer(&self) -> String {
        match self {
            Stream::Tcp(s) => s
                .peer_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "tcp".into()),
            Stream::Unix(_) => "unix socket".into(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A listening socket; a Unix one remembers its path, to remove the file at stop.
pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Listener {
    pub(crate) fn fd(&self) -> RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l, _) => l.as_raw_fd(),
        }
    }
    /// The next waiting client, set up for serving (blocking, Nagle off and
    /// keep-alive on TCP); `WouldBlock` when none is waiting.
    pub(crate) fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                // Replies are small and latency-bound (spec: disable Nagle).
                s.set_nodelay(true)?;
                keepalive(s.as_raw_fd());
                Ok(Stream::Tcp(s))
            }
            Listener::Unix(l, _) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                Ok(Stream::Unix(s))
            }
        }
    }
    /// Remove a Unix socket's file, so the path is free for the next server.
    pub(crate) fn remove_socket_file(&self) {
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// TCP keep-alive probes after a minute of silence, every 10 s, 6 tries: a peer
/// that vanished without closing (a half-open connection) is found in about two
/// minutes, while a live client may stay idle as long as it likes.
fn keepalive(fd: RawFd) {
    let set = |level, opt, v: libc::c_int| {
        // SAFETY: setsockopt on our own socket with a valid c_int.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 60);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 10);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 6);
}
