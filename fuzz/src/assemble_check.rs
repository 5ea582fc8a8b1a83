//! What every Assemble answer must hold, checked from the request and the
//! answer alone (token counts are recounted from scratch with the library's
//! own tokenizer under the chat formula).

use std::collections::HashSet;

use context_assembler::assemble::render::{self, FormAttr};
use context_assembler::assemble::{AssembleError, Assembler, Policy};
use context_assembler::grpc::pb;
use context_assembler::prompt::{AssembleRequest, Assembly, Message};
use context_assembler::tokens::chat::{MESSAGE_OVERHEAD_TOKENS, REPLY_PRIMING_TOKENS};
use context_assembler::tokens::{ModelSpec, Tokenizer};
use context_assembler::vocab::Role;
use prost::Message as _;

use crate::paths;
use crate::text::SECRET;

/// Tokens of one message under the chat formula.
pub fn message_tokens(tok: &Tokenizer, role: Role, content: &str) -> u32 {
    MESSAGE_OVERHEAD_TOKENS + tok.role_tokens(role) + tok.count(content)
}

/// The chat formula over `messages`, from scratch (no cache).
pub fn recount(tok: &Tokenizer, messages: &[Message]) -> u64 {
    u64::from(REPLY_PRIMING_TOKENS)
        + messages
            .iter()
            .map(|m| u64::from(message_tokens(tok, m.role, &m.content)))
            .sum::<u64>()
}

/// The input budget a valid request resolves to.
fn expected_budget(req: &AssembleRequest, spec: &ModelSpec) -> u32 {
    let reserve = req.output_reserve.unwrap_or(spec.output_reserve);
    req.max_input_tokens
        .unwrap_or_else(|| spec.context_window.saturating_sub(reserve))
}

/// Tokens of what every prompt of `req` holds whatever the budget: static
/// messages, the query message, reply priming and the tools.
fn always_present(req: &AssembleRequest, tok: &Tokenizer) -> u64 {
    let statics: u64 = req
        .static_segments
        .iter()
        .map(|s| u64::from(message_tokens(tok, Role::System, &s.content)))
        .sum();
    // What the provider bills for the tools: OpenAI's function formula where
    // every definition is a function it can price, else their JSON texts.
    let canonical = context_assembler::prompt_cache::tools::canonicalize(&req.tools).unwrap_or_default();
    let tools = u64::from(tok.tools_tokens(&canonical).0);
    statics + u64::from(message_tokens(tok, Role::User, &req.query)) + u64::from(REPLY_PRIMING_TOKENS) + tools
}

/// Assembles `req` and checks the answer; on a budget overflow, checks that
/// the reported non-cuttable count is the least budget that works.
pub fn assemble_and_check(asm: &Assembler, req: &AssembleRequest) {
    let catalog = asm.catalog();
    let result = asm.assemble(req.clone());
    crate::note(|| match &result {
        Ok(a) => format!(
            "assembled {} messages, {}+{} of {} tokens",
            a.messages.len(),
            a.usage.total_tokens,
            a.usage.tools_tokens,
            a.usage.budget
        ),
        Err(e) => format!("refused: {e}"),
    });
    match &result {
        Ok(a) => {
            let spec = catalog
                .models
                .resolve(&req.model)
                .unwrap_or_else(|| panic!("assembled with unknown model {:?}", req.model));
            let policy = catalog
                .policy(&req.policy)
                .unwrap_or_else(|| panic!("assembled with unknown policy {:?}", req.policy));
            check_assembly(req, spec, policy, a);
            // Deterministic: a second (warm) run answers the same.
            let again = asm.assemble(req.clone());
            let Ok(b) = &again else {
                panic!("warm run failed where cold succeeded: {again:?}");
            };
            assert_eq!(a.messages, b.messages, "warm messages differ");
            assert_eq!(a.decisions, b.decisions, "warm decisions differ");
            assert_eq!(a.usage, b.usage, "warm usage differs");
            // (`prefix_cache_hit` is not asserted: once the shared caches
            // are full, eviction may take a new prefix before the second run.)
            // The wire form of the answer survives encoding.
            let wire = pb::AssembleResponse::from(a.clone());
            let bytes = wire.encode_to_vec();
            let back = pb::AssembleResponse::decode(bytes.as_slice()).expect("own encoding decodes");
            assert_eq!(back, wire, "AssembleResponse does not survive the wire");
        }
        Err(e @ AssembleError::InvalidArgument(_)) => {
            for v in paths::violations(e) {
                paths::check_assemble_path(&v.field, req);
            }
            let again = context_assembler::assemble::validate::validate(req, &catalog);
            assert!(again.is_err(), "assemble refused a request that validates");
        }
        Err(AssembleError::BudgetOverflow {
            non_cuttable_tokens,
            budget,
            model,
            needs,
        }) => {
            // The breakdown names every part, and the parts add up.
            assert_eq!(needs.total(), *non_cuttable_tokens, "the overflow's parts do not add up");
            for b in &needs.blocks {
                let block = req.blocks.get(b.index).expect("an overflow names a block of the request");
                assert_eq!((b.name.as_str(), b.kind), (block.name.as_str(), block.kind));
                assert!(b.tokens > 0, "an overflow names a block that needs nothing");
            }
            let spec = catalog
                .models
                .resolve(&req.model)
                .expect("overflow of a known model");
            assert_eq!(*model, spec.name, "overflow names another model");
            assert_eq!(
                *budget,
                expected_budget(req, spec),
                "overflow reports another budget"
            );
            assert!(
                *non_cuttable_tokens > u64::from(*budget),
                "overflow of {non_cuttable_tokens} tokens within the budget {budget}"
            );
            assert!(
                *non_cuttable_tokens >= always_present(req, &spec.tokenizer),
                "non-cuttable count {non_cuttable_tokens} below the static prefix, query and tools"
            );
            least_budget_works(asm, req, spec, *non_cuttable_tokens);
        }
        Err(AssembleError::Cancelled) => panic!("cancelled without a cancel"),
        // The fuzzed catalog's models count by OpenAI's formula: no template
        // runs, so none can refuse.
        Err(AssembleError::TemplateRefused { .. }) => panic!("a template refused a model without one"),
    }
}

/// With the budget set to the reported non-cuttable count, the same request
/// must assemble (when such a budget is itself valid).
fn least_budget_works(asm: &Assembler, req: &AssembleRequest, spec: &ModelSpec, non_cuttable: u64) {
    let catalog = asm.catalog();
    let Some(policy) = catalog.policy(&req.policy) else {
        panic!("overflow with unknown policy {:?}", req.policy);
    };
    let Ok(n) = u32::try_from(non_cuttable) else {
        return;
    };
    let window = u64::from(spec.context_window);
    let fits = match req.output_reserve {
        Some(r) => u64::from(n) + u64::from(r) <= window,
        None => u64::from(n) <= window,
    };
    if !fits {
        return;
    }
    let retry = AssembleRequest {
        max_input_tokens: Some(n),
        ..req.clone()
    };
    match asm.assemble(retry.clone()) {
        Ok(a) => check_assembly(&retry, spec, policy, &a),
        Err(e) => panic!("a budget of the reported non-cuttable {n} tokens still fails: {e:?}"),
    }
}

/// Checks one successful answer against its request.
pub fn check_assembly(req: &AssembleRequest, spec: &ModelSpec, policy: &Policy, a: &Assembly) {
    let tok = &spec.tokenizer;
    let u = &a.usage;
    assert_eq!(a.model, spec.name);
    assert_eq!(u.budget, expected_budget(req, spec), "budget");
    assert!(
        u64::from(u.total_tokens) + u64::from(u.tools_tokens) <= u64::from(u.budget),
        "over budget: {} + {} tools > {}",
        u.total_tokens,
        u.tools_tokens,
        u.budget
    );
    assert_eq!(u.exact, tok.is_exact());

    // Exact accounting: a from-scratch recount equals usage. An estimating
    // tokenizer rounds each part up, so its recount of whole messages can
    // only be lower.
    let total = recount(tok, &a.messages);
    if tok.is_exact() {
        assert_eq!(total, u64::from(u.total_tokens), "usage is not the recount");
    } else {
        assert!(total <= u64::from(u.total_tokens), "estimate below its recount");
    }
    let n_static = req.static_segments.len();
    assert!(a.messages.len() > n_static, "no query message");
    let statics = &a.messages[..n_static];
    let static_tokens = recount(tok, statics) - u64::from(REPLY_PRIMING_TOKENS);
    assert_eq!(static_tokens, u64::from(u.static_tokens), "static tokens");
    assert_eq!(
        Some(u.dynamic_tokens),
        u.total_tokens.checked_sub(u.static_tokens),
        "dynamic tokens are not total - static"
    );
    assert_eq!(a.cache.prefix_tokens, u.static_tokens);
    assert_eq!(a.cache.prefix_message_count as usize, n_static);
    assert!(u64::from(u.total_tokens) + u64::from(u.tools_tokens) >= always_present(req, tok));

    // Tools: canonical, in order, counted as the provider bills them.
    assert_eq!(a.tools.len(), req.tools.len());
    let (tools, exact) = tok.tools_tokens(&a.tools);
    assert_eq!(tools, u.tools_tokens, "tools tokens");
    assert_eq!(exact, u.tools_exact, "tools exactness");

    // The static prefix first and verbatim; the query last.
    for (m, s) in statics.iter().zip(&req.static_segments) {
        assert_eq!(m.role, Role::System);
        assert_eq!(m.content, s.content, "static segment {} not verbatim", s.id);
    }
    let last = a.messages.last().expect("at least the query");
    assert_eq!(last.role, Role::User, "last message is not the user's");
    assert_eq!(last.content, req.query, "query is not the last message");

    // Nothing the principal may not see is rendered (when only such items
    // carry the marker, as the structured inputs make them).
    if !visible_texts(req).any(|t| t.contains(SECRET)) {
        for m in &a.messages {
            assert!(
                !m.content.contains(SECRET),
                "filtered content rendered: {:?}",
                m.content
            );
            assert!(
                !m.thinking.iter().any(|t| t.text.contains(SECRET)),
                "filtered thinking returned"
            );
        }
    }

    // One decision per block, accounting for every item once.
    assert_eq!(a.decisions.len(), req.blocks.len());
    for (b, d) in req.blocks.iter().zip(&a.decisions) {
        assert_eq!(d.name, b.name);
        assert_eq!(d.kind, b.kind);
        let filtered: Vec<&str> = b
            .items
            .iter()
            .filter(|it| !crate::may_see(&req.principal, &it.required_scopes))
            .map(|it| it.id.as_str())
            .collect();
        assert_eq!(d.filtered_item_ids, filtered, "filtered ids of block {}", b.name);
        assert_eq!(
            d.kept_item_ids.len() + d.dropped_item_ids.len() + d.filtered_item_ids.len(),
            b.items.len(),
            "block {} does not account for every item",
            b.name
        );
        let kept: HashSet<&str> = d.kept_item_ids.iter().map(String::as_str).collect();
        assert!(
            filtered.iter().all(|id| !kept.contains(id)),
            "a filtered item is kept"
        );
        assert!(d.compacted_item_ids.iter().all(|id| kept.contains(id.as_str())));
        assert!(
            d.summarized_item_ids
                .iter()
                .all(|id| d.dropped_item_ids.contains(id))
        );
        // Visible items of a non-cuttable context block are kept verbatim.
        if !b.effective_cuttable() && !b.kind.is_turns() {
            for it in b
                .items
                .iter()
                .filter(|it| crate::may_see(&req.principal, &it.required_scopes))
            {
                assert!(
                    kept.contains(it.id.as_str()),
                    "non-cuttable item {} not kept",
                    it.id
                );
                let unit = render::unit(b.kind, it, &it.content, FormAttr::Full);
                assert!(
                    a.messages.iter().any(|m| m.content.contains(&unit)),
                    "non-cuttable item {} not verbatim",
                    it.id
                );
            }
        }
    }
    check_turns(&a.messages);

    // The kept units plus what is always there add up to the total, but for
    // opening the context message and the summary message.
    let kept: u64 = a.decisions.iter().map(|d| u64::from(d.tokens_kept)).sum();
    let query = u64::from(message_tokens(tok, Role::User, &req.query));
    let rest = u64::from(u.total_tokens)
        .checked_sub(u64::from(u.static_tokens) + query + u64::from(REPLY_PRIMING_TOKENS) + kept)
        .unwrap_or_else(|| panic!("decisions keep more tokens than the total {}", u.total_tokens));
    let context = u64::from(MESSAGE_OVERHEAD_TOKENS + tok.role_tokens(policy.context_role));
    let summary = u64::from(MESSAGE_OVERHEAD_TOKENS + tok.role_tokens(Role::User));
    assert!(
        [0, context, summary, context + summary].contains(&rest),
        "{rest} tokens of the total are neither kept units nor message openings"
    );
}

/// Every text of `req` that may be rendered or echoed, except the content
/// of items the principal may not see.
fn visible_texts(req: &AssembleRequest) -> impl Iterator<Item = &str> {
    let statics = req.static_segments.iter().map(|s| s.content.as_str());
    let items = req.blocks.iter().flat_map(|b| {
        b.items.iter().flat_map(|it| {
            let visible = crate::may_see(&req.principal, &it.required_scopes);
            let content = [
                it.content.as_str(),
                it.compact_form.as_deref().unwrap_or_default(),
            ];
            let thinking = it
                .thinking
                .iter()
                .flat_map(|t| [t.text.as_str(), t.signature.as_str()])
                .filter(move |_| visible);
            [it.id.as_str(), it.source.as_str(), it.tool_call_id.as_str(), it.tool_name.as_str()]
                .into_iter()
                .chain(it.tool_call_ids.iter().map(String::as_str))
                .chain(content.into_iter().filter(move |_| visible))
                .chain(thinking)
        })
    });
    let names = req.blocks.iter().map(|b| b.name.as_str());
    let tools = req.tools.iter().map(String::as_str);
    statics
        .chain(std::iter::once(req.query.as_str()))
        .chain(names)
        .chain(items)
        .chain(tools)
}

/// Every tool result follows the assistant turn that made its call (with
/// only other results of that turn between), every call is answered, and
/// the conversation never starts with a tool result.
fn check_turns(messages: &[Message]) {
    // The turn sequence, for the panic message: role, calls made, call answered.
    let shape = || {
        messages
            .iter()
            .map(|m| format!("{}{:?}{}", m.role.as_str(), m.tool_call_ids, m.tool_call_id))
            .collect::<Vec<_>>()
            .join(" ")
    };
    // Calls not answered yet, as `turns::group` pairs them (validation now
    // refuses a repeated call id; a multiset still checks it correctly).
    let mut open: Vec<&str> = Vec::new();
    for m in messages
        .iter()
        .filter(|m| matches!(m.role, Role::Assistant | Role::Tool))
    {
        if m.role == Role::Tool {
            let at = open.iter().position(|id| *id == m.tool_call_id);
            let at = at.unwrap_or_else(|| panic!("tool result without its call: {}", shape()));
            open.swap_remove(at);
        } else {
            assert!(
                open.is_empty(),
                "tool call without all of its results: {}",
                shape()
            );
            open.extend(m.tool_call_ids.iter().map(String::as_str));
        }
    }
    assert!(
        open.is_empty(),
        "tool call without all of its results at the end: {}",
        shape()
    );
    let first = messages.iter().find(|m| m.role != Role::System);
    assert!(
        first.is_none_or(|m| m.role != Role::Tool),
        "conversation starts with a tool result: {}",
        shape()
    );
}
