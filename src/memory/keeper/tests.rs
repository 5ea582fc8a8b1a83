use proptest::prelude::*;

use super::*;
use crate::memory::model::{
    Field, FieldRole, MemoryBody, MemoryId, Observation, SessionSummary, Text, TextMut,
};

#[test]
fn dates_are_civil_utc() {
    assert_eq!(date(0), "1970-01-01");
    assert_eq!(date(951_782_400_000), "2000-02-29");
    assert_eq!(date(1_795_000_000_000), "2026-11-18");
    assert_eq!(date(-86_400_000), "1969-12-31");
}

#[test]
fn item_ids_round_trip() {
    let id = MemoryId::parse("0123456789abcdef0123456789abcdef");
    assert_eq!(id.as_ref().and_then(|id| memory_id(&item_id(id))), id);
    assert_eq!(memory_id("doc-1"), None);
}

// ------------------------------------------------------------ private

/// How a memory reaches Retain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `observations` or `summaries`: the body as given.
    Structured,
    /// `model_output`: the body written as a block of model output.
    ModelOutput,
}

/// An observation or a summary with a plain value in every field (a list
/// holding two), none of them holding `SECRET`.
fn full_body(summary: bool) -> MemoryBody {
    let mut body = if summary {
        MemoryBody::Summary(SessionSummary::default())
    } else {
        MemoryBody::Observation(Observation::default())
    };
    body.fields_mut(|field, value| match value {
        TextMut::One(s) if field.role == FieldRole::Type => *s = "decision".to_owned(),
        TextMut::One(s) => *s = format!("plain {}", field.name),
        TextMut::List(l) => {
            *l = vec![
                format!("plain {} one", field.name),
                format!("plain {} two", field.name),
            ]
        }
    });
    body
}

/// Every place a span can go: each field of the body, each entry of a list.
fn places(body: &MemoryBody) -> Vec<(Field, usize, usize)> {
    let mut out = Vec::new();
    let mut index = 0;
    body.fields(|field, value| {
        for entry in 0..value.strings().count() {
            out.push((field, index, entry));
        }
        index += 1;
    });
    out
}

/// `body` with `span` put `at` bytes (clipped) into entry `entry` of its
/// field number `index`.
fn with_span(mut body: MemoryBody, index: usize, entry: usize, at: usize, span: &str) -> MemoryBody {
    let mut i = 0;
    body.fields_mut(|_, value| {
        if i == index
            && let Some(s) = value.strings().nth(entry)
        {
            let at = at.min(s.len());
            s.insert_str(at, span);
        }
        i += 1;
    });
    body
}

/// `body` as a block of model output, each field an element of its name
/// and each list entry an `<item>`.
fn as_model_output(body: &MemoryBody) -> String {
    let element = match body {
        MemoryBody::Observation(_) => "observation",
        MemoryBody::Summary(_) => "summary",
    };
    let mut out = format!("Done.\n<{element}>");
    body.fields(|field, value| {
        out.push_str(&format!("<{}>", field.name));
        match value {
            Text::One(s) => out.push_str(s),
            Text::List(l) => l.iter().for_each(|e| out.push_str(&format!("<item>{e}</item>"))),
        }
        out.push_str(&format!("</{}>", field.name));
    });
    out.push_str(&format!("</{element}>"));
    out
}

fn retain_input(form: Form, body: MemoryBody) -> RetainInput {
    let mut input = RetainInput {
        key: "k".to_owned(),
        subject: "s".to_owned(),
        request_id: "r".to_owned(),
        ..RetainInput::default()
    };
    match (form, body) {
        (Form::ModelOutput, body) => input.model_output = as_model_output(&body),
        (Form::Structured, MemoryBody::Observation(o)) => input.observations.push(o),
        (Form::Structured, MemoryBody::Summary(s)) => input.summaries.push(s),
    }
    input
}

/// Everything a prepared Retain would write (the rows' title and body
/// columns besides the content) or report.
fn written(prepared: &PreparedRetain) -> String {
    let mut out = format!("{prepared:?}");
    for m in &prepared.batch.memories {
        out.push_str(&m.content.title());
        out.push_str(&m.content.body());
        out.push_str(&serde_json::to_string(&m.content).unwrap_or_default());
    }
    out
}

proptest! {
    /// Whatever field of whatever input form a `<private>` span is put in
    /// (an observation's title among them), nothing of it is written or
    /// reported, and it is counted once. The places come from the walk of
    /// a body's fields, so a field added later is covered too. A span in a
    /// structured observation's type is refused with the type, not stored.
    #[test]
    fn a_private_span_in_any_field_of_any_form_is_never_written(
        hidden in "[A-Za-z0-9 .,;:!?&'\"=/-]{0,24}",
        at in 0usize..32,
        attributes in prop::sample::select(vec!["", " reason=\"pin\"", " "]),
    ) {
        let memories = Memories::connecting(MemorySettings::default());
        let span = format!("<private{attributes}>SECRET{hidden}</private>");
        for form in [Form::Structured, Form::ModelOutput] {
            for summary in [false, true] {
                let plain = full_body(summary);
                for (field, index, entry) in places(&plain) {
                    let body = with_span(plain.clone(), index, entry, at, &span);
                    let place = format!("{form:?} {} entry {entry} at {at}", field.name);
                    match memories.prepare_retain(retain_input(form, body), 0) {
                        Ok(prepared) => {
                            let written = written(&prepared);
                            prop_assert!(!written.contains("SECRET"), "{place}: {written}");
                            prop_assert_eq!(prepared.private_spans, 1, "{}", place);
                            prop_assert_eq!(prepared.batch.memories.len(), 1, "{}", place);
                        }
                        Err(e) => {
                            prop_assert!(
                                form == Form::Structured && field.role == FieldRole::Type,
                                "{place}: {e:?}"
                            );
                            prop_assert!(!format!("{e:?}").contains("SECRET"), "{place}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn every_field_of_both_bodies_is_a_place_for_a_span() {
    let names = |summary| -> Vec<&str> {
        places(&full_body(summary))
            .into_iter()
            .filter(|(_, _, entry)| *entry == 0)
            .map(|(field, _, _)| field.name)
            .collect()
    };
    assert_eq!(
        names(false),
        ["type", "title", "text", "facts", "files_read", "files_modified"]
    );
    assert_eq!(
        names(true),
        [
            "request",
            "investigated",
            "learned",
            "completed",
            "next_steps",
            "files_read",
            "files_edited",
            "notes"
        ]
    );
}

#[test]
fn a_private_span_in_a_structured_title_is_removed_and_the_rest_kept() {
    let memories = Memories::connecting(MemorySettings::default());
    let input = RetainInput {
        key: "k".to_owned(),
        subject: "s".to_owned(),
        observations: vec![Observation {
            kind: "decision".to_owned(),
            title: "Rotate <private>the key is hunter2</private>keys weekly".to_owned(),
            text: "Keys are rotated.".to_owned(),
            ..Observation::default()
        }],
        ..RetainInput::default()
    };
    let prepared = memories.prepare_retain(input, 0);
    let Ok(prepared) = prepared else {
        panic!("{prepared:?}");
    };
    assert_eq!(prepared.private_spans, 1);
    let [memory] = &prepared.batch.memories[..] else {
        panic!("{prepared:?}");
    };
    assert_eq!(memory.content.title(), "Rotate keys weekly");
    assert!(!written(&prepared).contains("hunter2"));
}
