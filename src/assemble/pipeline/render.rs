//! The render step of a run: for a model with a chat template, the
//! messages rendered and counted whole (the per-message sum is an estimate
//! there), and the warning about text that spells special tokens.

use super::super::error::AssembleError;
use super::super::layout;
use super::{Pipeline, Rendered};
use crate::tokens::ChatMessage;
use crate::tokens::hf::HfModel;
use crate::vocab::{Warning, codes};

impl Pipeline<'_> {
    /// The exact tokens of the prompt `plan` lays out, for a model whose
    /// per-message sum is an estimate (a chat template): the messages
    /// rendered by the template and tokenized whole, counted through the
    /// segment cache (a repeated prompt is looked up by its digest). With
    /// tools, also their share: what rendering them with these messages
    /// adds (a template may place them with the first system message, so
    /// the share depends on the messages). `None` where the sum is exact.
    /// Also the warning about special-token text, if any.
    pub(super) fn rendered_total(
        &self,
        plan: &layout::Plan,
    ) -> Result<(Option<Rendered>, Option<Warning>), AssembleError> {
        let Some(model) = self.counter.tok.hf_model().filter(|m| m.template().is_some()) else {
            return Ok((None, None));
        };
        let texts: Vec<_> = plan
            .iter()
            .map(|(_, source)| layout::text_of(self.req, source))
            .collect();
        let reasoning: Vec<Option<String>> = plan
            .iter()
            .map(|(_, source)| layout::thinking_of(self.req, source))
            .collect();
        let messages: Vec<ChatMessage<'_>> = plan
            .iter()
            .zip(&texts)
            .zip(&reasoning)
            .map(|(((role, _), text), reasoning)| ChatMessage {
                role: role.as_str(),
                content: text,
                reasoning: reasoning.as_deref(),
            })
            .collect();
        let warning = self.special_text_warning(model, &messages);
        let tools: Vec<serde_json::Value> = self
            .tools
            .iter()
            .filter_map(|t| serde_json::from_str(t).ok())
            .collect();
        let count = |tools: Option<&[serde_json::Value]>| -> Result<u32, AssembleError> {
            match self.counter.tok.rendered_text(&messages, tools) {
                Some(Ok(text)) => Ok(self.counter.count_rendered(model, &text)),
                Some(Err(e)) => Err(AssembleError::TemplateRefused {
                    model: self.spec.name.clone(),
                    reason: e.to_string(),
                }),
                // A template was found above.
                None => Ok(0),
            }
        };
        let messages_tokens = count(None)?;
        let tools_tokens = if tools.is_empty() {
            0
        } else {
            count(Some(&tools))?.saturating_sub(messages_tokens)
        };
        self.check_cancelled()?;
        Ok((
            Some(Rendered {
                messages: messages_tokens,
                tools: tools_tokens,
            }),
            warning,
        ))
    }

    /// The warning about the messages whose text spells one of `model`'s
    /// special tokens: the engine reads such text as the token (it is
    /// counted so), which lets a content forge a turn. Names the tokens and
    /// the messages, never the text around them.
    fn special_text_warning(&self, model: &HfModel, messages: &[ChatMessage<'_>]) -> Option<Warning> {
        let mut tokens: Vec<&str> = Vec::new();
        let mut at: Vec<usize> = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let found = model.specials_in(m.content);
            if !found.is_empty() {
                at.push(i);
                for t in found {
                    if !tokens.contains(&t) {
                        tokens.push(t);
                    }
                }
            }
        }
        if at.is_empty() {
            return None;
        }
        tokens.truncate(8);
        Some(Warning::new(
            codes::SPECIAL_TOKEN_TEXT,
            format!(
                "messages {at:?} spell special tokens of model {} ({}): the engine reads them as those tokens, not as text; set the policy's neutralize_special_tokens to break them",
                self.spec.name,
                tokens.join(" ")
            ),
        ))
    }
}
