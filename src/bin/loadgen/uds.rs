//! `--addr unix:/path`: the connector that dials a sidecar's Unix socket
//! whatever the channel's URI says (as tonic's `uds` example does).

pub use context_assembler::server::dial::Dial;

/// A connector to the path of `unix:PATH` (`unix:///abs` as gRPC names it:
/// `//` dropped).
pub fn dial(path: &str) -> Dial {
    let path = path
        .strip_prefix("//")
        .filter(|p| p.starts_with('/'))
        .unwrap_or(path);
    Dial::new(path)
}
