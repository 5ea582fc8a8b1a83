//! The gateway's edge: a provider's chat request fitted to its model in the
//! gateway's own path, with no code in the gateway. Envoy's external
//! processor ([`ext_proc`]) and the HTTP fit endpoints ([`http`]) convert
//! their wire into a body and the caller's asks, and call the one fit
//! ([`fit::Fitter`]), which calls the one Assemble flow.
//!
//! - [`body`]: where a request's messages lie in its bytes, and the splice;
//!   [`chat`], [`messages`], [`responses`]: each API's body, parsed.
//! - [`media`]: images counted by the provider's rule.
//! - [`fit`]: the request for the assembler, its decisions spliced back;
//!   [`outcome`]: what it made of a request; `refusal`: refusals in the
//!   provider's shape; `markers`: Anthropic's cache markers.
//! - [`ext_proc`]: Envoy's processor; [`http`]: the HTTP fit endpoints on
//!   the render node's listener.

pub mod body;
pub mod chat;
pub mod ext_proc;
pub mod fit;
pub mod http;
mod markers;
pub mod media;
pub mod messages;
pub mod outcome;
pub mod pb;
mod refusal;
pub mod responses;

pub use body::Api;
pub use ext_proc::ExtProc;
pub use fit::{Asks, Fitter, Outcome, Settings};
