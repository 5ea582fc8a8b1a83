//! Listen addresses: a TCP `host:port`, or `unix:/abs/path`, a Unix domain
//! socket (a pod's shared `emptyDir`), checked before anything is bound: an
//! absolute path whose folder exists, short enough for `sun_path`. What may
//! already lie at the path (a stale socket is replaced, anything else is
//! refused) is decided when binding, in `server::listener`.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The prefix that makes an address a Unix socket path.
pub const UNIX_PREFIX: &str = "unix:";

/// The longest socket path in bytes: `sun_path` holds 108 bytes on Linux
/// (104 on the BSDs and macOS) including the terminating NUL.
#[cfg(target_os = "linux")]
pub const MAX_UNIX_PATH_BYTES: usize = 107;
/// See the Linux value.
#[cfg(not(target_os = "linux"))]
pub const MAX_UNIX_PATH_BYTES: usize = 103;

/// Where a listener listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// A TCP socket address (port 0 picks a free port).
    Tcp(SocketAddr),
    /// A Unix domain socket at this absolute path.
    Unix(PathBuf),
}

impl ListenAddr {
    /// The Unix socket path, if this is one.
    pub fn unix_path(&self) -> Option<&Path> {
        match self {
            ListenAddr::Unix(p) => Some(p),
            ListenAddr::Tcp(_) => None,
        }
    }

    /// The TCP address, if this is one.
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            ListenAddr::Tcp(a) => Some(*a),
            ListenAddr::Unix(_) => None,
        }
    }
}

/// `127.0.0.1:50051`, or `unix:/run/sidecar/grpc.sock`: the form it is
/// configured in.
impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(a) => a.fmt(f),
            ListenAddr::Unix(p) => write!(f, "{UNIX_PREFIX}{}", p.display()),
        }
    }
}

/// `value` as a listen address, or why not (a message without the key).
/// `unix:///abs` (gRPC's naming form) is read as `unix:/abs`.
pub(super) fn parse(value: &str) -> Result<ListenAddr, String> {
    let Some(rest) = value.strip_prefix(UNIX_PREFIX) else {
        return value
            .parse::<SocketAddr>()
            .map(ListenAddr::Tcp)
            .map_err(|e| format!("{value:?} is not host:port or unix:/absolute/path: {e}"));
    };
    let path = match rest.strip_prefix("//") {
        Some(abs) if abs.starts_with('/') => abs,
        _ => rest,
    };
    let path = Path::new(path);
    if !path.is_absolute() {
        return Err(format!("{value:?}: a Unix socket path must be absolute"));
    }
    if path.as_os_str().len() > MAX_UNIX_PATH_BYTES {
        return Err(format!(
            "{value:?}: a Unix socket path is at most {MAX_UNIX_PATH_BYTES} bytes (sun_path), this one is {}",
            path.as_os_str().len()
        ));
    }
    if path.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(format!("{value:?}: a Unix socket path cannot hold a NUL byte"));
    }
    let Some(parent) = path.parent().filter(|_| path.file_name().is_some()) else {
        return Err(format!("{value:?}: name a socket file, not a folder"));
    };
    if !parent.is_dir() {
        return Err(format!(
            "{value:?}: the folder {} does not exist",
            parent.display()
        ));
    }
    Ok(ListenAddr::Unix(path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_paths_are_checked_before_binding() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("grpc.sock");
        let ok = format!("unix:{}", sock.display());
        assert_eq!(parse(&ok), Ok(ListenAddr::Unix(sock.clone())));
        assert_eq!(
            parse(&format!("unix://{}", sock.display())),
            Ok(ListenAddr::Unix(sock.clone()))
        );
        assert_eq!(parse(&ok).unwrap().to_string(), ok, "shown as configured");
        let long = format!("unix:/{}", "a".repeat(MAX_UNIX_PATH_BYTES));
        let refused = [
            ("unix:relative.sock", "absolute"),
            ("unix:", "absolute"),
            ("unix:/", "not a folder"),
            ("unix:/no/such/folder/x.sock", "does not exist"),
            (long.as_str(), "sun_path"),
            ("nowhere", "host:port"),
        ];
        for (value, why) in refused {
            let e = parse(value).unwrap_err();
            assert!(e.contains(why), "{value}: {e}");
        }
        assert_eq!(
            parse("127.0.0.1:0"),
            Ok(ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()))
        );
    }
}
