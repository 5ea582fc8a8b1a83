//! Who the caller is, and what it may claim. With mutual TLS the client's
//! certificate names it (its URI and DNS subject alternative names); the
//! `[auth]` section maps those names to the subjects it may name and the
//! scopes it may grant a principal. Without `[[auth.clients]]` nothing is
//! checked: the body is believed as sent (the trust boundary is then the
//! network: NetworkPolicy, or mutual TLS alone).
//!
//! Checks cost what the request is long: a subject or scope is matched with
//! one hash lookup (exact scopes) and one ordered-set lookup (prefixes, kept
//! prefix-free so the greatest prefix not above a name is the only one that
//! can start it).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::sync::{Arc, PoisonError, RwLock};

use rustls_pki_types::CertificateDer;

use super::pb;
use crate::config::auth::AuthSettings;
use crate::telemetry::metrics;

/// `ErrorInfo.reason` of a request that claims more than its client may.
pub const REASON_CLAIM_DENIED: &str = "CLAIM_DENIED";

/// Claim label: the certificate matches no entry.
pub const CLAIM_IDENTITY: &str = "identity";
/// Claim label: a subject outside the client's prefixes.
pub const CLAIM_SUBJECT: &str = "subject";
/// Claim label: a principal scope the client may not grant.
pub const CLAIM_SCOPE: &str = "scope";
/// Claim label: ReportUsage from a client not allowed to move margins.
pub const CLAIM_REPORT_USAGE: &str = "report_usage";
/// Every claim label.
pub const CLAIMS: [&str; 4] = [CLAIM_IDENTITY, CLAIM_SUBJECT, CLAIM_SCOPE, CLAIM_REPORT_USAGE];

/// The names of a connection's client certificate, put in each request's
/// extensions by the connection that carried it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientIdentity {
    names: Vec<String>,
}

impl ClientIdentity {
    /// The URI and DNS subject alternative names of a DER certificate (none
    /// when it does not parse: the handshake already verified it).
    pub fn from_certificate(der: &CertificateDer<'_>) -> ClientIdentity {
        let names = match webpki::EndEntityCert::try_from(der) {
            Ok(cert) => cert
                .valid_uri_names()
                .chain(cert.valid_dns_names())
                .map(str::to_owned)
                .collect(),
            Err(_) => Vec::new(),
        };
        ClientIdentity { names }
    }

    /// An identity with these names (tests).
    pub fn with_names(names: impl IntoIterator<Item = String>) -> ClientIdentity {
        ClientIdentity {
            names: names.into_iter().collect(),
        }
    }

    /// The certificate's names.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// A set of prefixes, kept prefix-free: a name starts with one of them iff
/// it starts with the greatest one not above it.
#[derive(Debug, Default)]
struct Prefixes(BTreeSet<String>);

impl Prefixes {
    fn new<'a>(all: impl IntoIterator<Item = &'a str>) -> Prefixes {
        let sorted: BTreeSet<&str> = all.into_iter().collect();
        let mut kept: BTreeSet<String> = BTreeSet::new();
        // In order, a prefix comes before everything it starts: drop a
        // pattern the last kept one already covers.
        let mut last: Option<&str> = None;
        for p in sorted {
            if last.is_some_and(|l| p.starts_with(l)) {
                continue;
            }
            kept.insert(p.to_owned());
            last = Some(p);
        }
        Prefixes(kept)
    }

    fn starts(&self, name: &str) -> bool {
        self.0
            .range::<str, _>((Bound::Unbounded, Bound::Included(name)))
            .next_back()
            .is_some_and(|p| name.starts_with(p.as_str()))
    }
}

/// What one client may claim.
#[derive(Debug)]
pub struct Grant {
    identity: String,
    subjects: Prefixes,
    exact_scopes: HashSet<String>,
    scope_prefixes: Prefixes,
    report_usage: bool,
}

/// A claim the grant does not cover: which, and where in the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The identity label: the entry's identity, or `unlisted`.
    pub identity: String,
    /// One of [`CLAIMS`].
    pub claim: &'static str,
    /// The request field (`principal.scopes[2]`, `requests[4].recall.subject`).
    pub field: String,
}

impl Grant {
    /// Whether `subject` may be named.
    pub fn subject(&self, subject: &str, field: impl FnOnce() -> String) -> Result<(), Denied> {
        if self.subjects.starts(subject) {
            Ok(())
        } else {
            Err(self.denied(CLAIM_SUBJECT, field()))
        }
    }

    /// Whether every scope may be granted; `field` names the list.
    pub fn scopes(&self, scopes: &[String], field: &str) -> Result<(), Denied> {
        for (i, scope) in scopes.iter().enumerate() {
            if !self.exact_scopes.contains(scope) && !self.scope_prefixes.starts(scope) {
                return Err(self.denied(CLAIM_SCOPE, format!("{field}[{i}]")));
            }
        }
        Ok(())
    }

    /// Whether ReportUsage is allowed.
    pub fn report_usage(&self) -> Result<(), Denied> {
        if self.report_usage {
            Ok(())
        } else {
            Err(self.denied(CLAIM_REPORT_USAGE, "report_usage".to_owned()))
        }
    }

    /// The claims of one Assemble request; `at` prefixes its field names.
    pub fn assemble(&self, r: &pb::AssembleRequest, at: &str) -> Result<(), Denied> {
        if let Some(p) = &r.principal {
            self.scopes(&p.scopes, &format!("{at}principal.scopes"))?;
        }
        if let Some(recall) = &r.recall {
            self.subject(&recall.subject, || format!("{at}recall.subject"))?;
        }
        Ok(())
    }

    fn denied(&self, claim: &'static str, field: String) -> Denied {
        Denied {
            identity: self.identity.clone(),
            claim,
            field,
        }
    }
}

/// The compiled `[auth]` section.
#[derive(Debug, Default)]
pub struct Rules {
    grants: Vec<Grant>,
    /// Certificate name to the first entry naming it.
    by_name: HashMap<String, usize>,
}

impl Rules {
    /// Compiles validated settings.
    pub fn new(settings: &AuthSettings) -> Rules {
        let mut by_name = HashMap::new();
        let grants = settings
            .clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                by_name.entry(c.identity.clone()).or_insert(i);
                let mut exact_scopes = HashSet::new();
                let mut prefixes = Vec::new();
                for s in &c.scopes {
                    match s.strip_suffix('*') {
                        Some(prefix) => prefixes.push(prefix),
                        None => {
                            exact_scopes.insert(s.clone());
                        }
                    }
                }
                Grant {
                    identity: c.identity.clone(),
                    subjects: Prefixes::new(c.subject_prefixes.iter().map(String::as_str)),
                    exact_scopes,
                    scope_prefixes: Prefixes::new(prefixes),
                    report_usage: c.report_usage,
                }
            })
            .collect();
        Rules { grants, by_name }
    }

    /// Whether requests are checked.
    pub fn enforced(&self) -> bool {
        !self.grants.is_empty()
    }

    /// The grant of the entry the certificate names: of its names, the one
    /// whose entry comes first in the file. `Ok(None)` when nothing is
    /// enforced.
    pub fn grant(&self, identity: Option<&ClientIdentity>) -> Result<Option<&Grant>, Denied> {
        if !self.enforced() {
            return Ok(None);
        }
        let index = identity
            .into_iter()
            .flat_map(|id| id.names.iter())
            .filter_map(|n| self.by_name.get(n).copied())
            .min();
        match index.and_then(|i| self.grants.get(i)) {
            Some(g) => Ok(Some(g)),
            None => Err(Denied {
                identity: metrics::IDENTITY_UNLISTED.to_owned(),
                claim: CLAIM_IDENTITY,
                field: "client certificate".to_owned(),
            }),
        }
    }

    /// The configured identities (metric labels).
    pub fn identities(&self) -> impl Iterator<Item = &str> {
        self.grants.iter().map(|g| g.identity.as_str())
    }
}

/// The rules in force, swapped on SIGHUP; each request reads one snapshot.
#[derive(Debug, Clone, Default)]
pub struct Authority(Arc<RwLock<Arc<Rules>>>);

impl Authority {
    /// The rules of `settings`.
    pub fn new(settings: &AuthSettings) -> Authority {
        let authority = Authority::default();
        authority.set(settings);
        authority
    }

    /// Puts `settings` in force for requests that start from now on.
    pub fn set(&self, settings: &AuthSettings) {
        let rules = Rules::new(settings);
        metrics::claim_identities_known(rules.identities(), &CLAIMS);
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(rules);
    }

    /// The rules in force now.
    pub fn rules(&self) -> Arc<Rules> {
        self.0.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Checks a request against the rules in force: `check` sees the
    /// caller's grant (it is not called when nothing is enforced).
    pub fn check<T>(
        &self,
        request: &tonic::Request<T>,
        check: impl FnOnce(&Grant, &T) -> Result<(), Denied>,
    ) -> Result<(), Denied> {
        let rules = self.rules();
        let identity = request.extensions().get::<Arc<ClientIdentity>>().map(Arc::as_ref);
        match rules.grant(identity) {
            Ok(None) => Ok(()),
            Ok(Some(grant)) => check(grant, request.get_ref()),
            Err(denied) => Err(denied),
        }
    }
}

#[cfg(test)]
mod tests;
