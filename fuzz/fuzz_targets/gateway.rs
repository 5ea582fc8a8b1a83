//! A provider's chat request body as Envoy's external processor takes it:
//! the first byte picks the API (`c` Chat Completions, `m` Anthropic
//! Messages, `r` Responses, any other byte by its value modulo 3), the rest
//! is the body (inputs that are not UTF-8 are skipped, as the fit passes
//! them on). The fates of the turns, the cleared texts and the summary come
//! from a hash of the whole input.
//!
//! Invariants: no parser, `splice`, `add_member`, `newest` or image count
//! panics. A parsed body's spans lie inside it on character boundaries, in
//! order (elements inside the list, blocks inside their element, a result's
//! cleared value inside its turn's element), every part names an existing
//! element or block, and on valid JSON each span's value is the list's
//! element, block or value it stands for. `newest` is at most the number of
//! turns. On valid JSON, a splice keeping every turn whole gives the same
//! JSON value; any splice keeps the bytes outside the list, is valid JSON,
//! and its list holds, in order, the fixed elements, the summary, then
//! exactly the elements a staying part is in: each equal to the caller's,
//! but for cleared values (the cleared text in their place) and the blocks
//! of turns that went; `add_member` on an object adds the member and changes
//! nothing else. Anthropic's cache-marker spots lie inside the body, are
//! the strings or objects they say, and marking them (alone, or in a splice
//! as the fit does) gives valid JSON with only the markers added.
#![no_main]

use std::ops::Range;

use context_assembler::gateway::body::{self, Edit, Fate, Marks, Parsed, Part, Unfit};
use context_assembler::gateway::media::Media;
use context_assembler::gateway::{Api, chat, fit, messages, responses};
use fuzz_support::note;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| run(data));

/// Texts a cleared result gets in place of its content: empty, escapes,
/// line separators, a NUL, JSON that must stay a string.
const CLEARED: [&str; 5] = [
    "[result cleared]",
    "",
    "r\u{e9}sum\u{e9} \"quoted\" \\ \n\t",
    "\u{2028}\u{0}\u{1f600}",
    r#"{"not":"an object"}"#,
];

/// Summary elements, in the shape the fit writes them.
const SUMMARIES: [&str; 3] = [
    r#"{"role":"user","content":"s"}"#,
    r#"{"role":"user","content":"Earlier: \"a\" \u00e9\n\ud83d\ude00"}"#,
    r#"{"role":"user","content":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}]}"#,
];

// Behaviours this target found in the main crate, fixed there and now
// asserted: each switch set to `true` would skip its case narrowly again.

/// An element no turn is in (an Anthropic message whose content is `[]`)
/// was left out by every splice, even one that keeps every turn whole; it
/// is now a turn of its own, held to "kept as the caller wrote it".
const PARTLESS_MAY_GO: bool = false;

/// A spot said to be an object may be an array (a block or a tool written
/// as a JSON array, which serde's derived structs accept, as they accept a
/// whole request written as one) or the empty object `{}` (a tool): the
/// marking edit made invalid JSON (`[..,"cache_control":..]`,
/// `{,"cache_control":..}`). Arrays are now refused where objects belong,
/// and `{}` is marked without a comma.
const UNMARKABLE_SKIPPED: bool = false;

fn api_of(first: u8) -> Api {
    match first {
        b'c' => Api::Chat,
        b'm' => Api::Messages,
        b'r' => Api::Responses,
        b => [Api::Chat, Api::Messages, Api::Responses][usize::from(b % 3)],
    }
}

fn parse(api: Api, body: &str) -> Result<Parsed, Unfit> {
    match api {
        Api::Chat => chat::parse(body),
        Api::Messages => messages::parse(body),
        Api::Responses => responses::parse(body),
    }
}

/// The member of the top-level object that holds the list.
fn list_key(api: Api) -> &'static str {
    match api {
        Api::Responses => "input",
        Api::Chat | Api::Messages => "messages",
    }
}

/// A splice with no cache-marker edits.
fn splice(body: &str, parsed: &Parsed, fates: &[Fate], summary: Option<&str>) -> String {
    body::splice(body, parsed, fates, summary, &[])
}

fn run(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let Ok(body) = std::str::from_utf8(rest) else {
        return;
    };
    let api = api_of(first);
    let value: Option<Value> = serde_json::from_str(body).ok();
    if let Some(v @ Value::Object(_)) = &value {
        check_add_member(body, v);
    }
    let parsed = match parse(api, body) {
        Ok(p) => p,
        Err(e) => {
            note(|| format!("{} {e:?} (valid JSON: {})", api.as_str(), value.is_some()));
            return;
        }
    };
    check_spans(api, body, &parsed, value.as_ref());
    let pin = fit::newest(&parsed);
    assert!(
        pin <= parsed.turns.len(),
        "newest {pin} of {} turns",
        parsed.turns.len()
    );
    count_images(&parsed);
    note(|| {
        format!(
            "{} parsed: {} elements, {} turns, newest at {pin}, valid JSON: {}",
            api.as_str(),
            parsed.elements.len(),
            parsed.turns.len(),
            value.is_some()
        )
    });

    let n = parsed.turns.len();
    let mut rng = Rng::new(data);
    let whole = vec![
        Fate {
            kept: true,
            ..Fate::default()
        };
        n
    ];
    let case = value.as_ref().map(|v| Case::new(api, body, &parsed, v));
    let out = splice(body, &parsed, &whole, None);
    if let Some(case) = &case {
        case.check_splice(&whole, None, &out);
        case.check_whole(&out);
    }
    let mut plans: Vec<(Vec<Fate>, Option<&str>)> = Vec::new();
    for round in 0..4 {
        let fates = (0..n)
            .map(|t| Fate {
                // The third round keeps the pinned turns, as the fit does.
                kept: (round == 2 && t >= pin) || rng.below(4) != 0,
                cleared: (rng.below(3) == 0).then(|| CLEARED[rng.below(CLEARED.len())].to_owned()),
                thinking_dropped: rng.below(3) == 0,
            })
            .collect();
        let summary = (rng.below(2) == 0).then(|| SUMMARIES[rng.below(SUMMARIES.len())]);
        plans.push((fates, summary));
    }
    plans.push((vec![Fate::default(); n], Some(SUMMARIES[0])));
    let harsh = Fate {
        kept: true,
        cleared: Some(CLEARED[2].to_owned()),
        thinking_dropped: true,
    };
    plans.push((vec![harsh; n], Some(SUMMARIES[1])));
    for (fates, summary) in &plans {
        let out = splice(body, &parsed, fates, *summary);
        if let Some(case) = &case {
            case.check_splice(fates, *summary, &out);
        }
    }
    if api == Api::Messages {
        plans.push((whole, None));
        check_marks(body, &parsed, value.as_ref(), &plans);
    }
}

/// An "object" spot the marking edit cannot take.
fn unmarkable(text: &str) -> bool {
    text.starts_with('[')
        || text
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .is_some_and(|t| t.trim().is_empty())
}

/// The marker the cache-marking edits write.
const MARKER: &str = r#"{"type":"ephemeral"}"#;

/// Anthropic's places for cache markers: each spot lies inside the body on
/// character boundaries (an element's inside its element), is a string or
/// an object as it says and is marked exactly when its object has a
/// `cache_control`; marking every unmarked spot (edits sorted and apart, as
/// the fit makes them) gives valid JSON with the markers added and nothing
/// else changed, and so does each splice that marks, as the fit does, the
/// system prompt, the tools and the elements sent as the caller wrote them.
fn check_marks(body: &str, p: &Parsed, value: Option<&Value>, plans: &[(Vec<Fate>, Option<&str>)]) {
    let mut marks = p.marks.clone();
    assert_eq!(marks.elements.len(), p.elements.len(), "a spot per element");
    let mut edits: Vec<Edit> = Vec::new();
    let mut of_element: Vec<Option<Edit>> = vec![None; p.elements.len()];
    let elements = (marks.elements.iter_mut().enumerate()).filter_map(|(i, s)| Some((Some(i), s.as_mut()?)));
    let others = marks.system.iter_mut().chain(&mut marks.tools).map(|s| (None, s));
    for (element, spot) in others.chain(elements) {
        let r = &spot.span;
        assert!(
            on_chars(body, r) && !r.is_empty(),
            "spot {spot:?} in {} bytes",
            body.len()
        );
        if let Some(i) = element {
            assert!(inside(r, &p.elements[i].span), "element {i}'s spot {spot:?}");
        }
        let text = &body[r.clone()];
        if spot.text {
            assert!(text.starts_with('"'), "a string spot is {text:?}");
        } else if UNMARKABLE_SKIPPED && unmarkable(text) {
            // Not marked here, nor expected to be.
            spot.marked = true;
            continue;
        } else {
            assert!(
                text.starts_with('{') && text.ends_with('}'),
                "an object spot is {text:?}"
            );
        }
        if value.is_some() && !spot.text {
            let Value::Object(o) = json(text, "an object spot", body) else {
                unreachable!("an object's bytes start with a brace");
            };
            let has = o.get("cache_control").is_some_and(|c| !c.is_null());
            assert_eq!(spot.marked, has, "spot {spot:?}: {text}");
        }
        if !spot.marked {
            let edit = spot.mark(body, MARKER);
            match element {
                Some(i) => of_element[i] = Some(edit),
                None => edits.push(edit),
            }
        }
    }
    let fixed = edits.clone();
    edits.extend(of_element.iter().flatten().cloned());
    edits.sort_by_key(|(r, _)| (r.start, r.end));
    assert!(
        edits
            .windows(2)
            .all(|w| w[0].0.end <= w[1].0.start && w[0].0.start < w[1].0.start),
        "edits overlap: {edits:?}"
    );
    let out = body::edit(body, &edits);
    let Some(value) = value else {
        return;
    };
    let got = json(&out, "the marked body", body);
    let want = marked(value, &marks);
    if let Some(want) = &want {
        assert_eq!(&got, want, "marked: {out:?}\nbody: {body:?}");
    }

    for (fates, summary) in plans {
        // The fit marks an element only when every turn in it is sent as
        // the caller wrote it.
        let mut touched = vec![false; p.elements.len()];
        for (t, turn) in p.turns.iter().enumerate() {
            let f = &fates[t];
            if !f.kept || f.cleared.is_some() || f.thinking_dropped {
                for part in &turn.parts {
                    touched[part.element] = true;
                }
            }
        }
        let mut extra = fixed.clone();
        extra.extend(
            of_element
                .iter()
                .zip(&touched)
                .filter(|(_, t)| !**t)
                .filter_map(|(e, _)| e.clone()),
        );
        extra.sort_by_key(|(r, _)| (r.start, r.end));
        let out = body::splice(body, p, fates, *summary, &extra);
        let spliced = json(&out, "the marked splice", body);
        let (Value::Object(s), Some(Value::Object(w))) = (&spliced, &want) else {
            continue;
        };
        let (mut s, mut w) = (s.clone(), w.clone());
        s.remove("messages");
        w.remove("messages");
        assert_eq!(
            s, w,
            "a marked splice's members beside the list: {out:?}\nbody: {body:?}"
        );
    }
}

/// `value` with a marker on every unmarked spot, when the body's shape is
/// the documented one (objects all the way).
fn marked(value: &Value, marks: &Marks) -> Option<Value> {
    let marker = json(MARKER, "the marker", MARKER);
    let mut v = value.clone();
    let o = v.as_object_mut()?;
    if let Some(s) = &marks.system
        && !s.marked
    {
        mark_content(o.get_mut("system")?, &marker)?;
    }
    for (i, s) in marks.tools.iter().enumerate() {
        if !s.marked {
            let tool = o.get_mut("tools")?.get_mut(i)?.as_object_mut()?;
            tool.insert("cache_control".to_owned(), marker.clone());
        }
    }
    for (i, s) in marks.elements.iter().enumerate() {
        if let Some(s) = s
            && !s.marked
        {
            mark_content(o.get_mut("messages")?.get_mut(i)?.get_mut("content")?, &marker)?;
        }
    }
    Some(v)
}

/// A content with a marker: a string becomes one marked text block, the
/// last block of a list gets the marker.
fn mark_content(content: &mut Value, marker: &Value) -> Option<()> {
    match content {
        Value::String(s) => {
            let block = serde_json::json!({"type": "text", "text": s, "cache_control": marker});
            *content = Value::Array(vec![block]);
        }
        Value::Array(blocks) => {
            let last = blocks.last_mut()?.as_object_mut()?;
            last.insert("cache_control".to_owned(), marker.clone());
        }
        _ => return None,
    }
    Some(())
}

/// Every image of the request counted by every provider's rule, as the
/// fit counts them.
fn count_images(parsed: &Parsed) {
    for rule in [Media::OpenAi, Media::Anthropic, Media::Gemini] {
        let counted = parsed.media(rule, true);
        assert_eq!(counted.per_turn.len(), parsed.turns.len(), "a count per turn");
    }
}

fn json(text: &str, what: &str, body: &str) -> Value {
    match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => panic!("{what} is not JSON ({e}): {text:?}\nbody: {body:?}"),
    }
}

fn on_chars(body: &str, r: &Range<usize>) -> bool {
    r.start <= r.end && body.is_char_boundary(r.start) && body.is_char_boundary(r.end)
}

fn inside(r: &Range<usize>, outer: &Range<usize>) -> bool {
    outer.start <= r.start && r.start <= r.end && r.end <= outer.end
}

/// Ranges in increasing order, none overlapping the next.
fn in_order(ranges: &[Range<usize>]) -> bool {
    ranges.windows(2).all(|w| w[0].end <= w[1].start)
}

fn check_spans(api: Api, body: &str, p: &Parsed, value: Option<&Value>) {
    assert!(
        on_chars(body, &p.list),
        "list {:?} in {} bytes",
        p.list,
        body.len()
    );
    let spans: Vec<Range<usize>> = p.elements.iter().map(|e| e.span.clone()).collect();
    assert!(in_order(&spans), "elements out of order: {spans:?}");
    let fixed = p.elements.iter().take_while(|e| e.fixed).count();
    assert!(
        p.elements[fixed..].iter().all(|e| !e.fixed),
        "a fixed element after a turn: {:?}",
        p.elements
    );
    for (i, e) in p.elements.iter().enumerate() {
        assert!(
            inside(&e.span, &p.list) && on_chars(body, &e.span) && !e.span.is_empty(),
            "element {i} at {:?}, list at {:?}",
            e.span,
            p.list
        );
        if let Some(b) = &e.blocks {
            assert!(
                inside(&b.span, &e.span) && on_chars(body, &b.span),
                "element {i}'s blocks at {:?}, element at {:?}",
                b.span,
                e.span
            );
            assert!(
                in_order(&b.items),
                "element {i}'s blocks out of order: {:?}",
                b.items
            );
            for r in &b.items {
                assert!(
                    inside(r, &b.span) && on_chars(body, r) && !r.is_empty(),
                    "element {i}'s block at {r:?}, blocks at {:?}",
                    b.span
                );
            }
        }
    }
    let mut claimed: Vec<(usize, Option<usize>)> = Vec::new();
    for (t, turn) in p.turns.iter().enumerate() {
        for part in &turn.parts {
            let Some(e) = p.elements.get(part.element) else {
                panic!("turn {t}'s part {part:?} of {} elements", p.elements.len());
            };
            assert!(!e.fixed, "turn {t}'s part {part:?} is in a fixed element");
            if let Some(b) = part.block {
                let n = e.blocks.as_ref().map_or(0, |bs| bs.items.len());
                assert!(b < n, "turn {t}'s part {part:?}: its element has {n} blocks");
            }
            claimed.push((part.element, part.block));
        }
        if let Some(c) = &turn.clear {
            assert!(
                on_chars(body, c),
                "turn {t}'s clear {c:?} in {} bytes",
                body.len()
            );
            assert!(
                turn.parts.iter().any(|&pt| inside(c, &part_span(p, pt))),
                "turn {t}'s clear {c:?} lies in none of its parts {:?}",
                turn.parts
            );
        }
    }
    let n = claimed.len();
    claimed.sort_unstable();
    claimed.dedup();
    assert_eq!(claimed.len(), n, "a part is claimed by two turns");
    for e in 0..p.elements.len() {
        let mut on = claimed.iter().filter(|c| c.0 == e);
        let whole = on.clone().any(|c| c.1.is_none());
        assert!(
            !whole || on.all(|c| c.1.is_none()),
            "element {e} is claimed whole and by block"
        );
    }

    let Some(value) = value else {
        return;
    };
    // On valid JSON, each span is the value it stands for.
    let list = json(&body[p.list.clone()], "the list", body);
    let items: Vec<Value> = match &list {
        Value::Array(a) => a.clone(),
        s @ Value::String(_) => vec![s.clone()],
        other => panic!("the list is {other}"),
    };
    assert_eq!(items.len(), p.elements.len(), "elements of {list}");
    for (i, (e, want)) in p.elements.iter().zip(&items).enumerate() {
        let got = json(&body[e.span.clone()], "an element", body);
        assert_eq!(&got, want, "element {i}");
        if let Some(b) = &e.blocks {
            let Value::Array(blocks) = json(&body[b.span.clone()], "a content array", body) else {
                panic!("element {i}'s blocks are not an array");
            };
            assert_eq!(blocks.len(), b.items.len(), "element {i}'s blocks");
            for (r, want) in b.items.iter().zip(&blocks) {
                assert_eq!(&json(&body[r.clone()], "a block", body), want, "element {i}");
            }
        }
    }
    for turn in &p.turns {
        if let Some(c) = &turn.clear {
            json(&body[c.clone()], "a cleared value", body);
        }
    }
    if let Value::Object(o) = value {
        assert_eq!(o.get(list_key(api)), Some(&list), "the list member");
    }
}

/// The bytes of a part: its block, or its whole element.
fn part_span(p: &Parsed, part: Part) -> Range<usize> {
    let e = &p.elements[part.element];
    match (part.block, &e.blocks) {
        (Some(b), Some(bs)) => bs.items[b].clone(),
        _ => e.span.clone(),
    }
}

/// `add_member` on a valid object: valid, the member added, the rest equal.
fn check_add_member(body: &str, value: &Value) {
    let out = body::add_member(body, "prompt_cache_key", "\"k\"");
    let got = json(&out, "the body with a member added", body);
    let mut want = value.clone();
    if let Value::Object(o) = &mut want {
        o.insert("prompt_cache_key".to_owned(), Value::String("k".to_owned()));
    }
    assert_eq!(got, want, "add_member: {out:?}\nbody: {body:?}");
}

/// The list of a splice's output (the bytes between the caller's).
fn spliced_list<'a>(body: &str, p: &Parsed, out: &'a str) -> &'a str {
    let (head, tail) = (&body[..p.list.start], &body[p.list.end..]);
    assert!(
        out.len() >= head.len() + tail.len() && out.starts_with(head) && out.ends_with(tail),
        "the bytes outside the list changed: {out:?}\nbody: {body:?}"
    );
    &out[head.len()..out.len() - tail.len()]
}

/// A parsed body that is valid JSON, with what every splice of it is
/// checked against.
struct Case<'a> {
    api: Api,
    body: &'a str,
    p: &'a Parsed,
    value: &'a Value,
    /// Each element's value.
    elements: Vec<Value>,
    /// The parts in each element, with their turns.
    parts: Vec<Vec<(usize, Part)>>,
}

/// What a spliced element is held to.
#[derive(Debug)]
enum Want<'v> {
    /// The caller's value (a fixed element, the summary).
    Exact(&'v Value),
    /// A kept element: the caller's value but for what `Expect` allows.
    Kept(&'v Value, Expect),
    /// An element no turn is in: the caller's value, or (with
    /// [`PARTLESS_MAY_GO`]) absent.
    Partless(&'v Value),
}

impl<'a> Case<'a> {
    fn new(api: Api, body: &'a str, p: &'a Parsed, value: &'a Value) -> Case<'a> {
        let elements = p
            .elements
            .iter()
            .map(|e| json(&body[e.span.clone()], "an element", body))
            .collect();
        let mut parts = vec![Vec::new(); p.elements.len()];
        for (t, turn) in p.turns.iter().enumerate() {
            for &part in &turn.parts {
                parts[part.element].push((t, part));
            }
        }
        Case {
            api,
            body,
            p,
            value,
            elements,
            parts,
        }
    }

    /// Keeping every turn whole changes nothing: the list's value is the
    /// caller's (a Responses string input becomes a list of that string).
    fn check_whole(&self, out: &str) {
        let (body, p) = (self.body, self.p);
        let new = json(spliced_list(body, p, out), "the spliced list", body);
        match json(&body[p.list.clone()], "the list", body) {
            s @ Value::String(_) => assert_eq!(new, Value::Array(vec![s]), "every turn kept whole: {out:?}"),
            list if PARTLESS_MAY_GO && new != list => {
                let rest: Vec<Value> = (self.elements.iter().zip(&self.parts))
                    .zip(&p.elements)
                    .filter(|((_, parts), e)| e.fixed || !parts.is_empty())
                    .map(|((v, _), _)| v.clone())
                    .collect();
                assert_eq!(
                    new,
                    Value::Array(rest),
                    "every turn kept whole: {out:?}\nbody: {body:?}"
                );
            }
            list => {
                assert_eq!(new, list, "every turn kept whole: {out:?}\nbody: {body:?}");
                let got = json(out, "the spliced body", body);
                assert_eq!(&got, self.value, "every turn kept whole: {out:?}\nbody: {body:?}");
            }
        }
    }

    fn check_splice(&self, fates: &[Fate], summary: Option<&str>, out: &str) {
        let (body, p) = (self.body, self.p);
        let new = spliced_list(body, p, out);
        let got = json(out, "the spliced body", body);
        // The members beside the list are the caller's.
        if let (Value::Object(g), Value::Object(v)) = (&got, self.value) {
            let key = list_key(self.api);
            let (mut g, mut v) = (g.clone(), v.clone());
            assert!(v.remove(key).is_some(), "no {key} member");
            assert!(
                g.remove(key).is_some(),
                "no {key} member after the splice: {out:?}"
            );
            assert_eq!(g, v, "members beside the list changed: {out:?}\nbody: {body:?}");
        }
        let Value::Array(new) = json(new, "the spliced list", body) else {
            panic!("the spliced list is not an array: {out:?}");
        };

        // What each element should be, from the fates.
        let stays =
            |&(t, part): &(usize, Part)| fates[t].kept && !(part.thinking && fates[t].thinking_dropped);
        let mut want: Vec<Want<'_>> = Vec::new();
        let summary = summary.map(|s| json(s, "the summary", body));
        let fixed = p.elements.iter().take_while(|e| e.fixed).count();
        for (i, e) in p.elements.iter().enumerate() {
            if i == fixed
                && let Some(s) = &summary
            {
                want.push(Want::Exact(s));
            }
            let original = &self.elements[i];
            if e.fixed {
                want.push(Want::Exact(original));
                continue;
            }
            let parts = &self.parts[i];
            if parts.is_empty() {
                want.push(Want::Partless(original));
                continue;
            }
            if !parts.iter().any(stays) {
                continue;
            }
            let texts: Vec<String> = parts
                .iter()
                .filter(|pt| stays(pt))
                .filter_map(|&(t, _)| {
                    let clear = p.turns[t].clear.as_ref()?;
                    let text = fates[t].cleared.clone()?;
                    inside(clear, &e.span).then_some(text)
                })
                .collect();
            let shrink = e.blocks.as_ref().and_then(|bs| {
                if !parts.iter().any(|(_, pt)| pt.block.is_some()) {
                    return None;
                }
                let kept = (0..bs.items.len())
                    .filter(|&b| {
                        let mut on = parts.iter().filter(|(_, pt)| pt.block == Some(b)).peekable();
                        on.peek().is_none() || on.any(stays)
                    })
                    .count();
                (kept < bs.items.len()).then_some((bs.items.len(), kept))
            });
            want.push(Want::Kept(original, Expect { texts, shrink }));
        }
        if fixed == p.elements.len()
            && let Some(s) = &summary
        {
            want.push(Want::Exact(s));
        }
        let context = || format!("{out:?}\nbody: {body:?}\nfates: {fates:?}");
        let mut spliced = new.iter().enumerate().peekable();
        for w in &want {
            if let Want::Partless(v) = w
                && PARTLESS_MAY_GO
                && spliced.peek().is_none_or(|(_, g)| g != v)
            {
                continue;
            }
            let Some((k, got)) = spliced.next() else {
                panic!(
                    "{} elements spliced, expected {w:?} after them: {}",
                    new.len(),
                    context()
                );
            };
            let ok = match w {
                Want::Exact(v) | Want::Partless(v) => got == *v,
                Want::Kept(v, Expect { texts, shrink }) => {
                    let mut shrunk = false;
                    relaxed(got, v, texts, *shrink, &mut shrunk) && shrunk == shrink.is_some()
                }
            };
            assert!(ok, "spliced element {k} is {got}, expected {w:?}: {}", context());
        }
        if let Some((k, got)) = spliced.next() {
            panic!("spliced element {k} ({got}) is not expected: {}", context());
        }
        if let v @ Value::Object(_) = &got {
            check_add_member(out, v);
        }
    }
}

/// How a kept element may differ from the caller's: values cleared to one
/// of `texts`, and its content array cut from `.0` blocks to `.1`.
#[derive(Debug)]
struct Expect {
    texts: Vec<String>,
    shrink: Option<(usize, usize)>,
}

/// `got` equals `want` but for values replaced by one of `texts`, and one
/// array of `shrink.0` values cut to a subsequence of `shrink.1` (noted in
/// `shrunk`).
fn relaxed(
    got: &Value,
    want: &Value,
    texts: &[String],
    shrink: Option<(usize, usize)>,
    shrunk: &mut bool,
) -> bool {
    if got == want {
        return true;
    }
    if let Value::String(s) = got
        && texts.contains(s)
    {
        return true;
    }
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            g.len() == w.len()
                && g.iter()
                    .all(|(k, v)| w.get(k).is_some_and(|x| relaxed(v, x, texts, shrink, shrunk)))
        }
        (Value::Array(g), Value::Array(w)) if g.len() == w.len() => {
            g.iter().zip(w).all(|(a, b)| relaxed(a, b, texts, shrink, shrunk))
        }
        (Value::Array(g), Value::Array(w)) if !*shrunk && shrink == Some((w.len(), g.len())) => {
            *shrunk = true;
            // A subsequence: each kept block matches the next original
            // one it can (greedy is exact for a subsequence test).
            let mut rest = w.iter();
            g.iter()
                .all(|a| rest.by_ref().any(|b| relaxed(a, b, texts, None, &mut false)))
        }
        _ => false,
    }
}

/// A small deterministic generator seeded by the input (FNV-1a, then
/// splitmix64).
struct Rng(u64);

impl Rng {
    fn new(data: &[u8]) -> Rng {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in data {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Rng(h)
    }

    fn step(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.step() % n as u64) as usize
    }
}
