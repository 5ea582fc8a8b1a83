//! A small structured `AssembleRequest`: a few segments, blocks and items
//! of seam-heavy text, budgets from 0 to a few thousand, every block kind,
//! priorities, floors and ceilings, required scopes against the principal's,
//! conversation turns with tool calls (often paired, sometimes not), tools,
//! policies and models (exact and estimating). Mostly valid, with a few
//! deliberately invalid values so validation is exercised too.

use arbitrary::{Arbitrary, Result, Unstructured};
use context_assembler::prompt::{
    AssembleRequest, Block, BlockKind, Item, Principal, Segment, SegmentKind, Thinking,
};
use context_assembler::vocab::Role;

use crate::one_in;
use crate::text::{SECRET, Text};

/// Models: exact o200k and cl100k entries (by name and by prefix), the
/// estimating entry, and unknown or missing names.
const MODELS: &[&str] = &[
    "gpt-4o",
    "gpt-4o",
    "gpt-4o-mini",
    "gpt-4",
    "gpt-3.5-turbo",
    "o3-mini",
    "claude-3-5-sonnet",
    "no-such-model",
    "",
];

/// Policies of the fuzz catalog (see [`crate::assembler`]) and an unknown one.
const POLICIES: &[&str] = &["", "default", "memory-first", "system-ctx", "drop-turns", "nope"];

const SCOPES: &[&str] = &["user", "admin", "billing"];

/// Tool definitions: equal up to key order and whitespace, an Anthropic one,
/// and some that are not JSON objects.
const TOOLS: &[&str] = &[
    r#"{"type":"function","function":{"name":"lookup","parameters":{"type":"object"}}}"#,
    "{ \"function\": {\"parameters\": {\"type\": \"object\"}, \"name\": \"lookup\"}, \"type\": \"function\" }",
    r#"{"name":"search","description":"Searches the knowledge base.","input_schema":{"type":"object","properties":{"q":{"type":"string"}}}}"#,
    r#"{"n":1e5,"s":"\u00e9\ud83e\udd80","a":[3,2,1]}"#,
    "[]",
    "not json",
];

fn pick<'a, T: Copy>(u: &mut Unstructured<'a>, from: &[T]) -> Result<T> {
    Ok(from[u.choose_index(from.len())?])
}

fn scopes(u: &mut Unstructured<'_>, most: usize) -> Result<Vec<String>> {
    let n = u.int_in_range(0..=most)?;
    (0..n).map(|_| pick(u, SCOPES).map(str::to_owned)).collect()
}

/// A tool call id from a small set, so calls and results often pair up.
fn call_id(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(format!("c{}", u.int_in_range(0..=5)?))
}

fn item(u: &mut Unstructured<'_>, kind: BlockKind, index: usize) -> Result<Item> {
    let id = if one_in(u, 24)? {
        // Empty or duplicate ids (validation errors).
        pick(u, &["", "i0"])?.to_owned()
    } else {
        format!("i{index}")
    };
    let score = if one_in(u, 40)? {
        pick(u, &[f64::NAN, f64::INFINITY, -1.0, 0.0])?
    } else {
        f64::from(u.int_in_range(0..=1000u16)?) / 1000.0
    };
    let mut it = Item {
        id,
        content: Text::arbitrary(u)?.into_string(),
        score,
        source: if one_in(u, 3)? {
            Text::arbitrary(u)?.into_string()
        } else {
            String::new()
        },
        trusted: bool::arbitrary(u)?,
        required_scopes: if one_in(u, 4)? { scopes(u, 2)? } else { Vec::new() },
        role: None,
        tool_call_ids: Vec::new(),
        tool_call_id: String::new(),
        compact_form: if one_in(u, 3)? {
            Some(Text::arbitrary(u)?.into_string())
        } else {
            None
        },
        tool_name: if one_in(u, 4)? {
            pick(u, &["grep", "read_file", "memory", ""])?.to_owned()
        } else {
            String::new()
        },
        thinking: Vec::new(),
    };
    if kind.is_turns() {
        let role = pick(
            u,
            &[
                Role::User,
                Role::User,
                Role::Assistant,
                Role::Assistant,
                Role::Tool,
                Role::System,
            ],
        )?;
        it.role = if one_in(u, 30)? { None } else { Some(role) };
        match role {
            Role::Assistant if one_in(u, 2)? => {
                let n = u.int_in_range(1..=3)?;
                it.tool_call_ids = (0..n).map(|_| call_id(u)).collect::<Result<_>>()?;
            }
            Role::Tool => it.tool_call_id = call_id(u)?,
            _ => {}
        }
        if role == Role::Assistant || one_in(u, 40)? {
            // Thinking, signed or redacted (on another role: a validation
            // error).
            let n = u.int_in_range(0..=2)?;
            for _ in 0..n {
                it.thinking.push(Thinking {
                    text: Text::arbitrary(u)?.into_string(),
                    signature: if bool::arbitrary(u)? { call_id(u)? } else { String::new() },
                    redacted: one_in(u, 5)?,
                });
            }
        }
        if one_in(u, 40)? {
            // A call or an answer on the wrong role (validation errors).
            it.tool_call_id = call_id(u)?;
            it.tool_call_ids.push(call_id(u)?);
        }
    }
    Ok(it)
}

fn block(u: &mut Unstructured<'_>, index: usize) -> Result<Block> {
    let kind = pick(u, &BlockKind::ALL)?;
    let name = if one_in(u, 24)? {
        pick(u, &["", "b0"])?.to_owned()
    } else {
        format!("b{index}")
    };
    let n = u.int_in_range(0..=6)?;
    let items = (0..n).map(|i| item(u, kind, i)).collect::<Result<_>>()?;
    let cuttable = pick(u, &[None, None, Some(true), Some(false)])?;
    let min_tokens = if one_in(u, 3)? {
        u.int_in_range(0..=600)?
    } else {
        0
    };
    let max_tokens = if one_in(u, 4)? && cuttable != Some(false) {
        u.int_in_range(1..=800)?.max(min_tokens)
    } else if one_in(u, 30)? {
        // Under the floor, or on a non-cuttable block (validation errors).
        u.int_in_range(1..=100)?
    } else {
        0
    };
    Ok(Block {
        name,
        kind,
        priority: if one_in(u, 2)? { u.int_in_range(1..=10)? } else { 0 },
        cuttable,
        min_tokens,
        max_tokens,
        items,
    })
}

/// The fuzzed request: a domain `AssembleRequest` whose items the principal
/// may not see carry [`SECRET`] in every text that could be rendered.
#[derive(Debug)]
pub struct AssembleInput(pub AssembleRequest);

impl<'a> Arbitrary<'a> for AssembleInput {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let model = pick(u, MODELS)?.to_owned();
        let max_input_tokens = match u.int_in_range(0..=9)? {
            0 => None,
            1 => Some(0),
            2 => Some(u32::MAX),
            _ => Some(u.int_in_range(1..=4000)?),
        };
        let output_reserve = match u.int_in_range(0..=9)? {
            0 => Some(u.int_in_range(0..=2000)?),
            1 => Some(u32::MAX),
            _ => None,
        };
        let statics = u.int_in_range(0..=3)?;
        let static_segments = (0..statics)
            .map(|i| {
                Ok(Segment {
                    id: format!("s{i}"),
                    kind: pick(
                        u,
                        &[
                            SegmentKind::System,
                            SegmentKind::Policy,
                            SegmentKind::OutputSchema,
                            SegmentKind::Examples,
                        ],
                    )?,
                    content: Text::arbitrary(u)?.into_string(),
                })
            })
            .collect::<Result<_>>()?;
        let n = u.int_in_range(0..=5)?;
        let mut blocks: Vec<Block> = (0..n).map(|i| block(u, i)).collect::<Result<_>>()?;
        let query = if one_in(u, 20)? {
            pick(u, &["", " \n\t "])?.to_owned()
        } else {
            format!("q {}", Text::arbitrary(u)?.0)
        };
        let principal = Principal {
            id: "p".to_owned(),
            scopes: scopes(u, 3)?,
        };
        let tools = (0..u.int_in_range(0..=2)?)
            .map(|_| pick(u, TOOLS).map(str::to_owned))
            .collect::<Result<_>>()?;
        // What the principal may not see is marked, so that a leak shows.
        for (bi, b) in blocks.iter_mut().enumerate() {
            for (ii, it) in b.items.iter_mut().enumerate() {
                if !crate::may_see(&principal, &it.required_scopes) {
                    it.content = format!("{SECRET}{bi}.{ii}{SECRET} {}", it.content);
                    if let Some(c) = &mut it.compact_form {
                        *c = format!("{SECRET}{c}");
                    }
                    for t in &mut it.thinking {
                        t.text = format!("{SECRET}{}", t.text);
                    }
                }
            }
        }
        Ok(AssembleInput(AssembleRequest {
            request_id: "fuzz".to_owned(),
            model,
            max_input_tokens,
            output_reserve,
            static_segments,
            blocks,
            query,
            principal,
            session_id: String::new(),
            policy: pick(u, POLICIES)?.to_owned(),
            tools,
            cache_salt: String::new(),
            prefix_family: String::new(),
            return_token_ids: u.arbitrary()?,
            // Bytes of any kind: an unreadable fingerprint is refused, never a panic.
            previous_fingerprint: if u.arbitrary()? {
                u.arbitrary::<Vec<u8>>()?
            } else {
                Vec::new()
            },
            cache_ttl: pick(u, &["", "5m", "1h", "30m", "7d"])?.to_owned(),
            // The checks expect the query rendered last (the gateway's
            // pinned-turn requests are the gateway target's).
            no_query: false,
        }))
    }
}
