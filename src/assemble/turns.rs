//! Turn grouping: an assistant turn that calls tools and the tool results that
//! answer it form one unit, kept or dropped together, so a trim never leaves a
//! result without its call or a call without its results.
//!
//! The pairing rule differs from Compact's ([`crate::compact::cut`]) on
//! purpose. Assemble *sends* what it keeps: its output goes to a provider
//! as it is, and chat APIs require a call's results directly after it, so a
//! pair that is not adjacent cannot be kept and is dropped with a warning.
//! Compact *rewrites* a conversation the caller keeps: it must not lose or
//! reorder anything it does not summarize, so it only refuses to cut between a
//! call and a result that answers it anywhere later, and warns about pairs
//! already broken in its input.

use std::collections::HashSet;

use super::allocate::DropReason;
use crate::prompt::Item;
use crate::vocab::Role;

/// One unit of a conversation: indexes into the candidate list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnUnit {
    /// Candidate positions, in order.
    pub members: Vec<usize>,
    /// Set when the unit can never be sent (broken pairing).
    pub invalid: Option<DropReason>,
}

/// Groups `turns` (in chronological order) into units. A tool result must
/// directly follow the assistant turn that made its call (as chat APIs
/// require); one that does not is an orphan, and an assistant turn missing any
/// of its results is incomplete. Neither can be kept.
pub fn group(turns: &[&Item]) -> Vec<TurnUnit> {
    let mut units = Vec::new();
    let mut i = 0;
    while i < turns.len() {
        let turn = turns[i];
        let is_call = turn.role == Some(Role::Assistant) && !turn.tool_call_ids.is_empty();
        if turn.role == Some(Role::Tool) {
            units.push(TurnUnit {
                members: vec![i],
                invalid: Some(DropReason::OrphanToolResult),
            });
            i += 1;
        } else if is_call {
            // A set: results may answer the calls in any order, and a list
            // searched per result made a turn of many calls quadratic.
            let mut pending: HashSet<&str> = turn.tool_call_ids.iter().map(String::as_str).collect();
            let mut members = vec![i];
            i += 1;
            while i < turns.len() && turns[i].role == Some(Role::Tool) {
                if !pending.remove(turns[i].tool_call_id.as_str()) {
                    break;
                }
                members.push(i);
                i += 1;
            }
            let invalid = (!pending.is_empty()).then_some(DropReason::IncompleteToolCall);
            units.push(TurnUnit { members, invalid });
        } else {
            units.push(TurnUnit {
                members: vec![i],
                invalid: None,
            });
            i += 1;
        }
    }
    units
}

/// Joins each unit that opens with an assistant turn to the unit before
/// it, so every unit but a conversation's first starts with a user turn:
/// for a template that refuses a conversation opening with an assistant
/// turn, a cut then never keeps a reply without the turn it answers. Units
/// that can never be sent are left alone (and stop a join across them).
pub fn exchanges(units: Vec<TurnUnit>, turns: &[&Item]) -> Vec<TurnUnit> {
    let mut out: Vec<TurnUnit> = Vec::with_capacity(units.len());
    for unit in units {
        let opens_with_reply = unit
            .members
            .first()
            .is_some_and(|&i| turns[i].role == Some(Role::Assistant));
        match out.last_mut() {
            Some(prev) if opens_with_reply && unit.invalid.is_none() && prev.invalid.is_none() => {
                prev.members.extend(unit.members);
            }
            _ => out.push(unit),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(role: Role, calls: &[&str], answers: &str) -> Item {
        Item {
            id: format!("{role:?}-{answers}"),
            role: Some(role),
            tool_call_ids: calls.iter().map(|s| (*s).to_owned()).collect(),
            tool_call_id: answers.to_owned(),
            ..Item::default()
        }
    }

    #[test]
    fn a_call_and_its_results_are_one_unit() {
        let t = [
            turn(Role::User, &[], ""),
            turn(Role::Assistant, &["a", "b"], ""),
            turn(Role::Tool, &[], "b"),
            turn(Role::Tool, &[], "a"),
            turn(Role::Assistant, &[], ""),
        ];
        let refs: Vec<&Item> = t.iter().collect();
        let units = group(&refs);
        assert_eq!(units.len(), 3);
        assert_eq!(units[1].members, vec![1, 2, 3]);
        assert!(units.iter().all(|u| u.invalid.is_none()));
    }

    #[test]
    fn exchanges_keep_replies_with_what_they_answer() {
        let t = [
            turn(Role::Assistant, &[], ""),
            turn(Role::User, &[], ""),
            turn(Role::Assistant, &["a"], ""),
            turn(Role::Tool, &[], "a"),
            turn(Role::Assistant, &[], ""),
            turn(Role::User, &[], ""),
            turn(Role::Tool, &[], "x"),
            turn(Role::Assistant, &[], ""),
        ];
        let refs: Vec<&Item> = t.iter().collect();
        let units = exchanges(group(&refs), &refs);
        let members: Vec<Vec<usize>> = units.iter().map(|u| u.members.clone()).collect();
        assert_eq!(
            members,
            vec![vec![0], vec![1, 2, 3, 4], vec![5], vec![6], vec![7]]
        );
        assert_eq!(units[3].invalid, Some(DropReason::OrphanToolResult));
    }

    #[test]
    fn orphans_and_incomplete_calls_are_marked() {
        let t = [
            turn(Role::Tool, &[], "x"),
            turn(Role::Assistant, &["a", "b"], ""),
            turn(Role::Tool, &[], "a"),
            turn(Role::User, &[], ""),
            turn(Role::Tool, &[], "b"),
        ];
        let refs: Vec<&Item> = t.iter().collect();
        let units = group(&refs);
        let invalid: Vec<_> = units.iter().map(|u| u.invalid).collect();
        assert_eq!(
            invalid,
            vec![
                Some(DropReason::OrphanToolResult),
                Some(DropReason::IncompleteToolCall),
                None,
                Some(DropReason::OrphanToolResult),
            ]
        );
        assert_eq!(units[1].members, vec![1, 2]);
    }
}
