//! The fit: a provider's chat request in, the same request fitted to its
//! model out. The body is parsed for its turns ([`super::body`]), turned
//! into an [`AssembleRequest`] whose newest turn is pinned, run through the
//! one Assemble flow (the window, compaction, clearing and thinking rules
//! are the assembler's), and the decisions are spliced back into the
//! caller's bytes. Every edge that fits (Envoy's processor, the HTTP fit
//! endpoints) calls [`Fitter::fit`] and converts its [`Outcome`].

use std::collections::HashSet;
use std::sync::Arc;

pub use super::outcome::{Fitted, Outcome, Pass, Refusal};
pub use super::refusal::{overloaded, refusal, too_large};

use super::body::{self, Api, Fate, Parsed, Unfit, quoted};
use super::markers::markers;
use super::media::{Media, MediaTokens};
use super::refusal::{clip, overflow_message};
use super::{chat, messages, responses};
use crate::assemble::flow::{Flow, FlowError, Prepared, WARM_TRY_BYTES};
use crate::assemble::{AssembleError, Assembler};
use crate::grpc::admission::{self, Admission};
use crate::prompt::{
    AssembleRequest, Assembly, Block, BlockKind, Item, Segment, SegmentKind, Sources, Usage,
};
use crate::telemetry::metrics;

/// What the fit does where it cannot fit: the configuration's `[gateway]`
/// (every default passes the request on untouched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Largest body taken, in bytes; a larger one is answered 413.
    pub max_body_bytes: usize,
    /// Refuse a body that is not a request of its path's API (400), instead
    /// of passing it on.
    pub refuse_malformed: bool,
    /// Refuse a request for a model the table does not know (400).
    pub refuse_unknown_model: bool,
    /// Refuse with 429 when every work slot is taken, instead of passing
    /// the request on unfitted.
    pub refuse_overloaded: bool,
    /// Add `cache_control` markers to Anthropic requests where the cache
    /// plan says they take effect.
    pub cache_markers: bool,
    /// Set `prompt_cache_key` on OpenAI requests that carry none.
    pub prompt_cache_key: bool,
    /// Most messages (or items) of a request, and most turns: more are
    /// passed on unfitted (`limits.max_items`, as for `Assemble`).
    pub max_turns: usize,
}

/// The default turn limit: `limits.max_items`' default.
pub const DEFAULT_MAX_TURNS: usize = 10_000;

/// The default body limit: the gRPC listener's default message limit.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            refuse_malformed: false,
            refuse_unknown_model: false,
            refuse_overloaded: false,
            cache_markers: true,
            prompt_cache_key: true,
            max_turns: DEFAULT_MAX_TURNS,
        }
    }
}

/// What the caller's headers ask of the fit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Asks {
    /// `x-context-budget`: a lower input budget.
    pub budget: Option<u32>,
    /// `x-context-policy`: the policy's name (empty: the default).
    pub policy: String,
    /// `x-session-id`.
    pub session_id: String,
    /// `x-request-id` (logged, never rendered).
    pub request_id: String,
}

impl Asks {
    /// The asks of a request's headers (`get` reads one by lower-case
    /// name).
    pub fn from_headers<'h>(get: impl Fn(&str) -> Option<&'h str>) -> Asks {
        let text = |name: &str| get(name).map(str::to_owned).unwrap_or_default();
        Asks {
            budget: get("x-context-budget").and_then(|b| b.trim().parse().ok()),
            policy: text("x-context-policy"),
            session_id: text("x-session-id"),
            request_id: text("x-request-id"),
        }
    }
}

/// The fit over the server's assembler, flow and admission.
#[derive(Debug, Clone)]
pub struct Fitter {
    assembler: Arc<Assembler>,
    flow: Flow,
    admission: Admission,
    settings: Arc<Settings>,
}

impl Fitter {
    /// A fit through `flow` on `assembler`'s catalog, taking work slots
    /// from `admission`.
    pub fn new(assembler: Arc<Assembler>, flow: Flow, admission: Admission, settings: Settings) -> Self {
        Fitter {
            assembler,
            flow,
            admission,
            settings: Arc::new(settings),
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Fits `body`, a request of `api`, as `asks` asks. Records the
    /// gateway's metrics.
    pub async fn fit(&self, api: Api, asks: &Asks, body: &[u8]) -> Outcome {
        let outcome = self.fit_inner(api, asks, body).await;
        record(api, &outcome);
        outcome
    }

    async fn fit_inner(&self, api: Api, asks: &Asks, body: &[u8]) -> Outcome {
        if body.len() > self.settings.max_body_bytes {
            return Outcome::Refused(too_large(api, body.len(), self.settings.max_body_bytes));
        }
        let Ok(text) = std::str::from_utf8(body) else {
            return self.unfit(api, Unfit::Malformed);
        };
        let parsed = match api {
            Api::Chat => chat::parse(text),
            Api::Messages => messages::parse(text),
            Api::Responses => responses::parse(text),
        };
        let mut parsed = match parsed {
            Ok(p) => p,
            Err(u) => return self.unfit(api, u),
        };
        let max = self.settings.max_turns;
        if parsed.turns.len() > max || parsed.elements.len() > max {
            return Outcome::Passed(Pass::TooMany);
        }
        let catalog = self.assembler.catalog();
        let Some(spec) = catalog.models.resolve(&parsed.model).cloned() else {
            if self.settings.refuse_unknown_model {
                let message = format!("the model `{}` is not known here", clip(&parsed.model));
                return Outcome::Refused(refusal(api, 400, "unknown_model", "model", &message));
            }
            return Outcome::Passed(Pass::UnknownModel);
        };
        let rule = Media::of(spec.cache.provider.provider);
        // OpenAI's small models bill images by rules of their own.
        let published =
            rule != Media::OpenAi || !(spec.name.contains("-mini") || spec.name.contains("-nano"));
        let window = spec.context_window;
        let Some(reserve) = reserve(parsed.max_output, spec.output_reserve, window) else {
            // The provider refuses such a request itself, in its own words.
            return Outcome::Passed(Pass::Invalid);
        };
        let room = window - reserve;
        let budget = asks.budget.map_or(room, |b| b.min(room));
        let media = parsed.media(rule, published);
        let Some(input) = budget.checked_sub(media.all).filter(|&i| i > 0) else {
            let message = format!(
                "the request's images need {} input tokens, over its budget of {budget} for model {}",
                media.all, spec.name
            );
            return Outcome::Refused(refusal(api, 400, "context_length_exceeded", "messages", &message));
        };
        let output_reserve = parsed.max_output.map(|_| reserve);
        let req = request(&mut parsed, asks, input, output_reserve);
        let permit = match self.admission.admit() {
            Ok(p) => p,
            Err(_) => return self.overloaded(api),
        };
        let small = body.len() <= WARM_TRY_BYTES;
        let prepared = Prepared { req, recall: None };
        let answered = self
            .flow
            .one(&self.admission, permit, catalog, prepared, small)
            .await;
        let assembly = match answered {
            Ok(a) => a.assembly,
            Err(e) => return self.failed(api, e, parsed.continued, budget, media.all, &spec.name),
        };
        self.splice(api, text, &parsed, &assembly, &media)
    }

    /// What a request the flow could not fit gets: refused when its fixed
    /// part (and its images' `media` tokens) overflows `budget` for `model`
    /// (passed when it is a `continued` conversation, whose start the fit
    /// does not see), or passed on.
    fn failed(
        &self,
        api: Api,
        e: FlowError<admission::Refusal>,
        continued: bool,
        budget: u32,
        media: u32,
        model: &str,
    ) -> Outcome {
        match e {
            FlowError::Assemble(AssembleError::BudgetOverflow {
                non_cuttable_tokens,
                needs,
                ..
            }) => {
                if continued {
                    return Outcome::Passed(Pass::Continued);
                }
                let message = overflow_message(non_cuttable_tokens + u64::from(media), budget, model, &needs);
                Outcome::Refused(refusal(api, 400, "context_length_exceeded", "messages", &message))
            }
            FlowError::Refused(_) => self.overloaded(api),
            FlowError::Assemble(
                AssembleError::InvalidArgument(_) | AssembleError::TemplateRefused { .. },
            ) => Outcome::Passed(Pass::Invalid),
            _ => Outcome::Passed(Pass::Failed),
        }
    }

    /// The fitted body from the assembly's decisions.
    fn splice(
        &self,
        api: Api,
        text: &str,
        parsed: &Parsed,
        assembly: &Assembly,
        media: &MediaTokens,
    ) -> Outcome {
        let Some(fates) = fates(parsed, assembly) else {
            return Outcome::Passed(Pass::Layout);
        };
        let summary = summary(assembly);
        let changed = summary.is_some()
            || fates
                .iter()
                .any(|f| !f.kept || f.cleared.is_some() || f.thinking_dropped);
        let (edits, summary_marker) = if api == Api::Messages && self.settings.cache_markers {
            markers(text, parsed, assembly, &fates, summary.is_some())
        } else {
            (Vec::new(), None)
        };
        let mut out = if changed {
            let element = summary.map(|s| match &summary_marker {
                Some(m) => format!(
                    r#"{{"role":"user","content":[{{"type":"text","text":{},"cache_control":{m}}}]}}"#,
                    quoted(s)
                ),
                None => format!(r#"{{"role":"user","content":{}}}"#, quoted(s)),
            });
            Some(body::splice(text, parsed, &fates, element.as_deref(), &edits))
        } else {
            (!edits.is_empty()).then(|| body::edit(text, &edits))
        };
        if self.settings.prompt_cache_key
            && api != Api::Messages
            && !parsed.has_cache_key
            && !assembly.hints.prompt_cache_key.is_empty()
        {
            let base = out.as_deref().unwrap_or(text);
            out = Some(body::add_member(
                base,
                "prompt_cache_key",
                &quoted(&assembly.hints.prompt_cache_key),
            ));
        }
        let kept_media = kept_media(parsed, &fates, media);
        let usage = &assembly.usage;
        let tools_exact = parsed.tools.is_empty() || usage.tools_exact;
        // A count by convention (tool calls, names) or of a continuation
        // (without what came before) is an estimate of the messages, whoever
        // counted their texts.
        let by_convention = parsed.estimated || parsed.continued;
        let turn_blocks = assembly.decisions.iter().filter(|d| d.kind.is_turns());
        let tokens_cut = turn_blocks
            .map(|d| u64::from(d.tokens_offered.saturating_sub(d.tokens_kept)))
            .sum();
        Outcome::Fitted(Fitted {
            body: out,
            // The tools are reserved from the budget beside the messages.
            input_tokens: usage
                .total_tokens
                .saturating_add(usage.tools_tokens)
                .saturating_add(kept_media),
            // A continuation's count leaves out what came before it.
            exact: usage.exact && tools_exact && !by_convention && media.exact,
            sources: sources(usage, by_convention, kept_media, media.exact),
            prefix_hash: assembly.cache.prefix_hash.clone(),
            turns_cut: count(fates.iter().filter(|f| !f.kept)),
            results_cleared: count(fates.iter().filter(|f| f.cleared.is_some())),
            tokens_cut,
            changed,
        })
    }

    fn unfit(&self, api: Api, unfit: Unfit) -> Outcome {
        let pass = match unfit {
            Unfit::Malformed => Pass::Malformed,
            Unfit::NotChat => Pass::NotChat,
            Unfit::Unsupported => Pass::Unsupported,
        };
        if self.settings.refuse_malformed && pass == Pass::Malformed {
            let message = "the body is not a valid request of this API";
            return Outcome::Refused(refusal(api, 400, "malformed", "body", message));
        }
        Outcome::Passed(pass)
    }

    fn overloaded(&self, api: Api) -> Outcome {
        if self.settings.refuse_overloaded {
            return Outcome::Refused(overloaded(api));
        }
        Outcome::Passed(Pass::Overloaded)
    }

    /// The admission the fit takes its slots (and an edge its upload
    /// budget) from.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }
}

/// Where a fitted request's input tokens came from: the messages' as the
/// assembly counted them (all estimated when `by_convention`), the tools'
/// exact when what the provider bills for them, and the images' exact when
/// by the provider's published rule; else estimated.
fn sources(usage: &Usage, by_convention: bool, media: u32, media_exact: bool) -> Sources {
    let mut s = match by_convention {
        true => Sources::all(usage.total_tokens, false),
        false => usage.sources,
    };
    for (tokens, exact) in [(usage.tools_tokens, usage.tools_exact), (media, media_exact)] {
        let to = if exact { &mut s.exact } else { &mut s.estimated };
        *to = to.saturating_add(tokens);
    }
    s
}

/// The image tokens of what the fit kept: the system prompt's and those of
/// the turns kept whole.
fn kept_media(parsed: &Parsed, fates: &[Fate], media: &MediaTokens) -> u32 {
    parsed
        .turns
        .iter()
        .zip(fates)
        .zip(&media.per_turn)
        // A cleared result's images went with its content.
        .filter(|((_, f), _)| f.kept && f.cleared.is_none())
        .map(|(_, &m)| m)
        .fold(media.system, u32::saturating_add)
}

fn count<T>(it: impl Iterator<Item = T>) -> u32 {
    u32::try_from(it.count()).unwrap_or(u32::MAX)
}

/// The output reserve: the request's maximum output, else the model's;
/// `None` when it leaves no room in the window.
fn reserve(max_output: Option<u64>, model: u32, window: u32) -> Option<u32> {
    let reserve = match max_output {
        Some(n) => u32::try_from(n).ok()?,
        None => model,
    };
    (reserve < window).then_some(reserve)
}

/// The name of the block of older turns (cuttable).
const OLDER: &str = "conversation";
/// The name of the block of the newest turn (pinned).
const NEWEST: &str = "newest-turn";

/// The assembler's request for `parsed`: the system prompt as static
/// segments, the turns before the newest in a block that may be cut, the
/// newest (all of them, for a continuation) in one that may not. The turns'
/// texts and thinking move into it (the splice reads the caller's bytes,
/// not them).
fn request(parsed: &mut Parsed, asks: &Asks, input: u32, output_reserve: Option<u32>) -> AssembleRequest {
    let pin = if parsed.continued { 0 } else { newest(parsed) };
    let item = |(i, t): (usize, &mut body::Turn)| Item {
        id: i.to_string(),
        content: std::mem::take(&mut t.text),
        role: t.role,
        tool_call_ids: t.tool_call_ids.clone(),
        tool_call_id: t.tool_call_id.clone(),
        thinking: std::mem::take(&mut t.thinking),
        trusted: true,
        ..Item::default()
    };
    let older: Vec<Item> = parsed.turns[..pin].iter_mut().enumerate().map(item).collect();
    let newest: Vec<Item> = parsed.turns[pin..]
        .iter_mut()
        .enumerate()
        .map(|(k, t)| item((pin + k, t)))
        .collect();
    let mut blocks = Vec::with_capacity(2);
    if !older.is_empty() {
        blocks.push(Block::new(OLDER, BlockKind::RecentTurns, older));
    }
    if !newest.is_empty() {
        let mut b = Block::new(NEWEST, BlockKind::RecentTurns, newest);
        b.cuttable = Some(false);
        blocks.push(b);
    }
    AssembleRequest {
        request_id: asks.request_id.clone(),
        model: parsed.model.clone(),
        max_input_tokens: Some(input),
        output_reserve,
        static_segments: parsed
            .system
            .iter()
            .enumerate()
            .map(|(i, s)| Segment {
                id: format!("system-{i}"),
                kind: SegmentKind::System,
                content: s.clone(),
            })
            .collect(),
        blocks,
        session_id: asks.session_id.clone(),
        policy: asks.policy.clone(),
        tools: parsed.tools.clone(),
        no_query: true,
        ..AssembleRequest::default()
    }
}

/// Where the newest turn starts: the last user message (with the calls its
/// tool results answer), or, in an agent loop, the last tool results with
/// the calls they answer; what follows it (an assistant prefill, a system
/// note) goes with it. Linear in the turns.
pub fn newest(parsed: &Parsed) -> usize {
    use crate::vocab::Role;
    let turns = &parsed.turns;
    let Some(last) = turns
        .iter()
        .rposition(|t| matches!(t.role, Some(Role::User | Role::Tool)))
    else {
        return 0;
    };
    // The whole element the last user or tool turn is in.
    let element = turns[last].parts.first().map(|p| p.element);
    let mut at = last + 1;
    while at > 0
        && turns[at - 1].role != Some(Role::Assistant)
        && turns[at - 1].parts.first().map(|p| p.element) == element
    {
        at -= 1;
    }
    // Results not yet matched by a call: back to the calls that made them.
    let mut open: HashSet<&str> = turns[at..]
        .iter()
        .filter(|t| t.role == Some(Role::Tool))
        .map(|t| t.tool_call_id.as_str())
        .collect();
    for id in turns[at..].iter().flat_map(|t| &t.tool_call_ids) {
        open.remove(id.as_str());
    }
    while at > 0 && !open.is_empty() && turns[at - 1].role != Some(Role::User) {
        at -= 1;
        let t = &turns[at];
        if t.role == Some(Role::Tool) {
            open.insert(t.tool_call_id.as_str());
        }
        for id in &t.tool_call_ids {
            open.remove(id.as_str());
        }
    }
    at
}

/// Each turn's fate from the assembly's decisions, with the cleared texts
/// read from its messages; `None` when the messages do not line up with
/// the kept turns (a template that joins messages).
fn fates(parsed: &Parsed, assembly: &Assembly) -> Option<Vec<Fate>> {
    let n = parsed.turns.len();
    let mut fates = vec![Fate::default(); n];
    let index = |id: &str| id.parse::<usize>().ok().filter(|&i| i < n);
    let mut kept = Vec::new();
    for d in assembly.decisions.iter().filter(|d| d.kind.is_turns()) {
        for id in &d.kept_item_ids {
            kept.push(index(id)?);
        }
        for id in &d.thinking_dropped_item_ids {
            fates[index(id)?].thinking_dropped = true;
        }
    }
    let mut cleared = vec![false; n];
    for id in assembly.decisions.iter().flat_map(|d| d.cleared_item_ids.iter()) {
        cleared[index(id)?] = true;
    }
    let any_cleared = cleared.iter().any(|&c| c);
    let skip = assembly.cache.prefix_message_count as usize + usize::from(summary(assembly).is_some());
    let turns = assembly.messages.get(skip..)?;
    if turns.len() != kept.len() && any_cleared {
        return None;
    }
    for (k, &t) in kept.iter().enumerate() {
        fates[t].kept = true;
        if cleared[t] {
            fates[t].cleared = Some(turns.get(k)?.content.clone());
        }
    }
    Some(fates)
}

/// The compacted turns' summary message, when the assembly has one.
pub(super) fn summary(assembly: &Assembly) -> Option<&str> {
    let summarized = assembly
        .decisions
        .iter()
        .any(|d| !d.summarized_item_ids.is_empty());
    let at = assembly.cache.prefix_message_count as usize;
    summarized
        .then(|| assembly.messages.get(at))
        .flatten()
        .map(|m| m.content.as_str())
}

/// Records a fit's outcome.
fn record(api: Api, outcome: &Outcome) {
    metrics::gateway_request(api.as_str(), outcome.label(), outcome.reason());
    if let Outcome::Fitted(f) = outcome {
        metrics::gateway_tokens_cut(api.as_str(), f.tokens_cut);
    }
}

#[cfg(test)]
mod tests;
