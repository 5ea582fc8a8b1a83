#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::fields::decode;
use super::*;
use crate::memory::model::{BUILTIN_TYPES, Observation, SessionSummary};

/// The generator of fields holding code, shared with the server round trip
/// of `tests/stores/memory_parse.rs`.
mod code_fields;
use code_fields::code_observation;
use code_fields::field_oracle::escape;

const MIB: usize = 1 << 20;

fn types() -> Vec<String> {
    BUILTIN_TYPES.iter().map(|t| t.to_string()).collect()
}

fn parse(text: &str) -> Parsed {
    parse_model_output(text, &types())
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Every byte a caller could see: parsed contents and problem reasons.
fn visible(parsed: &Parsed) -> String {
    let mut out =
        serde_json::to_string(&parsed.blocks.iter().map(|b| &b.content).collect::<Vec<_>>()).unwrap();
    for p in &parsed.problems {
        out.push_str(&p.reason);
    }
    out
}

/// Every block and problem offset points at its element's `<` in `text`.
fn assert_offsets(text: &str, parsed: &Parsed) {
    let all = parsed
        .blocks
        .iter()
        .map(|b| (b.element, b.offset))
        .chain(parsed.problems.iter().map(|p| (p.element, p.offset)));
    for (element, offset) in all {
        let open = format!("<{}", element.as_str());
        assert!(
            text.get(offset..).is_some_and(|t| t.starts_with(&open)),
            "offset {offset} is not at {open}"
        );
    }
}

fn render(o: &Observation) -> String {
    let list = |tag: &str, item: &str, values: &[String]| {
        let items: String = values
            .iter()
            .map(|v| format!("<{item}>{}</{item}>", escape(v)))
            .collect();
        format!("<{tag}>{items}</{tag}>")
    };
    format!(
        "<observation>\n  <type>{}</type>\n  <title>{}</title>\n  <text>{}</text>\n  {}\n  {}\n  {}\n</observation>",
        escape(&o.kind),
        escape(&o.title),
        escape(&o.text),
        list("facts", "fact", &o.facts),
        list("files_read", "file", &o.files_read),
        list("files_modified", "file", &o.files_modified),
    )
}

fn trimmed(o: &Observation) -> Observation {
    let list = |v: &[String]| v.iter().map(|s| s.trim().to_string()).collect();
    Observation {
        kind: o.kind.clone(),
        title: o.title.trim().to_string(),
        text: o.text.trim().to_string(),
        facts: list(&o.facts),
        files_read: list(&o.files_read),
        files_modified: list(&o.files_modified),
    }
}

/// The one block `text` holds, parsed without a problem: its element and
/// content.
fn only_block(text: &str) -> (Element, MemoryBody) {
    let parsed = parse(text);
    assert_eq!(parsed.problems, vec![]);
    assert_eq!(parsed.blocks.len(), 1, "{:?}", parsed.blocks);
    let block = parsed.blocks.into_iter().next().unwrap();
    (block.element, block.content)
}

// ------------------------------------------------------ the documented formats

#[test]
fn seed_observation_parses() {
    let text = "<observation>\n<type>feature</type>\n<text>Implemented JWT token refresh flow with 7-day \
                expiry</text>\n</observation>";
    let parsed = parse(text);
    assert_eq!(parsed.problems, vec![]);
    assert_eq!(
        parsed.blocks,
        vec![ParsedBlock {
            element: Element::Observation,
            index: 0,
            offset: 0,
            content: MemoryBody::Observation(Observation {
                kind: "feature".into(),
                text: "Implemented JWT token refresh flow with 7-day expiry".into(),
                ..Observation::default()
            }),
        }]
    );
}

#[test]
fn seed_summary_parses_all_eight_fields() {
    let text = r#"<summary>
<request>Implement JWT authentication system</request>
<investigated>Existing auth middleware, session management, token storage patterns</investigated>
<learned>Current system uses session cookies; no JWT support; race condition in middleware</learned>
<completed>Implemented JWT token + refresh flow with 7-day expiry; fixed race condition with mutex; added token validation middleware</completed>
<next_steps>Add token revocation API endpoint; write integration tests</next_steps>
<files_read>
<file>src/auth.ts</file>
<file>src/middleware/session.ts</file>
<file>src/types/user.ts</file>
</files_read>
<files_edited>
<file>src/auth.ts</file>
<file>src/middleware/auth.ts</file>
<file>src/routes/auth.ts</file>
</files_edited>
<notes>Token secret stored in .env; refresh tokens use rotation strategy</notes>
</summary>"#;
    let expected = MemoryBody::Summary(SessionSummary {
        request: "Implement JWT authentication system".into(),
        investigated: "Existing auth middleware, session management, token storage patterns".into(),
        learned: "Current system uses session cookies; no JWT support; race condition in middleware".into(),
        completed:
            "Implemented JWT token + refresh flow with 7-day expiry; fixed race condition with mutex; \
                    added token validation middleware"
                .into(),
        next_steps: "Add token revocation API endpoint; write integration tests".into(),
        files_read: strings(&["src/auth.ts", "src/middleware/session.ts", "src/types/user.ts"]),
        files_edited: strings(&["src/auth.ts", "src/middleware/auth.ts", "src/routes/auth.ts"]),
        notes: "Token secret stored in .env; refresh tokens use rotation strategy".into(),
    });
    assert_eq!(only_block(text), (Element::Summary, expected));
}

#[test]
fn rich_observation_form_parses_with_aliases_and_ignored_children() {
    let text = "<observation>
  <type> Discovery </type>
  <title>Cache keys</title>
  <subtitle>ignored</subtitle>
  <text>Keys hash the prefix.</text>
  <narrative><![CDATA[It uses <blake3> & more.]]></narrative>
  <facts><fact>one</fact><fact>   </fact><fact> two </fact></facts>
  <concepts><concept>ignored</concept></concepts>
  <files_read>
    a.rs
    c.rs
  </files_read>
  <files_edited><file>b.rs</file></files_edited>
  <unknown>whatever</unknown>
</observation>";
    let expected = MemoryBody::Observation(Observation {
        kind: "discovery".into(),
        title: "Cache keys".into(),
        text: "Keys hash the prefix.\nIt uses <blake3> & more.".into(),
        facts: strings(&["one", "two"]),
        files_read: strings(&["a.rs", "c.rs"]),
        files_modified: strings(&["b.rs"]),
    });
    assert_eq!(only_block(text), (Element::Observation, expected));
}

// ------------------------------------------------------------ placement

#[test]
fn blocks_among_prose_and_fences_keep_order_index_and_offset() {
    let text = "Reasoning first, with a < b.\n```xml\n<observation>\n<type>feature</type>\n<text>A</text>\n\
                </observation>\n```\nthen <summary><request>R</request></summary> and é€ \
                <observation type=\"x\"><type>bugfix</type><text>B</text></observation> done";
    let parsed = parse(text);
    assert_eq!(parsed.problems, vec![]);
    let got: Vec<(Element, u32, usize)> = parsed
        .blocks
        .iter()
        .map(|b| (b.element, b.index, b.offset))
        .collect();
    let first = text.find("<observation>").unwrap();
    let second = text.find("<summary>").unwrap();
    let third = text.rfind("<observation").unwrap();
    assert_eq!(
        got,
        vec![
            (Element::Observation, 0, first),
            (Element::Summary, 1, second),
            (Element::Observation, 2, third)
        ]
    );
    assert_eq!(parsed.blocks[2].content.memory_type(), "bugfix");
    assert_eq!(parsed.blocks[1].content.title(), "R");
    assert_offsets(text, &parsed);
}

#[test]
fn no_blocks_means_nothing_parsed() {
    let parsed = parse("Nothing worth storing here. <observations> are plural, <summary_of> is another tag.");
    assert_eq!(parsed, Parsed::default());
}

#[test]
fn a_block_without_text_is_one_problem_between_good_blocks() {
    let text = "<observation><type>feature</type><text>good one</text></observation>\n\
                <observation><type>bugfix</type><title></title><facts>secret fact</facts></observation>\n\
                <summary><request>good two</request></summary>";
    let parsed = parse(text);
    assert_eq!(
        parsed.blocks.iter().map(|b| b.index).collect::<Vec<_>>(),
        vec![0, 2]
    );
    assert_eq!(parsed.problems.len(), 1);
    let problem = &parsed.problems[0];
    assert_eq!((problem.element, problem.index), (Element::Observation, 1));
    assert_eq!(problem.reason, "observation has no text");
    assert_offsets(text, &parsed);
}

#[test]
fn unterminated_block_is_reported_and_later_blocks_still_parse() {
    let text = "<summary><request>cut off\n<observation><type>decision</type><text>kept</text></observation>\
                <observation";
    let parsed = parse(text);
    let problems: Vec<(u32, &str)> = parsed
        .problems
        .iter()
        .map(|p| (p.index, p.reason.as_str()))
        .collect();
    assert_eq!(
        problems,
        vec![(0, "unterminated <summary>"), (2, "unterminated <observation>")]
    );
    assert_eq!(parsed.blocks.len(), 1);
    assert_eq!(parsed.blocks[0].index, 1);
    assert_eq!(parsed.blocks[0].content.body(), "kept");
    assert_offsets(text, &parsed);
}

#[test]
fn self_closing_block_is_an_empty_block() {
    let parsed =
        parse("<observation/> <summary /> <observation><type>refactor</type><text>t</text></observation>");
    let reasons: Vec<&str> = parsed.problems.iter().map(|p| p.reason.as_str()).collect();
    assert_eq!(reasons, vec!["observation has no type", "summary is empty"]);
    assert_eq!(parsed.blocks.len(), 1);
    assert_eq!(parsed.blocks[0].index, 2);
}

// ------------------------------------------------------------ content rules

#[test]
fn unknown_type_is_a_problem_that_does_not_echo_it() {
    let parsed = parse("<observation><type>Zebrafish</type><text>t</text></observation>");
    assert_eq!(parsed.blocks, vec![]);
    assert_eq!(parsed.problems.len(), 1);
    let reason = &parsed.problems[0].reason;
    assert!(reason.starts_with("unknown observation type"), "{reason}");
    assert!(!reason.to_lowercase().contains("zebrafish"), "{reason}");
}

#[test]
fn configured_types_are_matched_trimmed_and_case_insensitively() {
    let parsed = parse_model_output(
        "<observation><type>INCIDENT</type><text>t</text></observation>",
        &strings(&[" Incident "]),
    );
    assert_eq!(parsed.problems, vec![]);
    assert_eq!(parsed.blocks[0].content.memory_type(), "incident");
}

#[test]
fn observation_without_text_or_type_is_a_problem() {
    let text = "<observation><type>feature</type><text>  </text><narrative/></observation>\
                <observation><text>no type</text></observation>\
                <observation><type>feature</type><title>Title only</title></observation>";
    let parsed = parse(text);
    let reasons: Vec<&str> = parsed.problems.iter().map(|p| p.reason.as_str()).collect();
    assert_eq!(
        reasons,
        vec!["observation has no text", "observation has no type"]
    );
    assert_eq!(parsed.blocks.len(), 1);
    assert_eq!(parsed.blocks[0].content.title(), "Title only");
}

#[test]
fn empty_summary_is_a_problem() {
    let text = "<summary><request> </request><files_read><file>a.rs</file></files_read><notes/></summary>";
    let parsed = parse(text);
    assert_eq!(parsed.blocks, vec![]);
    assert_eq!(parsed.problems.len(), 1);
    assert_eq!(parsed.problems[0].reason, "summary is empty");
}

#[test]
fn nested_observation_is_a_problem() {
    let text = "<observation><type>feature</type><text>outer</text>\
                <observation><type>bugfix</type><text>inner</text></observation></observation>\
                <observation><type>bugfix</type><text>after</text></observation>";
    let parsed = parse(text);
    assert_eq!(parsed.problems.len(), 1);
    assert_eq!(parsed.problems[0].reason, "nested <observation>");
    assert_eq!(parsed.problems[0].offset, 0);
    assert_eq!(parsed.blocks.len(), 1);
    assert_eq!(
        (parsed.blocks[0].index, parsed.blocks[0].content.body()),
        (1, "after".to_string())
    );

    let parsed = parse("<summary><request>r</request><summary><notes>n</notes></summary></summary>");
    assert_eq!(parsed.problems.len(), 1);
    assert_eq!(parsed.problems[0].reason, "nested <summary>");
}

// ------------------------------------------------------------ repair and attacks

#[test]
fn bare_lt_and_amp_in_text_are_repaired() {
    let text =
        "<observation><type>bugfix</type><text>a < b && c &amp; d &#65;&#x42; & <= 3</text></observation>";
    let parsed = parse(text);
    assert_eq!(parsed.problems, vec![]);
    let MemoryBody::Observation(o) = &parsed.blocks[0].content else {
        panic!("not an observation")
    };
    assert_eq!(o.text, "a < b && c & d AB & <= 3");
}

#[test]
fn decode_borrows_plain_text_and_keeps_what_is_not_a_reference() {
    let m = Meter::default();
    assert!(matches!(decode("<a>plain</a> & <", &m), Cow::Borrowed(_)));
    assert_eq!(
        decode("&#; &#x; &; &1a; &a.b-c; &#1; &#xA;", &m),
        "&#; &#x; &; &1a; &a.b-c; &#1; \n"
    );
    assert_eq!(decode("<![CDATA[ & < ]]> & <![CDATA[", &m), " & <  & <![CDATA[");
}

#[test]
fn entity_expansion_is_refused_not_expanded() {
    let mut dtd = String::from("<!DOCTYPE lolz [<!ENTITY lol \"lol\">");
    for level in 2..=9 {
        let refs = format!(
            "&lol{};",
            if level == 2 {
                String::new()
            } else {
                (level - 1).to_string()
            }
        );
        dtd.push_str(&format!("<!ENTITY lol{level} \"{}\">", refs.repeat(10)));
    }
    dtd.push_str("]>");
    let text = format!("<observation>{dtd}<type>feature</type><text>&lol9;</text></observation>");
    let parsed = parse(&text);
    assert_eq!(parsed.problems, vec![]);
    assert_eq!(parsed.blocks[0].content.body(), "&lol9;");
}

#[test]
fn undefined_entity_is_kept_verbatim() {
    let parsed = parse("<observation><type>feature</type><text>x &foo; y</text></observation>");
    assert_eq!(parsed.problems, vec![]);
    assert_eq!(parsed.blocks[0].content.body(), "x &foo; y");
}

// ------------------------------------------------------------ bounds

#[test]
fn more_than_max_blocks_is_reported_once() {
    let one = "<observation><type>feature</type><text>t</text></observation>\n";
    let text = one.repeat(MAX_BLOCKS + 5);
    let parsed = parse(&text);
    assert_eq!(parsed.blocks.len(), MAX_BLOCKS);
    assert_eq!(parsed.problems.len(), 1);
    let problem = &parsed.problems[0];
    assert_eq!(
        problem.reason,
        format!("more than {MAX_BLOCKS} blocks; the rest were ignored")
    );
    assert_eq!(problem.index as usize, MAX_BLOCKS);
    assert_eq!(problem.offset, one.len() * MAX_BLOCKS);
    assert_offsets(&text, &parsed);
}

#[test]
fn deep_nesting_inside_a_field_is_text() {
    let deep = 200_000;
    let inner = format!("{}x{}", "<a>".repeat(deep), "</a>".repeat(deep));
    let text = format!("<observation><type>feature</type><text>{inner}</text></observation>");
    let parsed = parse(&text);
    assert_eq!(parsed.problems, vec![]);
    assert_eq!(parsed.blocks[0].content.body(), inner);

    let nested = format!("{}{}", "<summary>".repeat(deep), "</summary>".repeat(deep));
    let parsed = parse(&nested);
    assert_eq!((parsed.blocks.len(), parsed.problems.len()), (0, 1));
    assert_eq!(parsed.problems[0].reason, "nested <summary>");
}

#[test]
fn four_mib_of_unterminated_opens_finishes() {
    for open in [
        "<observation>",
        "<observation ",
        "<summary/",
        "<private>",
        "<private ",
    ] {
        let text = open.repeat(4 * MIB / open.len());
        let parsed = parse(&text);
        assert!(parsed.blocks.is_empty());
        assert!(parsed.problems.len() <= MAX_BLOCKS + 1);
    }
    let parsed = parse(&"<observation>".repeat(4 * MIB / 13));
    assert_eq!(parsed.problems.len(), MAX_BLOCKS + 1);
    assert_eq!(parsed.problems[0].reason, "unterminated <observation>");
}

/// Hostile inputs of `n` bytes: full of `<`, of tags left open (blocks,
/// fields, items, private spans), of closers that close nothing, and of
/// references and CDATA openings that never end.
fn hostile(n: usize) -> Vec<(&'static str, String)> {
    let fill = |unit: &str| unit.repeat(n / unit.len());
    let block = |inner: &str| format!("<observation><type>bugfix</type>{}</observation>", inner);
    vec![
        ("only <", fill("<")),
        ("unclosed blocks", fill("<observation>")),
        ("unclosed block tags", fill("<observation ")),
        ("unclosed summaries", fill("<summary><request>")),
        ("unclosed private", fill("<private ")),
        ("private spans", fill("<private>x</private>")),
        ("stray closers", fill("</observation></text></private>")),
        ("unclosed fields", block(&fill("<text>"))),
        ("unclosed field tags", block(&fill("<text "))),
        ("fields left open", block(&fill("<text>a<title>b<facts><fact>"))),
        (
            "items left open",
            block(&format!("<facts>{}", fill("<fact>x<f "))),
        ),
        (
            "long item names",
            block(&format!("<facts>{}", fill(&format!("<{}>", "f".repeat(70))))),
        ),
        (
            "generics",
            block(&format!("<text>{}</text>", fill("Vec<Arc<str>> &lt; &#x41 "))),
        ),
        (
            "cdata openings",
            block(&format!("<text>{}", fill("<![CDATA[ &#0000000000000065"))),
        ),
        (
            "many blocks",
            fill("<observation><type>bugfix</type><text>t</observation>"),
        ),
        (
            "spaced closers",
            block(&format!("<text>{}", fill("</text                x </private   "))),
        ),
        (
            "list lines",
            block(&format!("<files_read>{}", fill("a<b\n&#x41;\n"))),
        ),
    ]
}

#[test]
fn parsing_work_is_linear_in_hostile_input() {
    let n = 64 << 10;
    let small = hostile(n);
    let large = hostile(8 * n);
    for ((what, small), (_, large)) in small.iter().zip(&large) {
        let (_, at_n) = parse_model_output_metered(small, &types());
        let (_, at_8n) = parse_model_output_metered(large, &types());
        // Each byte is looked at a few times at most, and 8 times the input
        // is about 8 times the work (a quadratic path would be 64).
        assert!(
            at_8n <= 12 * large.len() as u64,
            "{what}: {at_8n} bytes looked at for {}",
            large.len()
        );
        let ratio = at_8n as f64 / at_n.max(1) as f64;
        let per_byte = at_8n as f64 / large.len() as f64;
        eprintln!("{what}: {at_n} -> {at_8n} bytes looked at (x{ratio:.2}, {per_byte:.2} per input byte)");
        assert!(
            ratio < 9.0,
            "{what}: {at_n} -> {at_8n} bytes looked at (x{ratio:.1})"
        );
    }
}

#[test]
fn four_mib_block_of_ampersands_parses() {
    let text = format!("<summary><request>{}</request></summary>", "&".repeat(4 * MIB));
    let parsed = parse(&text);
    assert_eq!(parsed.problems, vec![]);
    let MemoryBody::Summary(s) = &parsed.blocks[0].content else {
        panic!("not a summary")
    };
    assert_eq!(s.request.len(), 4 * MIB);
}

// ------------------------------------------------------------ private

#[test]
fn strip_private_removes_spans_whole() {
    assert_eq!(strip_private("a<private>s</private>b"), (Cow::Borrowed("ab"), 1));
    assert_eq!(strip_private("a<PRIVATE reason=\"x\">s</Private >b").0, "ab");
    assert_eq!(
        strip_private("a<private>s<private>t</private>u</private>b").0,
        "ab"
    );
    assert_eq!(
        strip_private("a<private>s</private>b<private/>c<private >d"),
        (Cow::Borrowed("abc"), 3)
    );
    assert_eq!(strip_private("a</private>b"), (Cow::Borrowed("ab"), 0));
    assert_eq!(strip_private("a<private"), (Cow::Borrowed("a"), 1));
    assert_eq!(strip_private("a<private x>s</private x>t").0, "a");
    assert_eq!(
        strip_private("<privateer> <private_x>").0,
        "<privateer> <private_x>"
    );
    assert!(matches!(
        strip_private("no spans é <p>").0,
        Cow::Borrowed("no spans é <p>")
    ));
}

#[test]
fn private_text_never_reaches_a_parsed_field() {
    let text = "SECRET0 is not private.<private>SECRET1</private>\n\
                <observation><type>feature</type><text>visible <private>SECRET2</private>part</text></observation>\n\
                <private>SECRET3 <observation><type>bugfix</type><text>hidden</text></observation></private>\n\
                <observation><type>bugfix</type><text>broken <private>SECRET4</private></observation>\n\
                <summary><request>asked</request><notes><PRIVATE a='1'>SECRET5</private>n</notes></summary>\n\
                <observation><type>decision</type><text>tail <private>SECRET6 to the end";
    let parsed = parse(text);
    assert_eq!(parsed.private_spans, 6);
    let seen = visible(&parsed);
    for n in 1..=6 {
        assert!(!seen.contains(&format!("SECRET{n}")), "SECRET{n} leaked: {seen}");
    }
    let bodies: Vec<String> = parsed.blocks.iter().map(|b| b.content.body()).collect();
    assert_eq!(bodies, ["visible part", "broken", "Request: asked\nNotes: n"]);
    let problems: Vec<(u32, &str)> = parsed
        .problems
        .iter()
        .map(|p| (p.index, p.reason.as_str()))
        .collect();
    assert_eq!(problems, [(3, "unterminated <observation>")]);
    assert_offsets(text, &parsed);
}

#[test]
fn offsets_map_back_across_removed_spans() {
    let text = "é<private>xx</private><observation><type>feature</type><text>a</text></observation>\
                <private>yyyy</private></private><private/><summary><request>r</request></summary>";
    let parsed = parse(text);
    assert_eq!(parsed.blocks.len(), 2);
    assert_eq!(parsed.blocks[0].offset, text.find("<observation>").unwrap());
    assert_eq!(parsed.blocks[1].offset, text.find("<summary>").unwrap());
    assert_offsets(text, &parsed);
}

#[test]
fn a_tag_joined_by_removing_a_private_span_is_no_tag() {
    let parsed = parse("<summ<private>x</private>ary><request>r</request></summary>");
    assert_eq!(
        parsed,
        Parsed {
            private_spans: 1,
            ..Parsed::default()
        }
    );

    let text = "<observation><type>feature</type><text>t</text></observ<private>x</private>ation>";
    let parsed = parse(text);
    assert_eq!(parsed.blocks, vec![]);
    assert_eq!(parsed.problems.len(), 1);
    assert_eq!(parsed.problems[0].reason, "unterminated <observation>");
}

// ------------------------------------------------------------ properties

const FRAGMENTS: &[&str] = &[
    "<observation>",
    "</observation>",
    "<summary>",
    "</summary>",
    "<type>feature</type>",
    "<type>",
    "</type>",
    "<text>",
    "</text>",
    "<request>",
    "</request>",
    "<private>",
    "</private>",
    "<private ",
    "/>",
    ">",
    "&",
    "<",
    "&amp;",
    "&lt",
    "<![CDATA[",
    "]]>",
    "<!--",
    "word",
    " ",
    "\n",
    "é",
    "€",
    "😀",
];

fn xmlish() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..60).prop_map(|parts| parts.concat())
}

fn field(max: usize) -> impl Strategy<Value = String> {
    prop::string::string_regex(&format!("[ -~é€😀\n\t]{{0,{max}}}")).unwrap()
}

fn non_blank(max: usize) -> impl Strategy<Value = String> {
    (prop::string::string_regex("[!-~é€😀]").unwrap(), field(max)).prop_map(|(a, b)| a + &b)
}

fn observation() -> impl Strategy<Value = Observation> {
    (
        prop::sample::select(&BUILTIN_TYPES[..]),
        field(30),
        non_blank(60),
        prop::collection::vec(non_blank(20), 0..4),
        prop::collection::vec(non_blank(20), 0..3),
        prop::collection::vec(non_blank(20), 0..3),
    )
        .prop_map(
            |(kind, title, text, facts, files_read, files_modified)| Observation {
                kind: kind.to_string(),
                title,
                text,
                facts,
                files_read,
                files_modified,
            },
        )
}

fn prose() -> impl Strategy<Value = String> {
    prop::string::string_regex("[a-zA-Z0-9 .,!?&>`é\n]{0,80}").unwrap()
}

proptest! {
    #[test]
    fn never_panics_on_arbitrary_text(text in any::<String>()) {
        let parsed = parse(&text);
        assert_offsets(&text, &parsed);
    }

    #[test]
    fn never_panics_on_xmlish_text(text in xmlish()) {
        let parsed = parse(&text);
        assert_offsets(&text, &parsed);
        prop_assert!(parsed.blocks.len() + parsed.problems.len() <= MAX_BLOCKS + 1);
    }

    #[test]
    fn rendered_observations_round_trip(
        observations in prop::collection::vec(observation(), 1..4),
        prose in prop::collection::vec(prose(), 4),
    ) {
        let mut text = prose[0].clone();
        for (i, o) in observations.iter().enumerate() {
            text.push_str(&render(o));
            text.push_str(&prose[(i + 1) % prose.len()]);
        }
        let parsed = parse(&text);
        prop_assert_eq!(parsed.problems, vec![]);
        let got: Vec<MemoryBody> = parsed.blocks.into_iter().map(|b| b.content).collect();
        let want: Vec<MemoryBody> = observations.iter().map(|o| MemoryBody::Observation(trimmed(o))).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn private_marker_never_reaches_output(
        text in xmlish(),
        digits in "[0-9]{1,6}",
        at in any::<prop::sample::Index>(),
    ) {
        let marker = format!("SECRET{digits}");
        let boundaries: Vec<usize> =
            text.char_indices().map(|(i, _)| i).chain(std::iter::once(text.len())).collect();
        let pos = boundaries[at.index(boundaries.len())];
        let text = format!("{}<private>{marker}</private>{}", &text[..pos], &text[pos..]);
        let stripped = strip_private(&text).0;
        prop_assert!(!stripped.contains(&marker));
        let parsed = parse(&text);
        prop_assert!(parsed.private_spans >= 1);
        prop_assert!(!visible(&parsed).contains(&marker));
        assert_offsets(&text, &parsed);
    }
}

// ------------------------------------------------------------ what models write (issue 16)

fn only_observation(parsed: Parsed) -> Observation {
    assert_eq!(parsed.problems, vec![]);
    assert_eq!(parsed.blocks.len(), 1, "{parsed:?}");
    match parsed.blocks.into_iter().next().map(|b| b.content) {
        Some(MemoryBody::Observation(o)) => o,
        other => panic!("not an observation: {other:?}"),
    }
}

#[test]
fn generics_and_other_markup_in_fields_are_kept_byte_for_byte() {
    let text = "<observation><type>bugfix</type>\
                <title>Vec<String> is not Send</title>\
                <text>The cache is HashMap<u64, Arc<str>>; the template closed </section> and </div> \
                early. <b>Bold</b>, <br/>, <!-- a comment --> and <?pi?> stay; a < b && c; \
                Option<&'a T>; &nbsp; &T::new; &#X41; <![CDATA[ never closed</text>\
                <facts><fact>fn f<T: Into<String>>(x: T)</fact><fact>uses </title> and <text> in HTML</fact></facts>\
                <files_read>src/a<b>.rs\nsrc/c.rs</files_read>\
                </observation>";
    let o = only_observation(parse(text));
    assert_eq!(o.title, "Vec<String> is not Send");
    assert_eq!(
        o.text,
        "The cache is HashMap<u64, Arc<str>>; the template closed </section> and </div> early. \
         <b>Bold</b>, <br/>, <!-- a comment --> and <?pi?> stay; a < b && c; Option<&'a T>; \
         &nbsp; &T::new; &#X41; <![CDATA[ never closed"
    );
    assert_eq!(
        o.facts,
        strings(&["fn f<T: Into<String>>(x: T)", "uses </title> and <text> in HTML"])
    );
    assert_eq!(o.files_read, strings(&["src/a<b>.rs", "src/c.rs"]));
}

#[test]
fn a_field_left_open_closes_at_its_parents_end() {
    let o = only_observation(parse(
        "<observation><type>bugfix</type><title>Left open<text>not a field</observation>",
    ));
    assert_eq!(o.title, "Left open<text>not a field");

    let o = only_observation(parse(
        "<observation><type>feature</type><text>t</text><facts><fact>one</fact><fact>two</observation>",
    ));
    assert_eq!(o.facts, strings(&["one", "two"]));

    let parsed = parse("<summary><request>ship it\n</summary>");
    assert_eq!(parsed.problems, vec![]);
    assert_eq!(parsed.blocks[0].content.body(), "Request: ship it");
}

#[test]
fn references_decode_and_invalid_ones_are_kept_verbatim() {
    let o = only_observation(parse(
        "<observation><type>refactor</type><text>&lt;T&gt; &amp; &quot;q&quot; &apos;a&apos; &#65;&#x42; \
         | &foo; &#0; &#xD800; &#x110000; &#; &amp <![CDATA[&lt; ]]]]><![CDATA[>]]></text></observation>",
    ));
    assert_eq!(
        o.text,
        "<T> & \"q\" 'a' AB | &foo; &#0; &#xD800; &#x110000; &#; &amp &lt; ]]>"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn code_and_markup_in_fields_survive_byte_for_byte(
        observations in prop::collection::vec(code_observation(), 1..4),
        prose in prose(),
    ) {
        let mut text = prose.clone();
        for (block, _) in &observations {
            text.push_str(block);
            text.push_str(&prose);
        }
        let parsed = parse(&text);
        prop_assert_eq!(parsed.problems, vec![]);
        let got: Vec<MemoryBody> = parsed.blocks.into_iter().map(|b| b.content).collect();
        let want: Vec<MemoryBody> =
            observations.into_iter().map(|(_, o)| MemoryBody::Observation(o)).collect();
        prop_assert_eq!(got, want);
    }
}
