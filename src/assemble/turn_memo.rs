//! The summary of a run of turns as the summary cache remembers it: what
//! the shrinker makes and [`Caches`](super::caches::Caches) keeps, and the
//! summary unit it renders.

use super::render::{self, FormAttr};
use crate::compact::summary::Running;
use crate::prompt::{BlockKind, Item};
use crate::tokens::Weigh;

/// The id of the summary unit of compacted turns.
pub const TURN_SUMMARY_ID: &str = "compacted-turns";
/// The source attribute of the summary unit of compacted turns.
const TURN_SUMMARY_SOURCE: &str = "context-assembler";

/// The summary of a run of turns, remembered under the key of the run: its
/// count, and the running summary a longer run (the session's next request,
/// or the next eviction step) extends. Its unit is rendered from it.
#[derive(Debug)]
pub(super) struct TurnMemo {
    pub run: Running,
    /// Whether every turn covered is vouched for.
    pub trusted: bool,
    pub cost: u32,
}

impl TurnMemo {
    /// The summary unit: `<summary id="compacted-turns">`, compact form.
    pub fn unit(&self) -> String {
        let item = Item {
            id: TURN_SUMMARY_ID.to_owned(),
            source: TURN_SUMMARY_SOURCE.to_owned(),
            trusted: self.trusted,
            ..Item::default()
        };
        render::unit(
            BlockKind::Summary,
            &item,
            &self.run.summary().plain(),
            FormAttr::Compact,
        )
    }
}

impl Weigh for TurnMemo {
    fn heap_bytes(&self) -> usize {
        self.run.weight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compact::conversation::Msg;
    use crate::vocab::{Cancel, Role};

    fn memo(trusted: bool) -> TurnMemo {
        let msgs: Vec<Msg> = (0..6)
            .map(|i| {
                let role = if i % 2 == 0 { Role::User } else { Role::Assistant };
                Msg::text(
                    role,
                    format!("Turn {i}: where is my parcel {i}? It left the depot on Monday."),
                )
            })
            .collect();
        TurnMemo {
            run: Running::default().extended(&msgs, &Cancel::new()).unwrap(),
            trusted,
            cost: 0,
        }
    }

    /// The unit is the summary's text in its wrapper: the turn summary's id,
    /// the sidecar as its source, compact, and untrusted unless every turn
    /// covered was vouched for.
    #[test]
    fn the_unit_wraps_the_summary_as_the_sidecars() {
        let m = memo(true);
        let unit = m.unit();
        let text = m.run.summary().plain();
        assert!(!text.is_empty());
        assert!(
            unit.starts_with(
                "<summary id=\"compacted-turns\" source=\"context-assembler\" form=\"compact\">\n"
            ),
            "{unit}"
        );
        assert!(unit.contains(text.as_str()), "{unit}");
        assert!(memo(false).unit().contains(" trust=\"untrusted\""));
        assert!(!unit.contains("untrusted"));
    }

    /// What the summary cache charges for a memo grows with the summary: a
    /// weight of nothing would let the cache hold any number of them.
    #[test]
    fn a_memo_weighs_at_least_its_summarys_text() {
        let m = memo(true);
        assert!(
            m.heap_bytes() >= m.run.summary().plain().len() / 2,
            "{}",
            m.heap_bytes()
        );
    }
}
