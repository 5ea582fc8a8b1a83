//! The fit over plain HTTP/1.1, for gateways without an external processor
//! (a LiteLLM pre-call hook, Kong, nginx): on the render node's listener,
//! `POST /v1/fit/chat/completions`, `/v1/fit/messages` and
//! `/v1/fit/responses` take a provider request and answer the request to
//! send, with the processor's headers and refusals. A request passed on
//! is answered as it came, with `x-context-assembler-passed` saying why.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::body::Api;
use super::ext_proc::{EXACT_HEADER, INPUT_TOKENS_HEADER};
use super::fit::{self, Asks, Fitter, Outcome};
use crate::http1::{self, BodyError, Extra, code_label};
use crate::render::source_headers;
use crate::telemetry::metrics;

/// The routes' prefix.
pub const PREFIX: &str = "/v1/fit/";
/// The metric label of the fit endpoints.
pub const ENDPOINT: &str = "Fit";
/// Why a request went on unfitted.
pub const PASSED_HEADER: &str = "x-context-assembler-passed";
/// The static prefix's hash.
pub const PREFIX_HASH_HEADER: &str = "x-context-assembler-prefix-hash";
/// A body not received in full by then is answered 408 (as the render
/// node's).
const BODY_TIMEOUT: Duration = crate::render::http::RENDER_BODY_TIMEOUT;

/// The fit endpoints.
#[derive(Debug, Clone)]
pub struct FitRoutes {
    fitter: Fitter,
}

impl FitRoutes {
    /// The endpoints over `fitter`.
    pub fn new(fitter: Fitter) -> Self {
        FitRoutes { fitter }
    }

    async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let started = Instant::now();
        let response = self.respond(req).await;
        metrics::request(ENDPOINT, code_label(response.status()), started.elapsed());
        response
    }

    async fn respond(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let api = match req.uri().path().strip_prefix(PREFIX) {
            Some("chat/completions") => Api::Chat,
            Some("messages") => Api::Messages,
            Some("responses") => Api::Responses,
            _ => return error(StatusCode::NOT_FOUND, "no such fit route"),
        };
        if req.method() != Method::POST {
            return error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
        }
        let asks = Asks::from_headers(|name| req.headers().get(name).and_then(|v| v.to_str().ok()));
        let limit = self.fitter.settings().max_body_bytes;
        let cap = u32::try_from(limit).unwrap_or(u32::MAX);
        // The body is held from the upload budget before a byte is read, as
        // a gRPC message is: a flood of uploads cannot hold more than it.
        let declared = req
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u32>().ok());
        let Ok(_held) = self
            .fitter
            .admission()
            .reserve_upload(declared.unwrap_or(cap).min(cap))
        else {
            let r = fit::overloaded(api);
            metrics::gateway_request(api.as_str(), "refused", r.reason);
            return provider(r.status, r.body);
        };
        let body = match http1::read_json(req, cap, BODY_TIMEOUT).await {
            Ok(b) => b,
            Err(BodyError::TooLarge { declared, .. }) => {
                let bytes = declared.map_or(limit.saturating_add(1), |d| {
                    usize::try_from(d).unwrap_or(usize::MAX)
                });
                let r = fit::too_large(api, bytes, limit);
                metrics::gateway_request(api.as_str(), "refused", r.reason);
                return provider(r.status, r.body);
            }
            Err(BodyError::NotJson) => {
                return error(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "the body must be application/json",
                );
            }
            Err(BodyError::Timeout(_)) => {
                return error(StatusCode::REQUEST_TIMEOUT, "the body did not arrive in time");
            }
            Err(BodyError::Broken(_)) => return error(StatusCode::BAD_REQUEST, "the body could not be read"),
        };
        let outcome = self.fitter.fit(api, &asks, &body).await;
        answer(outcome, body)
    }
}

/// The answer to a fit: the provider's refusal, or the body (as sent, or
/// fitted) with the headers that say what the fit did.
fn answer(outcome: Outcome, body: Bytes) -> Response<Full<Bytes>> {
    match outcome {
        Outcome::Refused(r) => provider(r.status, r.body),
        Outcome::Passed(why) => {
            let mut resp = http1::json(StatusCode::OK, String::new());
            *resp.body_mut() = Full::new(body);
            set(&mut resp, PASSED_HEADER, why.as_str());
            resp
        }
        Outcome::Fitted(f) => {
            let mut resp = http1::json(StatusCode::OK, String::new());
            *resp.body_mut() = Full::new(f.body.map_or(body, Bytes::from));
            set(&mut resp, INPUT_TOKENS_HEADER, &f.input_tokens.to_string());
            set(&mut resp, EXACT_HEADER, if f.exact { "true" } else { "false" });
            for (name, tokens) in source_headers(&f.sources) {
                set(&mut resp, name, &tokens.to_string());
            }
            set(&mut resp, PREFIX_HASH_HEADER, &f.prefix_hash);
            set(
                &mut resp,
                "x-context-assembler-turns-cut",
                &f.turns_cut.to_string(),
            );
            set(
                &mut resp,
                "x-context-assembler-results-cleared",
                &f.results_cleared.to_string(),
            );
            resp
        }
    }
}

impl Extra for FitRoutes {
    fn serves(&self, path: &str) -> bool {
        path.starts_with(PREFIX)
    }

    fn answer(
        &self,
        req: Request<Incoming>,
    ) -> Pin<Box<dyn Future<Output = Response<Full<Bytes>>> + Send + '_>> {
        Box::pin(self.handle(req))
    }
}

fn set(resp: &mut Response<Full<Bytes>>, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
}

/// A refusal in the provider's shape.
fn provider(status: u16, body: String) -> Response<Full<Bytes>> {
    http1::json(
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        body,
    )
}

/// An error of the endpoint itself (not of the provider's request).
fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": status.as_u16()}});
    let mut resp = http1::json(status, body.to_string());
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}
