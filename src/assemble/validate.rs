//! Request validation: every bad field is reported at once, by its proto path.

use std::collections::HashSet;
use std::sync::Arc;

use super::error::FieldViolation;
use super::models::{ModelSpec, ModelTable};
use super::request::{AssembleRequest, Role};

/// The input budget and output reserve a valid request resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Input tokens available to the prompt.
    pub input: u32,
    /// Output tokens reserved.
    pub output_reserve: u32,
}

/// What an unknown model name is told.
pub const UNKNOWN_MODEL: &str = "unknown model: not in the model table (see ListModels)";

/// Checks `req` against the model table. Returns the model and budget, or
/// every violation found.
pub fn validate(
    req: &AssembleRequest,
    models: &ModelTable,
) -> Result<(Arc<ModelSpec>, Budget), Vec<FieldViolation>> {
    let mut v = Vec::new();
    let model = models.resolve(&req.model).cloned();
    if req.model.is_empty() {
        v.push(FieldViolation::new("model", "required"));
    } else if model.is_none() {
        v.push(FieldViolation::new("model", UNKNOWN_MODEL));
    }
    if req.query.trim().is_empty() {
        v.push(FieldViolation::new(
            "query",
            "required: must contain non-whitespace text",
        ));
    }

    let mut budget = Budget {
        input: 0,
        output_reserve: 0,
    };
    if let Some(spec) = model.as_deref() {
        let window = spec.context_window;
        let reserve = req.output_reserve.unwrap_or(spec.output_reserve);
        if reserve >= window {
            v.push(FieldViolation::new(
                "output_reserve",
                format!("must be less than the context window ({window})"),
            ));
        }
        let input = match req.max_input_tokens {
            Some(0) => {
                v.push(FieldViolation::new("max_input_tokens", "must be positive"));
                0
            }
            Some(n)
                if req.output_reserve.is_some() && u64::from(n) + u64::from(reserve) > u64::from(window) =>
            {
                v.push(FieldViolation::new(
                    "max_input_tokens",
                    format!("max_input_tokens + output_reserve exceed the context window ({window})"),
                ));
                n
            }
            Some(n) if n > window => {
                v.push(FieldViolation::new(
                    "max_input_tokens",
                    format!("exceeds the context window ({window})"),
                ));
                n
            }
            Some(n) => n,
            None => window.saturating_sub(reserve),
        };
        budget = Budget {
            input,
            output_reserve: reserve,
        };
    }

    let mut names = HashSet::new();
    for (bi, b) in req.blocks.iter().enumerate() {
        let at = |f: &str| format!("blocks[{bi}].{f}");
        if b.name.is_empty() {
            v.push(FieldViolation::new(at("name"), "required"));
        } else if !names.insert(b.name.as_str()) {
            v.push(FieldViolation::new(at("name"), "duplicate block name"));
        }
        if let Some(max) = b.max_tokens() {
            if b.min_tokens > max {
                v.push(FieldViolation::new(at("min_tokens"), "greater than max_tokens"));
            }
            if !b.effective_cuttable() {
                v.push(FieldViolation::new(
                    at("max_tokens"),
                    "applies to cuttable blocks only",
                ));
            }
        }
        let mut ids = HashSet::new();
        for (ii, item) in b.items.iter().enumerate() {
            let at = |f: &str| format!("blocks[{bi}].items[{ii}].{f}");
            if item.id.is_empty() {
                v.push(FieldViolation::new(at("id"), "required"));
            } else if !ids.insert(item.id.as_str()) {
                v.push(FieldViolation::new(at("id"), "duplicate item id in block"));
            }
            if !item.score.is_finite() {
                v.push(FieldViolation::new(at("score"), "must be finite"));
            }
            if !b.kind.is_turns() {
                continue;
            }
            match item.role {
                None => v.push(FieldViolation::new(at("role"), "required for conversation turns")),
                Some(Role::Tool) if item.tool_call_id.is_empty() => {
                    v.push(FieldViolation::new(
                        at("tool_call_id"),
                        "required for a tool result",
                    ));
                }
                _ => {}
            }
            if !item.tool_call_ids.is_empty() && item.role != Some(Role::Assistant) {
                v.push(FieldViolation::new(
                    at("tool_call_ids"),
                    "only assistant turns make tool calls",
                ));
            }
            if !item.tool_call_id.is_empty() && item.role != Some(Role::Tool) {
                v.push(FieldViolation::new(
                    at("tool_call_id"),
                    "only tool results answer a call",
                ));
            }
        }
    }
    match model {
        Some(spec) if v.is_empty() => Ok((spec, budget)),
        _ => Err(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::request::{Block, BlockKind, Item};

    fn req(model: &str) -> AssembleRequest {
        AssembleRequest {
            model: model.to_owned(),
            query: "q".to_owned(),
            ..AssembleRequest::default()
        }
    }

    fn fields(r: &AssembleRequest) -> Vec<String> {
        validate(r, &ModelTable::default())
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.field)
            .collect()
    }

    #[test]
    fn budget_defaults_to_window_minus_reserve() {
        let (spec, b) = validate(&req("gpt-4o"), &ModelTable::default()).unwrap();
        assert_eq!(spec.name, "gpt-4o");
        assert_eq!(
            b,
            Budget {
                input: 128_000 - 16_384,
                output_reserve: 16_384
            }
        );
        let mut r = req("gpt-4o");
        r.max_input_tokens = Some(1000);
        assert_eq!(validate(&r, &ModelTable::default()).unwrap().1.input, 1000);
    }

    #[test]
    fn budget_overrides_must_fit_the_window() {
        let mut r = req("gpt-4");
        r.output_reserve = Some(8_192);
        assert_eq!(fields(&r), vec!["output_reserve"]);
        let mut r = req("gpt-4");
        r.max_input_tokens = Some(0);
        assert_eq!(fields(&r), vec!["max_input_tokens"]);
        let mut r = req("gpt-4");
        r.max_input_tokens = Some(9_000);
        assert_eq!(fields(&r), vec!["max_input_tokens"]);
        let mut r = req("gpt-4");
        r.max_input_tokens = Some(8_000);
        r.output_reserve = Some(1_000);
        assert_eq!(fields(&r), vec!["max_input_tokens"]);
    }

    #[test]
    fn turns_need_consistent_roles_and_tool_fields() {
        let mut r = req("gpt-4o");
        let turn = |role, call: &str, calls: &[&str]| Item {
            id: format!("{role:?}{call}{}", calls.len()),
            role,
            tool_call_id: call.to_owned(),
            tool_call_ids: calls.iter().map(|c| (*c).to_owned()).collect(),
            ..Item::default()
        };
        r.blocks.push(Block {
            name: "t".to_owned(),
            kind: BlockKind::RecentTurns,
            priority: 0,
            cuttable: None,
            min_tokens: 0,
            max_tokens: 0,
            items: vec![
                turn(None, "", &[]),
                turn(Some(Role::Tool), "", &[]),
                turn(Some(Role::User), "", &["c"]),
                turn(Some(Role::Assistant), "x", &[]),
            ],
        });
        assert_eq!(
            fields(&r),
            vec![
                "blocks[0].items[0].role",
                "blocks[0].items[1].tool_call_id",
                "blocks[0].items[2].tool_call_ids",
                "blocks[0].items[3].tool_call_id",
            ]
        );
    }

    #[test]
    fn items_need_unique_ids_and_finite_scores() {
        let mut r = req("gpt-4o");
        let it = |id: &str, score| Item {
            id: id.to_owned(),
            score,
            ..Item::default()
        };
        r.blocks.push(Block {
            name: "e".to_owned(),
            kind: BlockKind::Evidence,
            priority: 0,
            cuttable: Some(false),
            min_tokens: 0,
            max_tokens: 10,
            items: vec![it("a", 1.0), it("a", 1.0), it("", 1.0), it("b", f64::NAN)],
        });
        assert_eq!(
            fields(&r),
            vec![
                "blocks[0].max_tokens",
                "blocks[0].items[1].id",
                "blocks[0].items[2].id",
                "blocks[0].items[3].score",
            ]
        );
    }
}
