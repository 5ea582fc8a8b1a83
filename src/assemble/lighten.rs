//! Lightening a conversation that does not fit, before any turn is
//! summarized or dropped: old tool results are *cleared* (a short, stable
//! placeholder, or the item's compact form, in place of the content; the
//! call and the result's `tool_call_id` stay, so every pair stays valid for
//! every provider) and the thinking of a closed tool cycle is dropped, all
//! of a turn's thinking at once.
//!
//! What may be lightened is decided here, per turn, from the request alone
//! (no counting): a tool result unless the policy keeps results, names its
//! tool in `exclude_tools`, or it is among the newest
//! `keep_recent_tool_results` results; an assistant turn's thinking unless
//! its cycle is open (no user turn after it). How much is lightened is the
//! allocator's (see [`super::allocate`]): oldest first, up to an anchor of
//! the conversation, so that a session's next requests lighten the same
//! turns the same way until the conversation outgrows its room again.

use super::measure::{Clear, Measurement, MemberLight};
use super::policy::Policy;
use crate::prompt::{Item, Thinking};
use crate::vocab::Role;

/// What lightening may do to each turn of the conversation: `out[b][c]` for
/// candidate `c` of block `b` (empty for blocks that hold no turns).
/// `chrono` lists the turn blocks oldest first.
pub(super) fn members(m: Measurement<'_>, chrono: &[usize], policy: &Policy) -> Vec<Vec<MemberLight>> {
    let mut out: Vec<Vec<MemberLight>> = m
        .blocks
        .iter()
        .enumerate()
        .map(|(b, mb)| {
            if chrono.contains(&b) {
                vec![MemberLight::default(); mb.candidates.len()]
            } else {
                Vec::new()
            }
        })
        .collect();
    let turns: Vec<(usize, usize)> = chrono
        .iter()
        .flat_map(|&b| (0..m.blocks[b].candidates.len()).map(move |c| (b, c)))
        .collect();
    let mut recent_left = policy.keep_recent_tool_results;
    let mut open = true;
    for &(b, c) in turns.iter().rev() {
        let item = m.item(b, c);
        let light = &mut out[b][c];
        match item.role {
            Some(Role::Tool) => {
                light.recent = recent_left > 0;
                recent_left = recent_left.saturating_sub(1);
                if policy.clear_tool_results && !policy.exclude_tools.contains(&item.tool_name) {
                    light.clear = Some(if item.compact_form.as_deref().is_some_and(|c| !c.is_empty()) {
                        Clear::Compact
                    } else {
                        Clear::Placeholder
                    });
                }
            }
            Some(Role::User) => open = false,
            _ => {}
        }
        light.thinking = policy.drop_closed_thinking && !item.thinking.is_empty();
        light.open_cycle = open;
    }
    out
}

/// The text that takes a cleared result's place: what it was (its item
/// id) and what clearing it saved (`tokens`, its message's tokens). It
/// depends on nothing else, so it is the same in every request that clears
/// the result.
pub(super) fn placeholder(item: &Item, tokens: u32) -> String {
    format!(
        "[tool result cleared to save context: item {:?}, {tokens} tokens; ask for it again if it is needed]",
        item.id
    )
}

/// The text a lightened tool result carries instead of its content.
pub(super) fn cleared_text(item: &Item, clear: Clear, tokens: u32) -> std::borrow::Cow<'_, str> {
    match clear {
        Clear::Placeholder => placeholder(item, tokens).into(),
        Clear::Compact => item.compact_form.as_deref().unwrap_or_default().into(),
    }
}

/// The thinking text a template or a counter reads: every block that is
/// not redacted, in order, joined by a blank line (`None`: none).
pub(super) fn readable_thinking(thinking: &[Thinking]) -> Option<String> {
    let texts: Vec<&str> = thinking
        .iter()
        .filter(|t| !t.redacted)
        .map(|t| t.text.as_str())
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::measure::Measured;
    use crate::prompt::{AssembleRequest, Block, BlockKind};

    fn turn(id: &str, role: Role) -> Item {
        Item {
            id: id.to_owned(),
            role: Some(role),
            content: format!("content of {id}"),
            ..Item::default()
        }
    }

    fn lights(items: Vec<Item>, policy: &Policy) -> Vec<MemberLight> {
        let req = AssembleRequest {
            blocks: vec![Block::new("t", BlockKind::RecentTurns, items)],
            ..AssembleRequest::default()
        };
        let n = req.blocks[0].items.len();
        let measured = vec![Measured::new((0..n).collect(), Vec::new(), Vec::new(), true)];
        let m = Measurement {
            req: &req,
            blocks: &measured,
        };
        members(m, &[0], policy).remove(0)
    }

    fn thinking() -> Vec<Thinking> {
        vec![Thinking {
            text: "because".to_owned(),
            signature: "sig".to_owned(),
            redacted: false,
        }]
    }

    #[test]
    fn the_newest_results_and_excluded_tools_are_never_cleared() {
        let policy = Policy {
            keep_recent_tool_results: 2,
            exclude_tools: vec!["memory".to_owned()],
            ..Policy::default()
        };
        let mut items = Vec::new();
        for i in 0..4 {
            items.push(Item {
                tool_call_ids: vec![format!("c{i}")],
                thinking: thinking(),
                ..turn(&format!("a{i}"), Role::Assistant)
            });
            items.push(Item {
                tool_call_id: format!("c{i}"),
                tool_name: if i == 0 {
                    "memory".to_owned()
                } else {
                    "grep".to_owned()
                },
                compact_form: (i == 1).then(|| "short".to_owned()),
                ..turn(&format!("r{i}"), Role::Tool)
            });
        }
        let l = lights(items, &policy);
        let cleared: Vec<Option<Clear>> = l.iter().skip(1).step_by(2).map(|x| x.cleared()).collect();
        assert_eq!(cleared, vec![None, Some(Clear::Compact), None, None]);
        // No user turn at all: the whole conversation is one open cycle.
        assert!(l.iter().all(|x| !x.drops_thinking()));
    }

    #[test]
    fn thinking_is_dropped_only_once_a_user_turn_closes_its_cycle() {
        let items = vec![
            turn("u0", Role::User),
            Item {
                tool_call_ids: vec!["c0".to_owned()],
                thinking: thinking(),
                ..turn("a0", Role::Assistant)
            },
            Item {
                tool_call_id: "c0".to_owned(),
                ..turn("r0", Role::Tool)
            },
            turn("u1", Role::User),
            Item {
                tool_call_ids: vec!["c1".to_owned()],
                thinking: thinking(),
                ..turn("a1", Role::Assistant)
            },
            Item {
                tool_call_id: "c1".to_owned(),
                ..turn("r1", Role::Tool)
            },
        ];
        let l = lights(items, &Policy::default());
        assert!(l[1].drops_thinking());
        assert!(!l[4].drops_thinking());
        assert!(l[4].open_cycle && !l[1].open_cycle);
    }

    #[test]
    fn clearing_off_keeps_every_result() {
        let policy = Policy {
            clear_tool_results: false,
            keep_recent_tool_results: 0,
            ..Policy::default()
        };
        let items = vec![
            Item {
                tool_call_ids: vec!["c0".to_owned()],
                ..turn("a0", Role::Assistant)
            },
            Item {
                tool_call_id: "c0".to_owned(),
                ..turn("r0", Role::Tool)
            },
        ];
        assert!(
            lights(items, &policy)
                .iter()
                .all(|x| x.cleared().is_none() && !x.drops_thinking())
        );
    }

    #[test]
    fn the_placeholder_names_the_item_and_its_tokens_only() {
        let item = Item {
            id: "r\"7".to_owned(),
            content: "secret output".to_owned(),
            ..Item::default()
        };
        let p = placeholder(&item, 1234);
        assert!(p.contains("\"r\\\"7\"") && p.contains("1234 tokens"), "{p}");
        assert!(!p.contains("secret"));
        assert_eq!(p, placeholder(&item, 1234));
    }

    #[test]
    fn readable_thinking_skips_redacted_blocks() {
        let mut t = thinking();
        t.push(Thinking {
            text: "opaque".to_owned(),
            signature: String::new(),
            redacted: true,
        });
        t.push(Thinking {
            text: "then".to_owned(),
            ..Thinking::default()
        });
        assert_eq!(readable_thinking(&t).as_deref(), Some("because\n\nthen"));
        assert_eq!(readable_thinking(&t[1..2]), None);
    }
}
