//! What OpenAI bills for tool (function) definitions: the function-calling
//! formula of the OpenAI cookbook ("How to count tokens with tiktoken",
//! section 7, `num_tokens_for_tools`), reimplemented over one encoding's
//! ordinary-text counter.
//!
//! The API does not bill the JSON text of a tool: it renders the definitions
//! into the system prompt in its own syntax. The cookbook's formula counts
//! that rendering as fixed overheads plus the tokens of a few `name:text`
//! lines; the cookbook checks it against the API's `usage.prompt_tokens`, and
//! `the_cookbook_example_bills_what_the_api_billed` reproduces those figures
//! (101 for gpt-4o and gpt-4o-mini, 105 for gpt-3.5-turbo and gpt-4).
//!
//! The formula reads only `name`, `description` and each top-level property's
//! `type`, `description` and `enum`; like the cookbook, it ignores `required`,
//! `strict` and nested schemas (an object's inner properties, an array's
//! `items`). Where the cookbook's code would raise, [`openai_tools_tokens`]
//! answers `None` (the caller then counts the JSON text and says so), except
//! for two absences the API accepts and the formula can price (a missing
//! description, missing parameters); the function's doc lists each case.
//!
//! Properties are summed, so their order does not matter: this crate's
//! `serde_json` is built without `preserve_order` (its maps iterate in key
//! order, not as written), and that changes no count.

use serde_json::{Map, Value};

/// The cookbook's constants for a model family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolsFormula {
    /// Tokens at the start of every function.
    pub func_init: i64,
    /// Tokens once per function whose parameters have any property.
    pub prop_init: i64,
    /// Tokens per property.
    pub prop_key: i64,
    /// Tokens per property that has an `enum` (negative in the cookbook).
    pub enum_init: i64,
    /// Tokens per enum item, besides the item's own text.
    pub enum_item: i64,
    /// Tokens once after all functions (only when there is one).
    pub func_end: i64,
}

impl ToolsFormula {
    /// gpt-4o family (o200k_base models).
    pub const O200K: ToolsFormula = ToolsFormula {
        func_init: 7,
        ..ToolsFormula::CL100K
    };

    /// gpt-3.5-turbo and gpt-4 (cl100k_base models).
    pub const CL100K: ToolsFormula = ToolsFormula {
        func_init: 10,
        prop_init: 3,
        prop_key: 3,
        enum_init: -3,
        enum_item: 3,
        func_end: 12,
    };
}

/// Tokens OpenAI bills for `tools`, each the JSON text of one tool
/// definition in the Chat Completions shape
/// (`{"type":"function","function":{"name":..,"description":..,
/// "parameters":{"type":"object","properties":{..}}}}`), with `count` the
/// encoding's ordinary-text counter. `None` when a definition is not in that
/// shape (then the caller falls back to counting the JSON text and reports
/// the count as inexact).
///
/// Per function: `func_init` + `count("{name}:{description}")`; if its
/// parameters have properties, `prop_init`, then per property `prop_key` +
/// `count("{key}:{type}:{description}")`, and for an `enum`, `enum_init` +
/// per item `enum_item` + `count(item)`. Once after all functions,
/// `func_end`; no tools cost 0. One trailing `.` is dropped from each
/// description (`"a.."` counts as `"a."`). The sum saturates into
/// `0..=u32::MAX`. Linear in the definitions' length: each is parsed once,
/// and the texts counted are its parts.
///
/// Where the cookbook's code would raise `KeyError`, this counts:
/// - a missing `description` (of the function or of a property) as `""`;
///   the API makes descriptions optional and then renders none, which the
///   empty tail of the line stands for;
/// - missing `parameters`, or parameters without `properties`, as no
///   properties (the API accepts a function that takes no arguments).
///
/// It answers `None` for a tool that is not a function (the formula prices
/// only functions; the cookbook's code does not look at `type`), and
/// wherever else the cookbook's code would raise:
/// - text that is not a JSON object with `"type": "function"` and an object
///   `function` holding a string `name`;
/// - `parameters` or `properties` that are not objects, or a property that is
///   not an object;
/// - a property without a string `type`: such a property is an `anyOf`,
///   `$ref` or a type list (`["string", "null"]`), whose rendering the formula
///   does not model and counting `""` would under-count;
/// - a `description` that is present but not a string (`null` included);
/// - an `enum` that is not an array of strings (the cookbook encodes each
///   item as text: a number would raise there; a bare string, which it
///   would count letter by letter, is refused too).
pub fn openai_tools_tokens(
    formula: ToolsFormula,
    tools: &[String],
    count: impl Fn(&str) -> u32,
) -> Option<u32> {
    if tools.is_empty() {
        return Some(0);
    }
    let mut total = formula.func_end;
    for tool in tools {
        total = total.saturating_add(function_tokens(formula, tool, &count)?);
    }
    Some(u32::try_from(total.max(0)).unwrap_or(u32::MAX))
}

/// One definition's tokens, before `func_end`.
fn function_tokens(formula: ToolsFormula, tool: &str, count: &impl Fn(&str) -> u32) -> Option<i64> {
    let tool: Value = serde_json::from_str(tool).ok()?;
    let tool = tool.as_object()?;
    if tool.get("type")?.as_str()? != "function" {
        return None;
    }
    let function = tool.get("function")?.as_object()?;
    let name = function.get("name")?.as_str()?;
    let description = description(function)?;
    let mut tokens = formula
        .func_init
        .saturating_add(line(count, &format!("{name}:{description}")));
    let properties = match function.get("parameters") {
        None => None,
        Some(parameters) => match parameters.as_object()?.get("properties") {
            None => None,
            Some(properties) => Some(properties.as_object()?),
        },
    };
    if let Some(properties) = properties.filter(|p| !p.is_empty()) {
        tokens = tokens.saturating_add(formula.prop_init);
        for (key, property) in properties {
            let property_tokens = property_tokens(formula, key, property, count)?;
            tokens = tokens.saturating_add(property_tokens);
        }
    }
    Some(tokens)
}

/// One property's tokens.
fn property_tokens(
    formula: ToolsFormula,
    key: &str,
    property: &Value,
    count: &impl Fn(&str) -> u32,
) -> Option<i64> {
    let property = property.as_object()?;
    let kind = property.get("type")?.as_str()?;
    let description = description(property)?;
    let mut tokens = formula
        .prop_key
        .saturating_add(line(count, &format!("{key}:{kind}:{description}")));
    if let Some(items) = property.get("enum") {
        tokens = tokens.saturating_add(formula.enum_init);
        for item in items.as_array()? {
            let item = line(count, item.as_str()?);
            tokens = tokens.saturating_add(formula.enum_item.saturating_add(item));
        }
    }
    Some(tokens)
}

/// The `description` of a function or property without one trailing `.`:
/// `""` when absent, `None` when present but not a string.
fn description(object: &Map<String, Value>) -> Option<&str> {
    match object.get("description") {
        None => Some(""),
        Some(description) => {
            let description = description.as_str()?;
            Some(description.strip_suffix('.').unwrap_or(description))
        }
    }
}

/// `count(text)`, widened for the signed sum.
fn line(count: &impl Fn(&str) -> u32, text: &str) -> i64 {
    i64::from(count(text))
}

#[cfg(test)]
mod tests;
