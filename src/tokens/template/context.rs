//! What a template reads of our own messages: each [`ChatMessage`] is a
//! map object holding its fields as values made once per rendering, in the
//! order `transformers` hands them over. A rendering so neither serializes
//! the conversation into hash maps (a table allocated per message, every
//! key hashed) nor hashes a key each time the template reads a field: a
//! field is found by its name among at most four.
//!
//! The template cannot tell the difference: the object answers every map
//! operation (lookup, iteration, length, truth, printing, `tojson`) as the
//! serialized map did. `a_message_object_renders_as_its_serialized_map` and
//! `real_templates_render_the_message_objects_as_the_serialized_maps` (in
//! `tests.rs`) compare both, byte for byte.

use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectExt as _, ObjectRepr, Value};

use super::ChatMessage;

/// A message's keys without reasoning, in their order.
const KEYS: &[&str] = &["role", "content"];

/// A message's keys with reasoning, as `transformers` hands it over:
/// `{"thinking": r, role, content, "reasoning_content": r}`.
const KEYS_WITH_REASONING: &[&str] = &["thinking", "role", "content", "reasoning_content"];

/// One [`ChatMessage`] as the template reads it.
#[derive(Debug)]
struct MessageObject {
    role: Value,
    content: Value,
    /// Given under both `thinking` and `reasoning_content`.
    reasoning: Option<Value>,
}

impl MessageObject {
    fn keys(&self) -> &'static [&'static str] {
        if self.reasoning.is_some() {
            KEYS_WITH_REASONING
        } else {
            KEYS
        }
    }

    fn field(&self, key: &str) -> Option<Value> {
        match key {
            "role" => Some(self.role.clone()),
            "content" => Some(self.content.clone()),
            "thinking" | "reasoning_content" => self.reasoning.clone(),
            _ => None,
        }
    }
}

impl Object for MessageObject {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    /// Only a string key names a field (a map's string key equals no
    /// number, bool or none).
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.get_value_by_str(key.as_str()?)
    }

    fn get_value_by_str(self: &Arc<Self>, key: &str) -> Option<Value> {
        self.field(key)
    }

    /// Keys and values in order, enumerated as minijinja enumerates its
    /// own maps, so that everything that walks the keys walks them as it
    /// did (`reverse` of one of its maps, for one, keeps their order).
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        self.mapped_rev_key_value_enumerator(|this| {
            Box::new(
                this.keys()
                    .iter()
                    .map(|&k| (Value::from(k), this.field(k).unwrap_or_default())),
            )
        })
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.keys().len())
    }
}

/// `messages` as the template's `messages`: a list of message objects.
pub(super) fn messages_value(messages: &[ChatMessage<'_>]) -> Value {
    messages
        .iter()
        .map(|m| {
            Value::from_object(MessageObject {
                role: Value::from(m.role),
                content: Value::from(m.content),
                reasoning: m.reasoning.map(Value::from),
            })
        })
        .collect()
}
