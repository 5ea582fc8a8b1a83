//! The render node: token ids in vLLM's render contract, for the routers
//! and engines beside the gateway (llm-d's router, Dynamo's EPP), from the
//! same model folders the sidecar counts with.
//!
//! - `POST /v1/chat/completions/render`: an OpenAI chat request rendered
//!   with the model's chat template and tokenized, as `transformers`'
//!   `apply_chat_template(..., tokenize=True)` does; answers vLLM's
//!   `GenerateRequest` object;
//! - `POST /v1/completions/render`: each prompt's `encode(prompt)`, special
//!   tokens included; answers an array of them;
//! - `POST /tokenize`: `{count, max_model_len, tokens}` of a prompt or of a
//!   conversation; `GET /health`.
//!
//! [`Renderer`] does the work on plain values; [`http`] is the edge: the
//! listener, the JSON, admission, and errors as OpenAI error bodies. A model
//! renders when the model table resolves its name to a model folder
//! (`tokenizer_dir`); a conversation also needs the folder's chat template.
//!
//! Every answer that counts says where its tokens came from, in the
//! [`SOURCE_HEADERS`] (`Usage.tokens_exact`, `tokens_provider`,
//! `tokens_estimated`); the gateway's fitted requests carry the same. A
//! render's ids are its folder's tokenizer's: all exact. The answers' JSON
//! stays vLLM's, key for key.

pub mod http;
mod wire;

use std::sync::Arc;

use crate::assemble::Assembler;
use crate::prompt::Sources;
use crate::tokens::hf::HfModel;
use crate::tokens::{Conversation, ModelSpec};

pub use wire::{ChatRender, CompletionRender, TokenizeRender};

/// The headers saying where an answer's tokens came from: counted by a
/// public tokenizer, by the model's provider, estimated (they add up to the
/// answer's count).
pub const SOURCE_HEADERS: [&str; 3] = [
    "x-context-assembler-tokens-exact",
    "x-context-assembler-tokens-provider",
    "x-context-assembler-tokens-estimated",
];

/// The [`SOURCE_HEADERS`] and their values for `s`.
pub fn source_headers(s: &Sources) -> [(&'static str, u32); 3] {
    let [exact, provider, estimated] = SOURCE_HEADERS;
    [(exact, s.exact), (provider, s.provider), (estimated, s.estimated)]
}

/// Why a render was refused: a fault of the request, with the field it
/// names, or of the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The request is malformed or asks for what is not supported.
    #[error("{message}")]
    Invalid {
        /// What is wrong, naming no content.
        message: String,
        /// The field at fault (`messages`, `model`, ...), if one is.
        param: Option<&'static str>,
    },
    /// No model of that name in the model table.
    #[error("The model `{0}` does not exist.")]
    NoSuchModel(String),
    /// The model has no folder to render with (an OpenAI encoding, an
    /// estimate), or the folder has no chat template for a conversation.
    #[error("{0}")]
    NotRenderable(String),
    /// The chat template refused the conversation (its own
    /// `raise_exception`, or a fault running it).
    #[error("the chat template refused the conversation: {0}")]
    Template(String),
}

impl RenderError {
    /// A malformed request at `param`.
    pub fn invalid(param: &'static str, message: impl Into<String>) -> Self {
        RenderError::Invalid {
            message: message.into(),
            param: Some(param),
        }
    }
}

/// Renders and tokenizes over the assembler's model table (the one in force
/// at each call, so a reload applies at once).
#[derive(Debug, Clone)]
pub struct Renderer {
    assembler: Arc<Assembler>,
}

/// A model's folder, with what the contract echoes of it.
struct Folder {
    model: Arc<HfModel>,
    context_window: u32,
}

impl Renderer {
    /// A renderer over `assembler`'s model table.
    pub fn new(assembler: Arc<Assembler>) -> Self {
        Renderer { assembler }
    }

    /// The ids of a conversation rendered with `model`'s chat template
    /// (tokenized with the tokenizer's own special tokens added when
    /// `add_special_tokens`; the template writes its own), and the model's
    /// context window.
    pub fn chat(
        &self,
        model: Option<&str>,
        c: &Conversation<'_>,
        add_special_tokens: bool,
    ) -> Result<(Vec<u32>, u32), RenderError> {
        let folder = self.folder(model)?;
        let template = folder.model.template().ok_or_else(|| {
            RenderError::NotRenderable(format!(
                "the model `{}` has no chat template in its folder",
                folder.model.name()
            ))
        })?;
        let text = template
            .render_conversation(c)
            .map_err(|e| RenderError::Template(e.0))?;
        let ids = encode(&folder.model, &text, add_special_tokens)?;
        Ok((ids, folder.context_window))
    }

    /// The ids of `prompt` as `encode(prompt, add_special_tokens)` gives
    /// them, and the model's context window.
    pub fn text(
        &self,
        model: Option<&str>,
        prompt: &str,
        add_special_tokens: bool,
    ) -> Result<(Vec<u32>, u32), RenderError> {
        let folder = self.folder(model)?;
        let ids = encode(&folder.model, prompt, add_special_tokens)?;
        Ok((ids, folder.context_window))
    }

    /// The models of the table that render (those with a folder, exact
    /// names only), with their context windows.
    pub fn models(&self) -> Vec<(String, u32)> {
        let catalog = self.assembler.catalog();
        catalog
            .models
            .entries()
            .iter()
            .filter(|m| !m.prefix && m.tokenizer.hf_model().is_some())
            .map(|m| (m.name.clone(), m.context_window))
            .collect()
    }

    /// The folder `model` resolves to.
    fn folder(&self, model: Option<&str>) -> Result<Folder, RenderError> {
        let Some(name) = model.filter(|m| !m.is_empty()) else {
            return Err(RenderError::invalid(
                "model",
                "`model` is required: this render endpoint serves every model of the model table",
            ));
        };
        let catalog = self.assembler.catalog();
        let spec: &Arc<ModelSpec> = catalog
            .models
            .resolve(name)
            .ok_or_else(|| RenderError::NoSuchModel(name.to_owned()))?;
        let model = spec.tokenizer.hf_model().cloned().ok_or_else(|| {
            RenderError::NotRenderable(format!(
                "the model `{name}` counts with {}, not a model folder: token ids need its `tokenizer_dir`",
                spec.tokenizer
            ))
        })?;
        Ok(Folder {
            model,
            context_window: spec.context_window,
        })
    }
}

/// `text`'s ids, or the tokenizer's refusal as the request's fault.
fn encode(model: &HfModel, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, RenderError> {
    model
        .encode(text, add_special_tokens)
        .map_err(|e| RenderError::Invalid {
            message: format!("the tokenizer refused the text: {e}"),
            param: None,
        })
}
