//! The handles a registry keeps of the series every request records, one
//! slot per bounded label value, each registered on first use (see
//! `handles` for the calls that fill and use them).

use std::sync::{OnceLock, PoisonError, RwLock};

use metrics::{Counter, Gauge, Histogram};

use super::RPCS;
use crate::telemetry::names::{GRPC_CODES, PHASES};

/// Label pairs kept per [`Keyed`] family at most: the label values are
/// bounded sets (block kinds and outcomes, the model table's names), so this
/// is never reached in practice; past it the macros are used.
const MAX_KEYED: usize = 256;

/// Handles of one series family by label values, registered on first use.
pub(super) struct Keyed<K, H>(RwLock<Vec<(K, H)>>);

impl<K, H> Default for Keyed<K, H> {
    fn default() -> Self {
        Keyed(RwLock::new(Vec::new()))
    }
}

impl<K, H> Keyed<K, H> {
    /// Calls `f` with the handle whose key `is` matches, registering
    /// `make()` under `key()` the first time.
    pub(super) fn with(
        &self,
        is: impl Fn(&K) -> bool,
        key: impl FnOnce() -> K,
        make: impl FnOnce() -> H,
        f: impl FnOnce(&H),
    ) {
        {
            let seen = self.0.read().unwrap_or_else(PoisonError::into_inner);
            if let Some((_, h)) = seen.iter().find(|(k, _)| is(k)) {
                return f(h);
            }
        }
        let mut seen = self.0.write().unwrap_or_else(PoisonError::into_inner);
        match seen.iter().position(|(k, _)| is(k)) {
            Some(at) => f(&seen[at].1),
            None if seen.len() < MAX_KEYED => {
                seen.push((key(), make()));
                if let Some((_, h)) = seen.last() {
                    f(h);
                }
            }
            None => f(&make()),
        }
    }
}

/// The handles of the series every call records, of one registry.
pub(super) struct Handles {
    /// `requests_total` by rpc ([`RPCS`]) and code ([`GRPC_CODES`]).
    pub(super) requests: [[OnceLock<Counter>; GRPC_CODES.len()]; RPCS.len()],
    /// `request_duration_seconds` by rpc.
    pub(super) durations: [OnceLock<Histogram>; RPCS.len()],
    /// `phase_duration_seconds` by phase ([`PHASES`]).
    pub(super) phases: [OnceLock<Histogram>; PHASES.len()],
    pub(super) in_flight: OnceLock<Gauge>,
    pub(super) upload_held: OnceLock<Gauge>,
    /// `prompt_tokens` by region: static, dynamic.
    pub(super) prompt_tokens: [OnceLock<Histogram>; 2],
    /// The prefix and segment cache lookups by result: hit, miss.
    pub(super) lookups: [[OnceLock<Counter>; 2]; 2],
    pub(super) items_filtered: OnceLock<Counter>,
    /// `blocks_total` by kind and outcome.
    pub(super) blocks: Keyed<[&'static str; 2], Counter>,
    /// `items_dropped_total` by kind.
    pub(super) dropped: Keyed<&'static str, Counter>,
    /// `prompt_tokens_by_source_total` by model and source.
    pub(super) by_source: Keyed<(Box<str>, &'static str), Counter>,
}

impl Default for Handles {
    fn default() -> Self {
        Handles {
            requests: [const { [const { OnceLock::new() }; GRPC_CODES.len()] }; RPCS.len()],
            durations: [const { OnceLock::new() }; RPCS.len()],
            phases: [const { OnceLock::new() }; PHASES.len()],
            in_flight: OnceLock::new(),
            upload_held: OnceLock::new(),
            prompt_tokens: [const { OnceLock::new() }; 2],
            lookups: [const { [const { OnceLock::new() }; 2] }; 2],
            items_filtered: OnceLock::new(),
            blocks: Keyed::default(),
            dropped: Keyed::default(),
            by_source: Keyed::default(),
        }
    }
}
