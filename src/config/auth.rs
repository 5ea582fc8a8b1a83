//! `[auth]`: what each client certificate identity may claim in a request.
//! Validated here (names, sizes, patterns); matched by `grpc::auth`.

use serde::Deserialize;

use super::ConfigError;

/// Most `[[auth.clients]]` entries.
pub const MAX_AUTH_CLIENTS: usize = 1024;
/// Most subject prefixes, and most scope patterns, of one client.
pub const MAX_AUTH_PATTERNS: usize = 4096;
/// Longest identity, subject prefix or scope pattern, in bytes.
pub const MAX_AUTH_NAME_BYTES: usize = 1024;

/// One `[[auth.clients]]` table as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthClientEntry {
    /// A URI or DNS subject alternative name of the client certificate.
    pub identity: String,
    /// Subjects the client may name: each must start with one of these
    /// (`""` allows every subject).
    #[serde(default)]
    pub subject_prefixes: Vec<String>,
    /// Scopes the client may grant a principal: exact names, or a prefix
    /// followed by `*` (`"*"` allows every scope).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Whether the client's ReportUsage calls may move estimate margins.
    #[serde(default)]
    pub report_usage: bool,
}

super::section::section! {
    /// `[auth]` as written.
    pub struct AuthSection {
        /// `[[auth.clients]]`: when present (even empty), the whole list.
        pub clients: Option<Vec<AuthClientEntry>>,
    }
}

/// What one client identity may claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthClient {
    /// The certificate name (URI or DNS SAN) that selects this entry.
    pub identity: String,
    /// Allowed subject prefixes.
    pub subject_prefixes: Vec<String>,
    /// Allowed scope patterns (`name` or `prefix*`).
    pub scopes: Vec<String>,
    /// May move estimate margins.
    pub report_usage: bool,
}

/// Validated `[auth]`: empty means the body is trusted as sent (no check).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthSettings {
    /// The clients, in file order (the first whose identity a certificate
    /// carries applies).
    pub clients: Vec<AuthClient>,
}

impl AuthSettings {
    /// Whether requests are checked against a client entry.
    pub fn enforced(&self) -> bool {
        !self.clients.is_empty()
    }
}

fn name_ok(s: &str) -> bool {
    s.len() <= MAX_AUTH_NAME_BYTES && !s.chars().any(char::is_control)
}

/// Checks `[auth]`. `mutual_tls` says whether clients present certificates:
/// without them there is no identity to map, so a client list is an error.
pub fn validate(section: &AuthSection, mutual_tls: bool) -> Result<AuthSettings, ConfigError> {
    let entries = section.clients.as_deref().unwrap_or_default();
    if entries.len() > MAX_AUTH_CLIENTS {
        return Err(ConfigError::new(
            "auth.clients",
            format!("{} entries; at most {MAX_AUTH_CLIENTS}", entries.len()),
        ));
    }
    if !entries.is_empty() && !mutual_tls {
        return Err(ConfigError::new(
            "auth.clients",
            "needs mutual TLS (server.tls.client_ca): the identities are client certificate names",
        ));
    }
    let mut clients: Vec<AuthClient> = Vec::with_capacity(entries.len());
    let mut seen = std::collections::HashSet::new();
    for (i, e) in entries.iter().enumerate() {
        let key = format!("auth.clients[{i}]");
        if e.identity.trim().is_empty() || e.identity.trim() != e.identity || !name_ok(&e.identity) {
            return Err(ConfigError::new(
                format!("{key}.identity"),
                format!(
                    "a certificate URI or DNS name of 1-{MAX_AUTH_NAME_BYTES} bytes, no spaces around it"
                ),
            ));
        }
        if !seen.insert(e.identity.as_str()) {
            return Err(ConfigError::new(
                format!("{key}.identity"),
                "named twice: one entry per identity",
            ));
        }
        for (field, list) in [("subject_prefixes", &e.subject_prefixes), ("scopes", &e.scopes)] {
            if list.len() > MAX_AUTH_PATTERNS {
                return Err(ConfigError::new(
                    format!("{key}.{field}"),
                    format!("{} entries; at most {MAX_AUTH_PATTERNS}", list.len()),
                ));
            }
            for (j, p) in list.iter().enumerate() {
                if !name_ok(p) {
                    return Err(ConfigError::new(
                        format!("{key}.{field}[{j}]"),
                        format!("at most {MAX_AUTH_NAME_BYTES} bytes, no control characters"),
                    ));
                }
            }
        }
        for (j, p) in e.scopes.iter().enumerate() {
            let bare = p.strip_suffix('*').unwrap_or(p);
            if (p.is_empty()) || bare.contains('*') {
                return Err(ConfigError::new(
                    format!("{key}.scopes[{j}]"),
                    "a scope name, or a prefix followed by one `*` (`*` alone allows every scope)",
                ));
            }
        }
        clients.push(AuthClient {
            identity: e.identity.clone(),
            subject_prefixes: e.subject_prefixes.clone(),
            scopes: e.scopes.clone(),
            report_usage: e.report_usage,
        });
    }
    Ok(AuthSettings { clients })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(identity: &str, scopes: &[&str]) -> AuthClientEntry {
        AuthClientEntry {
            identity: identity.to_owned(),
            subject_prefixes: vec!["shop/".to_owned()],
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            report_usage: false,
        }
    }

    fn section(entries: Vec<AuthClientEntry>) -> AuthSection {
        AuthSection {
            clients: Some(entries),
        }
    }

    #[test]
    fn absent_or_empty_is_not_enforced_even_without_mutual_tls() {
        assert!(!validate(&AuthSection::default(), false).unwrap().enforced());
        assert!(!validate(&section(vec![]), false).unwrap().enforced());
    }

    #[test]
    fn clients_need_mutual_tls() {
        let s = section(vec![entry("spiffe://a", &["read"])]);
        assert_eq!(validate(&s, false).unwrap_err().key, "auth.clients");
        assert!(validate(&s, true).unwrap().enforced());
    }

    #[test]
    fn bad_entries_are_named() {
        let cases = [
            (section(vec![entry("", &[])]), "auth.clients[0].identity"),
            (
                section(vec![entry(" spiffe://a", &[])]),
                "auth.clients[0].identity",
            ),
            (
                section(vec![entry("spiffe://a", &[]), entry("spiffe://a", &[])]),
                "auth.clients[1].identity",
            ),
            (
                section(vec![entry("spiffe://a", &["ok", ""])]),
                "auth.clients[0].scopes[1]",
            ),
            (
                section(vec![entry("spiffe://a", &["a*b"])]),
                "auth.clients[0].scopes[0]",
            ),
            (
                section(vec![entry("spiffe://a", &["**"])]),
                "auth.clients[0].scopes[0]",
            ),
            (
                section(vec![entry("spiffe://a", &["x\u{7}"])]),
                "auth.clients[0].scopes[0]",
            ),
        ];
        for (s, key) in cases {
            assert_eq!(validate(&s, true).unwrap_err().key, key);
        }
    }

    #[test]
    fn patterns_with_one_trailing_star_are_accepted() {
        let s = section(vec![entry("dns.example", &["*", "shop:*", "billing:read"])]);
        let v = validate(&s, true).unwrap();
        assert_eq!(v.clients[0].scopes, ["*", "shop:*", "billing:read"]);
    }
}
