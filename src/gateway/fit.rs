//! The fit: a provider's chat request in, the same request fitted to its
//! model out. The body is parsed for its turns ([`super::body`]), turned
//! into an [`AssembleRequest`] whose newest turn is pinned, run through the
//! one Assemble flow (the window, compaction, clearing and thinking rules
//! are the assembler's), and the decisions are spliced back into the
//! caller's bytes. Every edge that fits (Envoy's processor, the HTTP fit
//! endpoints) calls [`Fitter::fit`] and converts its [`Outcome`].

use std::collections::HashSet;
use std::sync::Arc;

use super::body::{self, Api, Edit, Fate, Parsed, Unfit, quoted};
use super::media::Media;
use super::{chat, messages, responses};
use crate::assemble::error::Needs;
use crate::assemble::flow::{Flow, FlowError, Prepared, WARM_TRY_BYTES};
use crate::assemble::{AssembleError, Assembler};
use crate::grpc::admission::Admission;
use crate::prompt::{AssembleRequest, Assembly, Block, BlockKind, Item, MarkerTarget, Segment, SegmentKind};
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

/// Why a request was passed on untouched (a bounded metric label each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Not a path the fit knows, or not a POST.
    Path,
    /// The body is not its API's JSON.
    Malformed,
    /// Valid JSON, but not a chat request.
    NotChat,
    /// A part the fit does not know how to cut.
    Unsupported,
    /// The model table has no such model.
    UnknownModel,
    /// The assembler refused the request as given (a duplicate call id, an
    /// unknown policy, a budget the window cannot hold).
    Invalid,
    /// Every work slot was taken.
    Overloaded,
    /// The server is draining.
    Draining,
    /// A continuation over its budget: what came before is the
    /// provider's, so it is not refused here.
    Continued,
    /// The assembly's messages could not be matched to the body's.
    Layout,
    /// The work failed (cancelled, panicked).
    Failed,
    /// More messages or turns than `limits.max_items`.
    TooMany,
    /// A full-duplex upload stalled, or its body found no room in the
    /// upload budget: passed on as it came.
    Stalled,
}

impl Pass {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Pass::Path => "path",
            Pass::Malformed => "malformed",
            Pass::NotChat => "not_chat",
            Pass::Unsupported => "unsupported",
            Pass::UnknownModel => "unknown_model",
            Pass::Invalid => "invalid",
            Pass::Overloaded => "overloaded",
            Pass::Draining => "draining",
            Pass::Continued => "continued",
            Pass::Layout => "layout",
            Pass::Failed => "failed",
            Pass::TooMany => "too_many_turns",
            Pass::Stalled => "stalled",
        }
    }

    /// Every reason, for starting the series at zero.
    pub const ALL: [Pass; 13] = [
        Pass::Path,
        Pass::Malformed,
        Pass::NotChat,
        Pass::Unsupported,
        Pass::UnknownModel,
        Pass::Invalid,
        Pass::Overloaded,
        Pass::Draining,
        Pass::Continued,
        Pass::Layout,
        Pass::Failed,
        Pass::TooMany,
        Pass::Stalled,
    ];
}

/// A refusal in the provider's own shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status.
    pub status: u16,
    /// The provider's error body.
    pub body: String,
    /// The metric label (`context_length_exceeded`, `too_large`,
    /// `malformed`, `unknown_model`, `overloaded`).
    pub reason: &'static str,
}

/// A request fitted (or found to fit as it is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    /// The body to send; `None`: the caller's, unchanged.
    pub body: Option<String>,
    /// The prompt's input tokens, as the provider bills them.
    pub input_tokens: u32,
    /// Whether that count is the provider's own (else an estimate).
    pub exact: bool,
    /// The static prefix's hash.
    pub prefix_hash: String,
    /// Turns not sent.
    pub turns_cut: u32,
    /// Tool results sent cleared.
    pub results_cleared: u32,
    /// Tokens the fit took out of the conversation.
    pub tokens_cut: u64,
    /// Whether the conversation itself changed (turns cut, cleared or
    /// summarized); a body with only cache fields added did not.
    pub changed: bool,
}

/// What the fit made of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Passed on untouched, and why.
    Passed(Pass),
    /// Fitted, or already fitting.
    Fitted(Fitted),
    /// Refused.
    Refused(Refusal),
}

impl Outcome {
    /// The `outcome` metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Passed(_) => "passed",
            Outcome::Fitted(f) if f.changed => "fitted",
            Outcome::Fitted(_) => "unchanged",
            Outcome::Refused(_) => "refused",
        }
    }

    /// The `reason` metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Outcome::Passed(p) => p.as_str(),
            Outcome::Fitted(_) => "none",
            Outcome::Refused(r) => r.reason,
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
        let parsed = match parsed {
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
        let media = Media::counted(&parsed, rule, published);
        let Some(input) = budget.checked_sub(media.all).filter(|&i| i > 0) else {
            let message = format!(
                "the request's images need {} input tokens, over its budget of {budget} for model {}",
                media.all, spec.name
            );
            return Outcome::Refused(refusal(api, 400, "context_length_exceeded", "messages", &message));
        };
        let req = request(&parsed, asks, input, parsed.max_output.map(|_| reserve));
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
            Err(FlowError::Assemble(AssembleError::BudgetOverflow {
                non_cuttable_tokens,
                needs,
                ..
            })) => {
                if parsed.continued {
                    return Outcome::Passed(Pass::Continued);
                }
                let message = overflow_message(
                    non_cuttable_tokens + u64::from(media.all),
                    budget,
                    &spec.name,
                    &needs,
                );
                return Outcome::Refused(refusal(api, 400, "context_length_exceeded", "messages", &message));
            }
            Err(FlowError::Refused(_)) => return self.overloaded(api),
            Err(FlowError::Assemble(
                AssembleError::InvalidArgument(_) | AssembleError::TemplateRefused { .. },
            )) => {
                return Outcome::Passed(Pass::Invalid);
            }
            Err(_) => return Outcome::Passed(Pass::Failed),
        };
        self.splice(api, text, &parsed, &assembly, &media)
    }

    /// The fitted body from the assembly's decisions.
    fn splice(&self, api: Api, text: &str, parsed: &Parsed, assembly: &Assembly, media: &Counted) -> Outcome {
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
        let kept_media: u32 = parsed
            .turns
            .iter()
            .zip(&fates)
            .zip(&media.per_turn)
            // A cleared result's images went with its content.
            .filter(|((_, f), _)| f.kept && f.cleared.is_none())
            .map(|(_, &m)| m)
            .fold(media.system, u32::saturating_add);
        let usage = &assembly.usage;
        let tools_exact = parsed.tools.is_empty() || usage.tools_exact;
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
            exact: usage.exact && tools_exact && !parsed.estimated && media.exact && !parsed.continued,
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

/// Media tokens of a request: all of them (taken from the budget before
/// the assembly), the system prompt's, each turn's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Counted {
    all: u32,
    system: u32,
    per_turn: Vec<u32>,
    exact: bool,
}

impl Media {
    /// The images of `parsed`, counted by this rule (`published`: the
    /// model's own rule, else an estimate).
    fn counted(parsed: &Parsed, rule: Media, published: bool) -> Counted {
        let mut exact = published;
        let mut sum = |images: &[super::media::Image]| {
            images.iter().fold(0u32, |acc, i| {
                let c = i.count(rule);
                exact &= c.exact;
                acc.saturating_add(c.tokens)
            })
        };
        let system = sum(&parsed.system_images);
        let per_turn: Vec<u32> = parsed.turns.iter().map(|t| sum(&t.images)).collect();
        let all = per_turn.iter().fold(system, |a, &b| a.saturating_add(b));
        Counted {
            all,
            system,
            per_turn,
            exact,
        }
    }
}

/// The name of the block of older turns (cuttable).
const OLDER: &str = "conversation";
/// The name of the block of the newest turn (pinned).
const NEWEST: &str = "newest-turn";

/// The assembler's request for `parsed`: the system prompt as static
/// segments, the turns before the newest in a block that may be cut, the
/// newest (all of them, for a continuation) in one that may not.
fn request(parsed: &Parsed, asks: &Asks, input: u32, output_reserve: Option<u32>) -> AssembleRequest {
    let pin = if parsed.continued { 0 } else { newest(parsed) };
    let item = |(i, t): (usize, &body::Turn)| Item {
        id: i.to_string(),
        content: t.text.clone(),
        role: t.role,
        tool_call_ids: t.tool_call_ids.clone(),
        tool_call_id: t.tool_call_id.clone(),
        thinking: t.thinking.clone(),
        trusted: true,
        ..Item::default()
    };
    let older: Vec<Item> = parsed.turns[..pin].iter().enumerate().map(item).collect();
    let newest: Vec<Item> = parsed.turns[pin..]
        .iter()
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

/// The cache markers the plan says take effect, where the caller placed
/// none, at most the provider's four counting the caller's own: as edits of
/// the caller's bytes, and the marker of the summary message when it gets
/// one. A marker goes on a message only when the message is sent as the
/// caller wrote it.
fn markers(
    text: &str,
    parsed: &Parsed,
    assembly: &Assembly,
    fates: &[Fate],
    summarized: bool,
) -> (Vec<Edit>, Option<String>) {
    let marks = &parsed.marks;
    let mut room = MAX_MARKERS.saturating_sub(marks.caller);
    let statics = assembly.cache.prefix_message_count as usize;
    let kept: Vec<usize> = (0..fates.len()).filter(|&t| fates[t].kept).collect();
    // Elements sent exactly as the caller wrote them.
    let mut touched = vec![false; parsed.elements.len()];
    for (t, turn) in parsed.turns.iter().enumerate() {
        let f = &fates[t];
        if !f.kept || f.cleared.is_some() || f.thinking_dropped {
            for p in &turn.parts {
                if let Some(e) = touched.get_mut(p.element) {
                    *e = true;
                }
            }
        }
    }
    let mut edits = Vec::new();
    let mut summary_marker = None;
    for m in assembly
        .cache_plan
        .markers
        .iter()
        .filter(|m| m.effective && m.field.name == "cache_control")
    {
        if room == 0 {
            break;
        }
        let spot = match m.target {
            MarkerTarget::Tool(i) => marks.tools.get(i as usize),
            MarkerTarget::Message(i) if (i as usize) < statics => marks.system.as_ref(),
            MarkerTarget::Message(i) if summarized && i as usize == statics => {
                summary_marker = Some(m.field.json.clone());
                room -= 1;
                continue;
            }
            MarkerTarget::Message(i) => {
                let k = (i as usize).saturating_sub(statics + usize::from(summarized));
                let element = kept
                    .get(k)
                    .and_then(|&t| parsed.turns[t].parts.last())
                    .map(|p| p.element)
                    .filter(|&e| !touched.get(e).copied().unwrap_or(true));
                element
                    .and_then(|e| marks.elements.get(e))
                    .and_then(Option::as_ref)
            }
        };
        if let Some(spot) = spot.filter(|s| !s.marked) {
            edits.push(spot.mark(text, &m.field.json));
            room -= 1;
        }
    }
    edits.sort_by_key(|(r, _)| (r.start, r.end));
    (edits, summary_marker)
}

/// Anthropic's limit of cache markers per request (the caller's included).
const MAX_MARKERS: usize = 4;

/// The compacted turns' summary message, when the assembly has one.
fn summary(assembly: &Assembly) -> Option<&str> {
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

/// The message of a refusal for a budget overflow: what does not fit.
fn overflow_message(needed: u64, budget: u32, model: &str, needs: &Needs) -> String {
    let newest: u64 = needs.blocks.iter().map(|b| b.tokens).sum();
    let mut parts = Vec::new();
    for (what, n) in [
        ("the system prompt", needs.static_prefix),
        ("the tools", needs.tools),
        ("the newest turn", newest),
        ("the chat format", needs.framing + needs.template),
    ] {
        if n > 0 {
            parts.push(format!("{what} {n}"));
        }
    }
    format!(
        "This request needs at least {needed} input tokens, over its budget of {budget} for model {model}, \
         although older turns may be cut: {}. Shorten what is never cut, or raise max_tokens' room.",
        parts.join(", ")
    )
}

/// A refusal in `api`'s error shape.
pub fn refusal(api: Api, status: u16, reason: &'static str, param: &str, message: &str) -> Refusal {
    let body = if api.anthropic() {
        let kind = match status {
            413 => "request_too_large",
            429 => "rate_limit_error",
            _ => "invalid_request_error",
        };
        serde_json::json!({"type": "error", "error": {"type": kind, "message": message}})
    } else {
        let (kind, code) = match (status, reason) {
            (413, _) => ("invalid_request_error", "request_too_large"),
            (429, _) => ("rate_limit_error", "rate_limit_exceeded"),
            (_, "context_length_exceeded") => ("invalid_request_error", "context_length_exceeded"),
            (_, "unknown_model") => ("invalid_request_error", "model_not_found"),
            _ => ("invalid_request_error", "invalid_request"),
        };
        let param = (!param.is_empty()).then_some(param);
        serde_json::json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
    };
    Refusal {
        status,
        body: body.to_string(),
        reason,
    }
}

/// The 429 of a sidecar over its limits.
pub fn overloaded(api: Api) -> Refusal {
    let message = "the context assembler is over its limits; retry shortly";
    refusal(api, 429, "overloaded", "", message)
}

/// The 413 of a body over the limit.
pub fn too_large(api: Api, bytes: usize, limit: usize) -> Refusal {
    let message = format!("the request body ({bytes} bytes) is over the limit of {limit} bytes");
    refusal(api, 413, "too_large", "", &message)
}

/// A caller's string as quoted in a message: at most 64 characters.
fn clip(s: &str) -> &str {
    s.char_indices().nth(64).map_or(s, |(at, _)| &s[..at])
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
