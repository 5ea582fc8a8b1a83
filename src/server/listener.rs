//! The listeners of gRPC and the render node: a TCP port or a Unix domain
//! socket, accepted alike. At bind, a socket file left by an earlier run
//! (nothing answers on it) is replaced; a socket something still answers on,
//! and anything that is not a socket (a regular file, a folder, a symlink),
//! is refused and left as it is. The socket file is made group-writable
//! (`0o660`: a container of the pod in the same group may connect) and is
//! removed when the listener is dropped (the drain's first step), if it is
//! still the file this listener bound.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tracing::{debug, info};

use crate::config::ListenAddr;
use crate::http1;

/// The mode of a socket file: owner and group may connect (connecting needs
/// write permission), others may not.
const UNIX_SOCKET_MODE: u32 = 0o660;

/// A bound listener.
#[derive(Debug)]
pub enum Listener {
    /// A TCP port.
    Tcp(TcpListener),
    /// A Unix socket, its file removed on drop.
    Unix(UnixSocket),
}

/// A Unix listener and the file it owns.
#[derive(Debug)]
pub struct UnixSocket {
    listener: UnixListener,
    path: PathBuf,
    /// The socket file's device and inode: a file put in its place since is
    /// not removed.
    file: (u64, u64),
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.file);
        if ours {
            match std::fs::remove_file(&self.path) {
                Ok(()) => debug!(path = %self.path.display(), "socket file removed"),
                Err(e) => debug!(path = %self.path.display(), err = %e, "cannot remove the socket file"),
            }
        }
    }
}

/// Who connected: a TCP peer, or a process on the same host (its address
/// on an unnamed Unix socket says nothing).
#[derive(Debug, Clone, Copy)]
pub enum Peer {
    /// A TCP peer address.
    Tcp(SocketAddr),
    /// A Unix socket peer.
    Unix,
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Tcp(a) => a.fmt(f),
            Peer::Unix => f.write_str("unix"),
        }
    }
}

impl Listener {
    /// Binds `addr`; see the module docs for what may lie at a socket path.
    pub async fn bind(addr: &ListenAddr) -> io::Result<Listener> {
        match addr {
            ListenAddr::Tcp(a) => TcpListener::bind(a).await.map(Listener::Tcp),
            ListenAddr::Unix(path) => bind_unix(path).await.map(Listener::Unix),
        }
    }

    /// The bound address (a TCP port 0 resolved to the port the kernel gave).
    pub fn local_addr(&self) -> io::Result<ListenAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr().map(ListenAddr::Tcp),
            Listener::Unix(u) => Ok(ListenAddr::Unix(u.path.clone())),
        }
    }

    /// The bound address as log lines show it.
    pub fn shown(&self) -> String {
        self.local_addr()
            .map_or_else(|e| e.to_string(), |a| a.to_string())
    }

    /// The next connection. TCP connections get `TCP_NODELAY`: Nagle's
    /// algorithm would hold small response frames behind delayed ACKs.
    pub async fn accept(&self) -> io::Result<(Stream, Peer)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                let _ = s.set_nodelay(true);
                Ok((Stream::Tcp(s), Peer::Tcp(peer)))
            }
            Listener::Unix(u) => {
                let (s, _) = u.listener.accept().await?;
                Ok((Stream::Unix(s), Peer::Unix))
            }
        }
    }
}

impl http1::Accept for Listener {
    type Io = Stream;

    async fn accept(&self) -> io::Result<Stream> {
        Listener::accept(self).await.map(|(s, _)| s)
    }
}

/// Clears the way for a socket at `path` and binds it.
async fn bind_unix(path: &Path) -> io::Result<UnixSocket> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
        Ok(m) if !m.file_type().is_socket() => {
            let kind = if m.is_file() {
                "a regular file"
            } else if m.is_dir() {
                "a folder"
            } else if m.file_type().is_symlink() {
                "a symbolic link"
            } else {
                "not a socket"
            };
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("the path exists and is {kind}: refusing to replace it"),
            ));
        }
        Ok(_) => match UnixStream::connect(path).await {
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another process is listening on this socket",
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                std::fs::remove_file(path)?;
                info!(path = %path.display(), "removed a stale socket file (nothing listened on it)");
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("a socket file is there and cannot be probed ({e}): refusing to replace it"),
                ));
            }
        },
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(UNIX_SOCKET_MODE))?;
    let m = std::fs::symlink_metadata(path)?;
    Ok(UnixSocket {
        listener,
        path: path.to_owned(),
        file: (m.dev(), m.ino()),
    })
}

/// An accepted connection.
#[derive(Debug)]
pub enum Stream {
    /// Over TCP.
    Tcp(TcpStream),
    /// Over a Unix socket.
    Unix(UnixStream),
}

macro_rules! both {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Stream::Tcp($s) => $e,
            Stream::Unix($s) => $e,
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        both!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        both!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        both!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        both!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        both!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_socket_file_is_replaced_only_when_stale_and_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let addr = ListenAddr::Unix(path.clone());
        let first = Listener::bind(&addr).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, UNIX_SOCKET_MODE);
        let live = Listener::bind(&addr).await.unwrap_err();
        assert_eq!(live.kind(), io::ErrorKind::AddrInUse, "{live}");
        drop(first);
        assert!(!path.exists(), "removed on drop");
        // A listener gone without removing its file (a crash) leaves it stale.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let second = Listener::bind(&addr).await.unwrap();
        drop(second);
        assert!(!path.exists(), "removed on drop");

        std::fs::write(&path, b"keep me").unwrap();
        let e = Listener::bind(&addr).await.unwrap_err();
        assert!(e.to_string().contains("regular file"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
    }
}
