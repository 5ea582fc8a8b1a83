use std::cell::RefCell;

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::tokens::{Encoding, Tokenizer};

/// The cookbook's tool, as its section 7 defines it.
const WEATHER_TOOL: &str = r#"{
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "The city and state, e.g. San Francisco, CA"
                },
                "unit": {
                    "type": "string",
                    "description": "The unit of temperature to return",
                    "enum": ["celsius", "fahrenheit"]
                }
            },
            "required": ["location"]
        }
    }
}"#;

fn bytes(text: &str) -> u32 {
    u32::try_from(text.len()).unwrap()
}

/// The cookbook's section 7 (openai/openai-cookbook,
/// examples/How_to_count_tokens_with_tiktoken.ipynb, cell 17, at commit
/// c81359cdc6744f001e40c08a192604c5113fdab3) sends two messages and the
/// weather tool and prints, for both its count and the API's
/// `usage.prompt_tokens`: 105 for gpt-3.5-turbo and gpt-4, 101 for
/// gpt-4o and gpt-4o-mini. Its total is its `num_tokens_from_messages`
/// (3 per message + role + content, then 3 to prime the reply), written
/// out here as the cookbook has it, plus the tools.
#[test]
fn the_cookbook_example_bills_what_the_api_billed() {
    let messages = [
        (
            "system",
            "You are a helpful assistant that can answer to questions about the weather.",
        ),
        ("user", "What's the weather like in San Francisco?"),
    ];
    let total = |encoding, formula| {
        let tok = Tokenizer::exact(encoding);
        let messages: u32 = messages
            .iter()
            .map(|(role, content)| 3 + tok.count(role) + tok.count(content))
            .sum::<u32>()
            + 3;
        let tools = openai_tools_tokens(formula, &[WEATHER_TOOL.to_owned()], |t| tok.count(t));
        messages + tools.unwrap()
    };
    assert_eq!(total(Encoding::O200kBase, ToolsFormula::O200K), 101);
    assert_eq!(total(Encoding::Cl100kBase, ToolsFormula::CL100K), 105);
}

/// With a byte counter every term is visible: see the sums below.
#[test]
fn a_small_case_counted_by_hand() {
    let a = json!({"type": "function", "function": {
        "name": "f",
        "description": "Do it..",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "string", "description": "Alpha."},
            "b": {"type": "integer"},
            "c": {"type": "string", "enum": ["x", "yz"]},
        }},
    }})
    .to_string();
    let b = json!({"type": "function", "function": {"name": "g"}}).to_string();
    // a: 7 + "f:Do it." 8, + prop_init 3, + "a" 3 + "a:string:Alpha" 14,
    //    + "b" 3 + "b:integer:" 10, + "c" 3 - 3 + (3 + 1) + (3 + 2) + "c:string:" 9 = 66
    // b: 7 + "g:" 2 = 9; then func_end 12.
    let tools = [a, b];
    assert_eq!(
        openai_tools_tokens(ToolsFormula::O200K, &tools, bytes),
        Some(66 + 9 + 12)
    );
    assert_eq!(
        openai_tools_tokens(ToolsFormula::CL100K, &tools, bytes),
        Some(66 + 9 + 12 + 2 * 3)
    );
}

#[test]
fn the_counted_texts_are_the_cookbook_lines() {
    let seen = RefCell::new(Vec::new());
    let tokens = openai_tools_tokens(ToolsFormula::O200K, &[WEATHER_TOOL.to_owned()], |t| {
        seen.borrow_mut().push(t.to_owned());
        1
    });
    // 7 + 1, + 3, + location 3 + 1, + unit 3 - 3 + 2 * (3 + 1) + 1, + 12.
    assert_eq!(tokens, Some(7 + 1 + 3 + 4 + 9 + 12));
    let mut seen = seen.into_inner();
    seen.sort();
    assert_eq!(
        seen,
        [
            "celsius",
            "fahrenheit",
            "get_current_weather:Get the current weather in a given location",
            "location:string:The city and state, e.g. San Francisco, CA",
            "unit:string:The unit of temperature to return",
        ]
    );
}

#[test]
fn no_tools_cost_nothing_and_the_sum_saturates() {
    assert_eq!(openai_tools_tokens(ToolsFormula::O200K, &[], bytes), Some(0));
    let tool = [json!({"type": "function", "function": {"name": "f"}}).to_string()];
    let negative = ToolsFormula {
        func_init: -100,
        func_end: -100,
        ..ToolsFormula::O200K
    };
    assert_eq!(openai_tools_tokens(negative, &tool, bytes), Some(0));
    let huge = ToolsFormula {
        func_end: i64::MAX,
        ..ToolsFormula::O200K
    };
    assert_eq!(openai_tools_tokens(huge, &tool, bytes), Some(u32::MAX));
    let many = vec![tool[0].clone(); 3];
    assert_eq!(
        openai_tools_tokens(ToolsFormula::O200K, &many, |_| u32::MAX),
        Some(u32::MAX)
    );
}

#[test]
fn definitions_the_formula_cannot_price_are_none() {
    let with_property = |p: Value| {
        json!({"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"p": p}}}})
    };
    let malformed = [
        json!("not an object"),
        json!({"type": "function"}),
        json!({"type": "web_search", "function": {"name": "f"}}),
        json!({"function": {"name": "f"}}),
        json!({"type": "function", "function": "f"}),
        json!({"type": "function", "function": {"description": "no name"}}),
        json!({"type": "function", "function": {"name": 7}}),
        json!({"type": "function", "function": {"name": "f", "description": null}}),
        json!({"type": "function", "function": {"name": "f", "parameters": []}}),
        json!({"type": "function", "function": {"name": "f", "parameters": {"properties": []}}}),
        with_property(json!("string")),
        with_property(json!({"description": "no type"})),
        with_property(json!({"type": ["string", "null"]})),
        with_property(json!({"anyOf": [{"type": "string"}]})),
        with_property(json!({"type": "string", "description": 1})),
        with_property(json!({"type": "string", "enum": "ab"})),
        with_property(json!({"type": "integer", "enum": [1, 2]})),
    ];
    let good = json!({"type": "function", "function": {"name": "g"}}).to_string();
    assert!(openai_tools_tokens(ToolsFormula::O200K, std::slice::from_ref(&good), bytes).is_some());
    for bad in malformed {
        let bad = bad.to_string();
        assert_eq!(
            openai_tools_tokens(ToolsFormula::O200K, &[good.clone(), bad.clone()], bytes),
            None,
            "{bad}"
        );
    }
    assert_eq!(
        openai_tools_tokens(ToolsFormula::O200K, &["{not json".to_owned()], bytes),
        None
    );
}

/// A property: its type, its description if any, its enum if any.
type Property = (&'static str, Option<String>, Option<Vec<String>>);

fn property() -> impl Strategy<Value = Property> {
    (
        prop::sample::select(vec!["string", "integer", "number", "boolean", "array"]),
        prop::option::of("\\PC{0,40}"),
        prop::option::of(prop::collection::vec("\\PC{0,12}", 0..4)),
    )
}

fn tool_with(properties: &[(String, Property)]) -> String {
    let properties: Map<String, Value> = properties
        .iter()
        .map(|(key, (kind, description, items))| {
            let mut p = Map::new();
            p.insert("type".to_owned(), json!(kind));
            if let Some(d) = description {
                p.insert("description".to_owned(), json!(d));
            }
            if let Some(items) = items {
                p.insert("enum".to_owned(), json!(items));
            }
            (key.clone(), Value::Object(p))
        })
        .collect();
    json!({"type": "function", "function": {
        "name": "lookup",
        "description": "Looks a thing up.",
        "parameters": {"type": "object", "properties": properties},
    }})
    .to_string()
}

proptest! {
    /// Adding a property never lowers the count (it raises it: its
    /// `prop_key` pays for `enum_init`, and its line has a token).
    #[test]
    fn adding_a_property_raises_the_count(
        o200k in any::<bool>(),
        properties in prop::collection::vec(("[a-z]{1,10}", property()), 0..6),
        extra_key in "new_[a-z]{0,5}",
        extra in property(),
    ) {
        let (tok, formula) = if o200k {
            (Tokenizer::exact(Encoding::O200kBase), ToolsFormula::O200K)
        } else {
            (Tokenizer::exact(Encoding::Cl100kBase), ToolsFormula::CL100K)
        };
        let count = |t: &str| tok.count(t);
        let mut grown = properties.clone();
        grown.push((extra_key, extra));
        let before = openai_tools_tokens(formula, &[tool_with(&properties)], count).unwrap();
        let after = openai_tools_tokens(formula, &[tool_with(&grown)], count).unwrap();
        prop_assert!(after > before, "{before} -> {after}");
    }
}
