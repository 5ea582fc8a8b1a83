//! Prefix families: named kinds of prompts (a bounded set from configuration)
//! whose static prefix should stay byte-identical. The sidecar remembers the
//! prefix hashes each family used within a window and counts every new one:
//! a deploy gives one per family and pod, a prompt with a timestamp or a
//! request id gives one per request (and defeats provider caches).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::telemetry::metrics;

/// How long a prefix hash is remembered for its family.
pub const WINDOW: Duration = Duration::from_secs(600);
/// Hashes remembered per family (the oldest is forgotten first).
const PER_FAMILY: usize = 256;
/// The label of a family name that is not configured.
pub const OTHER: &str = "other";

/// A remembered prefix hash (its first 128 bits) and when it was last used.
type Seen = ([u8; 16], Instant);

/// Recent prefix hashes per family label.
#[derive(Debug, Default)]
pub struct FamilyTracker {
    recent: Mutex<HashMap<String, Vec<Seen>>>,
}

impl FamilyTracker {
    /// Records that a request of `family` (a configured name or [`OTHER`])
    /// used the prefix `digest`; counts it when the family has not used it
    /// within [`WINDOW`]. Returns whether it was new.
    pub fn observe(&self, family: &str, digest: &[u8; 32], now: Instant) -> bool {
        let mut short = [0u8; 16];
        short.copy_from_slice(&digest[..16]);
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let seen = recent.entry(family.to_owned()).or_default();
        seen.retain(|(_, at)| now.duration_since(*at) < WINDOW);
        let new = match seen.iter_mut().find(|(h, _)| *h == short) {
            Some(entry) => {
                entry.1 = now;
                false
            }
            None => {
                if seen.len() >= PER_FAMILY {
                    seen.remove(0);
                }
                seen.push((short, now));
                true
            }
        };
        drop(recent);
        if new {
            metrics::prefix_hash_change(family.to_owned());
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_hashes_count_until_the_window_forgets_them() {
        let t = FamilyTracker::default();
        let start = Instant::now();
        assert!(t.observe("support", &[1; 32], start));
        assert!(!t.observe("support", &[1; 32], start + Duration::from_secs(1)));
        assert!(t.observe("search", &[1; 32], start), "per family");
        assert!(t.observe("support", &[2; 32], start + Duration::from_secs(2)));
        // Seen at +1 s: remembered until +1 s + WINDOW.
        assert!(!t.observe("support", &[1; 32], start + WINDOW));
        assert!(t.observe("support", &[1; 32], start + WINDOW * 3));
    }

    #[test]
    fn memory_per_family_is_bounded() {
        let t = FamilyTracker::default();
        let now = Instant::now();
        for i in 0..1000u32 {
            let mut d = [0u8; 32];
            d[..4].copy_from_slice(&i.to_le_bytes());
            assert!(t.observe("volatile", &d, now));
        }
        let recent = t.recent.lock().unwrap();
        assert_eq!(recent["volatile"].len(), PER_FAMILY);
    }
}
