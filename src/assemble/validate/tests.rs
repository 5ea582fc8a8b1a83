use super::*;
use crate::prompt::request::{Block, BlockKind, Item};

fn req(model: &str) -> AssembleRequest {
    AssembleRequest {
        model: model.to_owned(),
        query: "q".to_owned(),
        ..AssembleRequest::default()
    }
}

fn catalog() -> Catalog {
    crate::config::default_catalog()
}

fn fields(r: &AssembleRequest) -> Vec<String> {
    validate(r, &catalog())
        .err()
        .unwrap_or_default()
        .into_iter()
        .map(|v| v.field)
        .collect()
}

#[test]
fn budget_defaults_to_window_minus_reserve() {
    let Resolved { spec, budget: b, .. } = validate(&req("gpt-4o"), &catalog()).unwrap();
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
    assert_eq!(validate(&r, &catalog()).unwrap().budget.input, 1000);
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
fn a_tool_call_id_is_made_once_in_the_whole_conversation() {
    let mut r = req("gpt-4o");
    let turns = |name: &str, items: Vec<Item>| Block {
        name: name.to_owned(),
        kind: BlockKind::RecentTurns,
        priority: 0,
        cuttable: None,
        min_tokens: 0,
        max_tokens: 0,
        items,
    };
    let call = |id: &str, calls: &[&str]| Item {
        id: id.to_owned(),
        role: Some(Role::Assistant),
        tool_call_ids: calls.iter().map(|c| (*c).to_owned()).collect(),
        ..Item::default()
    };
    // Twice in one turn, and again in a later block.
    r.blocks.push(turns(
        "history",
        vec![call("a", &["c4", "c4"]), call("b", &["c5"])],
    ));
    r.blocks.push(turns("recent", vec![call("c", &["c5", "c6"])]));
    assert_eq!(
        fields(&r),
        vec![
            "blocks[0].items[0].tool_call_ids[1]",
            "blocks[1].items[0].tool_call_ids[0]"
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

#[test]
fn policies_resolve_by_name() {
    let mut r = req("gpt-4o");
    assert!(fields(&r).is_empty());
    r.policy = "memory-first".to_owned();
    let resolved = validate(&r, &catalog()).unwrap();
    assert_eq!(resolved.policy.priority(BlockKind::Memory), 5);
    r.policy = "nope".to_owned();
    assert_eq!(fields(&r), ["policy"]);
}

/// Lists a hostile client sizes are bounded, each named by its field, and at
/// the bound exactly they are accepted.
#[test]
fn scopes_and_tool_calls_are_bounded() {
    let many = |n: usize, prefix: &str| (0..n).map(|i| format!("{prefix}{i}")).collect::<Vec<_>>();
    let build = |extra: usize| {
        let mut r = req("gpt-4o");
        r.principal.scopes = many(MAX_PRINCIPAL_SCOPES + extra, "s");
        r.blocks.push(Block::new(
            "evidence",
            BlockKind::Evidence,
            vec![Item {
                id: "e".to_owned(),
                required_scopes: many(MAX_SCOPES_PER_ITEM + extra, "s"),
                ..Item::default()
            }],
        ));
        r.blocks.push(Block::new(
            "turns",
            BlockKind::RecentTurns,
            vec![Item {
                id: "a".to_owned(),
                role: Some(Role::Assistant),
                // Duplicates past the bound are not reported one by one.
                tool_call_ids: vec!["same".to_owned(); MAX_TOOL_CALL_IDS_PER_MESSAGE + extra],
                ..Item::default()
            }],
        ));
        r
    };
    assert_eq!(
        fields(&build(1)),
        vec![
            "principal.scopes",
            "blocks[0].items[0].required_scopes",
            "blocks[1].items[0].tool_call_ids"
        ]
    );
    // At the bound: only the duplicate ids are wrong.
    let at_bound = fields(&build(0));
    assert_eq!(at_bound.len(), MAX_TOOL_CALL_IDS_PER_MESSAGE - 1);
    assert!(
        at_bound
            .iter()
            .all(|f| f.starts_with("blocks[1].items[0].tool_call_ids["))
    );
}
