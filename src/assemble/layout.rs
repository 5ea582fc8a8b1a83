//! Ordering for attention and for caches:
//!
//! 1. one system message per static segment, verbatim, in the given order:
//!    the cacheable prefix, whose bytes depend on nothing else;
//! 2. one user message with the SUMMARY units, then the summary of turns
//!    compacted to fit (if any), before the turns they cover;
//! 3. HISTORY then RECENT_TURNS turns, chronological, in their own roles (an
//!    append-only conversation extends the cacheable prefix turn by turn);
//! 4. one user context message: the best evidence first, memory/profile near
//!    the top, weaker evidence in the middle, the second best last, STATE at
//!    the close;
//! 5. the query, last, as a user message.
//!
//! Layout first plans where each text goes, then moves the texts out of the
//! request, so request bytes are not copied twice. A model whose chat
//! template refuses this layout (roles that must alternate, no tool role) is
//! sent it conformed ([`conform`]): consecutive messages of one role joined.

use std::borrow::Cow;

use xxhash_rust::xxh3::xxh3_64;

use super::allocate::{Allocation, Form, rank_by_score};
use super::lighten;
use super::measure::{Clear, Measurement};
use super::policy::Policy;
use super::render::{self, FormAttr};
use crate::prompt::{AssembleRequest, BlockKind, Item, Message, PartKind, SegmentKind, Thinking};
use crate::tokens::chat::LayoutRules;
use crate::vocab::Role;

/// Where a planned message's text comes from.
#[derive(Debug)]
pub(super) enum Source {
    /// `static_segments[i].content`.
    Static(usize),
    /// `blocks[block].items[item]` (a turn, with its tool metadata), in
    /// `form`.
    Turn {
        block: usize,
        item: usize,
        form: TurnForm,
    },
    /// The query.
    Query,
    /// Text rendered by the assembler (summary and context messages).
    Rendered(String),
    /// Consecutive messages of one role sent as one (a template that
    /// refuses them apart): their texts joined by [`JOIN`], their tool
    /// calls together.
    Joined(Vec<Source>),
}

impl Source {
    /// Whether this message is (or holds) a conversation turn.
    pub(super) fn holds_turn(&self) -> bool {
        match self {
            Source::Turn { .. } => true,
            Source::Joined(parts) => parts.iter().any(Source::holds_turn),
            _ => false,
        }
    }
}

/// How a kept turn is sent: whole, or lightened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct TurnForm {
    /// A cleared tool result: what takes its content's place, and its
    /// message's tokens (the placeholder names them).
    pub cleared: Option<(Clear, u32)>,
    /// Its thinking is dropped.
    pub drop_thinking: bool,
}

impl TurnForm {
    /// The form of turn candidate `ci` of block `bi` in a unit kept in
    /// `form`.
    fn of(p: Measurement<'_>, bi: usize, ci: usize, form: Form) -> TurnForm {
        if form != Form::Light {
            return TurnForm::default();
        }
        let m = &p.blocks[bi];
        let tokens = m.costs.get(ci).map_or(0, |c| c.message);
        TurnForm {
            cleared: m.clears(ci).map(|c| (c, tokens)),
            drop_thinking: m.lights.get(ci).is_some_and(|l| l.drops_thinking()),
        }
    }

    /// The content `item` is sent with.
    pub(super) fn content<'r>(self, item: &'r Item) -> Cow<'r, str> {
        match self.cleared {
            Some((clear, tokens)) => lighten::cleared_text(item, clear, tokens),
            None => Cow::Borrowed(&item.content),
        }
    }

    /// The thinking `item` is sent with.
    pub(super) fn thinking(self, item: &Item) -> &[Thinking] {
        if self.drop_thinking { &[] } else { &item.thinking }
    }
}

/// What separates the texts of messages sent as one.
pub(super) const JOIN: &str = "\n\n";

/// The messages in final order, before texts are moved out of the request.
pub(super) type Plan = Vec<(Role, Source)>;

/// One part of the laid-out prompt (the fingerprint's and the cache plan's
/// unit): what it is, where it comes from, the planned message holding it
/// (an index into the plan as [`plan`] made it, before [`conform`]) and an
/// xxh3 hash of what it renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PartRef {
    /// What it is.
    pub kind: PartKind,
    /// Where its text comes from.
    pub at: PartAt,
    /// The planned message holding it.
    pub message: usize,
    /// xxh3 of its rendered text (and a turn's role and tool metadata).
    pub hash: u64,
    /// The item that names it (a turn unit's first), as (block, position
    /// in the block's items).
    pub item: Option<(usize, usize)>,
}

/// Where a part's text comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PartAt {
    /// `static_segments[i]`.
    Static(usize),
    /// The summary message.
    Summary,
    /// Unit `unit` of block `block` (a turn unit: its messages; a context
    /// unit: its text in the context message).
    Unit { block: usize, unit: usize },
    /// The query.
    Query,
}

/// The xxh3 of a turn's messages as sent: each one's role, content, tool
/// metadata and thinking, length-framed.
fn turn_hash<'a>(messages: impl Iterator<Item = (Role, &'a Item, TurnForm)>) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut framed = |b: &[u8]| {
        h.update(&(b.len() as u64).to_le_bytes());
        h.update(b);
    };
    for (role, item, form) in messages {
        framed(role.as_str().as_bytes());
        framed(form.content(item).as_bytes());
        for id in &item.tool_call_ids {
            framed(id.as_bytes());
        }
        framed(item.tool_call_id.as_bytes());
        for t in form.thinking(item) {
            framed(t.text.as_bytes());
            framed(t.signature.as_bytes());
            framed(&[u8::from(t.redacted)]);
        }
    }
    h.digest()
}

/// The text of a kept context unit in its kept form.
fn unit_text<'p>(p: Measurement<'p>, bi: usize, ui: usize, form: Form) -> Cow<'p, str> {
    let item = p.item(bi, ui);
    let kind = p.req.blocks[bi].kind;
    match form {
        Form::Compact => {
            let text = item.compact_form.as_deref().unwrap_or_default();
            render::unit(kind, item, text, FormAttr::Compact).into()
        }
        Form::Truncated { bytes } => {
            render::unit(kind, item, &item.content[..bytes], FormAttr::Truncated).into()
        }
        Form::Full | Form::Light | Form::Dropped(_) => p.blocks[bi].unit(kind, item, ui).into(),
    }
}

/// Orders the kept units into messages; `turn_summary` is the rendered
/// summary unit of compacted turns, when the allocation kept one.
pub(super) fn plan(
    p: Measurement<'_>,
    policy: &Policy,
    alloc: &Allocation,
    turn_summary: Option<String>,
) -> (Plan, Vec<PartRef>) {
    let mut planner = Planner {
        p,
        policy,
        alloc,
        plan: Vec::new(),
        parts: Vec::new(),
    };
    planner.static_segments();
    planner.summary(turn_summary);
    planner.turns();
    planner.context();
    planner.query();
    (planner.plan, planner.parts)
}

/// The messages and parts [`plan`] has laid out so far, and what it lays
/// out from.
struct Planner<'a, 'p> {
    p: Measurement<'p>,
    policy: &'a Policy,
    alloc: &'a Allocation,
    plan: Plan,
    parts: Vec<PartRef>,
}

impl<'p> Planner<'_, 'p> {
    /// The kept units of block `bi`, in unit order.
    fn kept(&self, bi: usize) -> Vec<usize> {
        let forms = &self.alloc.forms[bi];
        (0..forms.len()).filter(|&u| forms[u].is_kept()).collect()
    }

    /// The blocks of kind `kind`, in request order.
    fn of_kind(&self, kind: BlockKind) -> Vec<usize> {
        let blocks = &self.p.req.blocks;
        (0..blocks.len()).filter(|&b| blocks[b].kind == kind).collect()
    }

    /// The blocks of kind `kind` by the policy's priority, then in request
    /// order.
    fn by_priority(&self, kind: BlockKind) -> Vec<usize> {
        let mut v = self.of_kind(kind);
        v.sort_by_key(|&b| (self.policy.priority_of(&self.p.req.blocks[b]), b));
        v
    }

    /// The kept units of block `bi`, best score first.
    fn by_score(&self, bi: usize) -> Vec<usize> {
        rank_by_score(self.kept(bi), |ui| self.p.item(bi, ui).score)
    }

    /// The text of kept context unit `ui` of block `bi`, in its kept form.
    fn unit_text(&self, bi: usize, ui: usize) -> Cow<'p, str> {
        unit_text(self.p, bi, ui, self.alloc.forms[bi][ui])
    }

    /// One system message per static segment, in the given order.
    fn static_segments(&mut self) {
        let segments = &self.p.req.static_segments;
        self.plan
            .extend((0..segments.len()).map(|i| (Role::System, Source::Static(i))));
        self.parts
            .extend(segments.iter().enumerate().map(|(i, seg)| PartRef {
                kind: match seg.kind {
                    SegmentKind::Examples => PartKind::Examples,
                    _ => PartKind::System,
                },
                at: PartAt::Static(i),
                message: i,
                hash: xxh3_64(seg.content.as_bytes()),
                item: None,
            }));
    }

    /// The summary message (if anything summarizes): the SUMMARY units,
    /// then `turn_summary`.
    fn summary(&mut self, turn_summary: Option<String>) {
        let mut summary = String::new();
        for bi in self.of_kind(BlockKind::Summary) {
            for ui in self.kept(bi) {
                summary.push_str(&self.unit_text(bi, ui));
            }
        }
        // The compacted turns are newer than any summary the caller sent.
        if let Some(unit) = turn_summary {
            summary.push_str(&unit);
        }
        if !summary.is_empty() {
            self.parts.push(PartRef {
                kind: PartKind::Summary,
                at: PartAt::Summary,
                message: self.plan.len(),
                hash: xxh3_64(summary.as_bytes()),
                item: None,
            });
            self.plan.push((Role::User, Source::Rendered(summary)));
        }
    }

    /// The kept turns of the HISTORY then the RECENT_TURNS blocks.
    fn turns(&mut self) {
        let blocks = self.of_kind(BlockKind::History);
        for bi in blocks.into_iter().chain(self.of_kind(BlockKind::RecentTurns)) {
            for ui in self.kept(bi) {
                self.turn_unit(bi, ui);
            }
        }
    }

    /// Kept turn unit `ui` of block `bi`: one part, and a message per turn
    /// in it, each in its own role.
    fn turn_unit(&mut self, bi: usize, ui: usize) {
        let (p, unit_form) = (self.p, self.alloc.forms[bi][ui]);
        let members = &p.blocks[bi].units[ui].members;
        let of = |&(mb, mc): &(usize, usize)| {
            let item = p.blocks[mb].candidates[mc];
            (
                mb,
                item,
                &p.req.blocks[mb].items[item],
                TurnForm::of(p, mb, mc, unit_form),
            )
        };
        self.parts.push(PartRef {
            kind: PartKind::Turn,
            at: PartAt::Unit { block: bi, unit: ui },
            message: self.plan.len(),
            hash: turn_hash(members.iter().map(|m| {
                let (_, _, it, form) = of(m);
                (it.role.unwrap_or(Role::User), it, form)
            })),
            item: members.first().map(|m| {
                let (mb, item, _, _) = of(m);
                (mb, item)
            }),
        });
        for m in members {
            let (mb, item, it, form) = of(m);
            self.plan.push((
                it.role.unwrap_or(Role::User),
                Source::Turn {
                    block: mb,
                    item,
                    form,
                },
            ));
        }
    }

    /// The context message (if anything is in it): the best evidence first,
    /// memory, weaker evidence toward the middle, the second best last,
    /// STATE at the close.
    fn context(&mut self) {
        // Evidence ranked across blocks (priority, then score), then placed
        // best first, second best last, weaker toward the middle.
        let evidence: Vec<(usize, usize)> = self
            .by_priority(BlockKind::Evidence)
            .into_iter()
            .flat_map(|bi| self.by_score(bi).into_iter().map(move |ui| (bi, ui)))
            .collect();
        let mut placed = render::alternating_order(evidence.len())
            .into_iter()
            .map(|r| evidence[r]);
        let mut context = String::new();
        if let Some(best) = placed.next() {
            self.context_unit(&mut context, best);
        }
        for bi in self.by_priority(BlockKind::Memory) {
            for ui in self.by_score(bi) {
                self.context_unit(&mut context, (bi, ui));
            }
        }
        for e in placed {
            self.context_unit(&mut context, e);
        }
        for bi in self.of_kind(BlockKind::State) {
            for ui in self.kept(bi) {
                self.context_unit(&mut context, (bi, ui));
            }
        }
        if !context.is_empty() {
            self.plan
                .push((self.policy.context_role, Source::Rendered(context)));
        }
    }

    /// Appends kept unit `ui` of block `bi` to `context`, as a part of the
    /// context message (the next in the plan: it is pushed once whole).
    fn context_unit(&mut self, context: &mut String, (bi, ui): (usize, usize)) {
        let text = self.unit_text(bi, ui);
        self.parts.push(PartRef {
            kind: match self.p.req.blocks[bi].kind {
                BlockKind::Memory => PartKind::Memory,
                BlockKind::State => PartKind::State,
                _ => PartKind::Evidence,
            },
            at: PartAt::Unit { block: bi, unit: ui },
            message: self.plan.len(),
            hash: xxh3_64(text.as_bytes()),
            item: self.p.blocks[bi].candidates.get(ui).map(|&i| (bi, i)),
        });
        context.push_str(&text);
    }

    /// The query, last, as a user message (unless the prompt ends with a
    /// turn).
    fn query(&mut self) {
        let req = self.p.req;
        if req.no_query {
            return;
        }
        self.parts.push(PartRef {
            kind: PartKind::Query,
            at: PartAt::Query,
            message: self.plan.len(),
            hash: xxh3_64(req.query.as_bytes()),
            item: None,
        });
        self.plan.push((Role::User, Source::Query));
    }
}

/// Lays `plan` out as a template needs it: tool results as user messages
/// where the template refuses the tool role, a system message after the
/// conversation has begun as a user message where the template takes only
/// a first one, then consecutive messages of one role as one where it
/// refuses them apart. Returns how many messages
/// were joined into others (0: the plan is as it was).
pub(super) fn conform(plan: &mut Plan, rules: LayoutRules, parts: &mut [PartRef]) -> usize {
    let mut begun = false;
    for (role, _) in plan.iter_mut() {
        let later_system = rules.system_only_first && begun && *role == Role::System;
        begun |= *role != Role::System;
        if (rules.tool_as_user && *role == Role::Tool) || later_system {
            *role = Role::User;
        }
    }
    if !rules.merge_consecutive || plan.windows(2).all(|w| w[0].0 != w[1].0 || w[0].0 == Role::Tool) {
        return 0;
    }
    let before = plan.len();
    let mut out: Plan = Vec::with_capacity(before);
    // Where each planned message ends up.
    let mut moved = Vec::with_capacity(before);
    for (role, source) in plan.drain(..) {
        // Tool results stay apart: each answers its own call.
        let joins = |last: &Role| *last == role && role != Role::Tool;
        match out.last_mut() {
            Some((last, Source::Joined(parts))) if joins(last) => parts.push(source),
            Some((last, prev)) if joins(last) => {
                let first = std::mem::replace(prev, Source::Joined(Vec::new()));
                *prev = Source::Joined(vec![first, source]);
            }
            _ => out.push((role, source)),
        }
        moved.push(out.len() - 1);
    }
    *plan = out;
    for part in parts {
        part.message = moved.get(part.message).copied().unwrap_or(part.message);
    }
    before - plan.len()
}

/// The text a planned message will carry (joined parts are copied once).
pub(super) fn text_of<'r>(req: &'r AssembleRequest, source: &'r Source) -> Cow<'r, str> {
    match source {
        Source::Static(i) => Cow::Borrowed(&req.static_segments[*i].content),
        Source::Query => Cow::Borrowed(&req.query),
        Source::Rendered(text) => Cow::Borrowed(text),
        Source::Turn { block, item, form } => form.content(&req.blocks[*block].items[*item]),
        Source::Joined(parts) => {
            let mut out = String::new();
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    out.push_str(JOIN);
                }
                out.push_str(&text_of(req, p));
            }
            Cow::Owned(out)
        }
    }
}

/// The thinking a planned message will carry, as a chat template reads it
/// (`None`: none).
pub(super) fn thinking_of(req: &AssembleRequest, source: &Source) -> Option<String> {
    match source {
        Source::Turn { block, item, form } => {
            lighten::readable_thinking(form.thinking(&req.blocks[*block].items[*item]))
        }
        Source::Joined(parts) => {
            let texts: Vec<String> = parts.iter().filter_map(|p| thinking_of(req, p)).collect();
            (!texts.is_empty()).then(|| texts.join("\n\n"))
        }
        _ => None,
    }
}

/// Builds the messages, moving texts out of the request.
pub(super) fn materialize(plan: Plan, mut req: AssembleRequest) -> Vec<Message> {
    plan.into_iter()
        .map(|(role, content)| take(role, content, &mut req))
        .collect()
}

/// The message of `source`, its text moved out of `req`.
fn take(role: Role, source: Source, req: &mut AssembleRequest) -> Message {
    match source {
        Source::Static(i) => Message::text(role, std::mem::take(&mut req.static_segments[i].content)),
        Source::Query => Message::text(role, std::mem::take(&mut req.query)),
        Source::Rendered(text) => Message::text(role, text),
        Source::Turn { block, item, form } => {
            let it = &mut req.blocks[block].items[item];
            let content = match form.cleared {
                Some(_) => form.content(it).into_owned(),
                None => std::mem::take(&mut it.content),
            };
            Message {
                role,
                content,
                tool_call_ids: std::mem::take(&mut it.tool_call_ids),
                tool_call_id: std::mem::take(&mut it.tool_call_id),
                thinking: if form.drop_thinking {
                    Vec::new()
                } else {
                    std::mem::take(&mut it.thinking)
                },
            }
        }
        Source::Joined(parts) => {
            let mut joined = Message::text(role, String::new());
            for (i, part) in parts.into_iter().enumerate() {
                let m = take(role, part, req);
                if i > 0 {
                    joined.content.push_str(JOIN);
                }
                joined.content.push_str(&m.content);
                joined.tool_call_ids.extend(m.tool_call_ids);
                joined.thinking.extend(m.thinking);
                if joined.tool_call_id.is_empty() {
                    joined.tool_call_id = m.tool_call_id;
                }
            }
            joined
        }
    }
}
