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
