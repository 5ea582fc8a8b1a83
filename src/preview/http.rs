//! The preview's HTTP/1 listener: the embedded page and the JSON API, with
//! the `/metrics` endpoint's protections (`server::metrics_http`): a
//! header-read timeout, and here also a bounded body read under a deadline.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, body::Incoming};
use serde_json::Value;
use tokio::net::TcpListener;

use super::Preview;
use super::api::{self, ApiError};
use crate::http1::{self, BodyError};

/// A connection whose request headers have not all arrived by then is
/// closed (as `/metrics` does).
pub const PREVIEW_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A request body not received in full by then is answered 408: a slow
/// client cannot hold a connection and its buffer for ever.
pub const PREVIEW_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The page: no external URL, no inline script (the policy below forbids
/// both).
const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");
/// Everything from this origin only; nothing framed, nothing inline.
const CSP: &str =
    "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// Serves connections until the task is dropped; at `limits.max_connections`
/// a new connection is closed at once.
pub(super) async fn serve(listener: TcpListener, state: Arc<Preview>) {
    let settings = http1::Settings {
        name: "preview",
        header_timeout: PREVIEW_HEADER_TIMEOUT,
        max_connections: Some(state.admission.limits().max_connections),
    };
    http1::serve(listener, settings, move |req| route(Arc::clone(&state), req)).await;
}

/// Answers one request.
async fn route(state: Arc<Preview>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if !state.any_host && !loopback_host(req.headers().get(HOST)) {
        let e = ApiError::new(
            StatusCode::FORBIDDEN,
            "FORBIDDEN_HOST",
            "the Host header is not a loopback name (start with --allow-remote to serve other names)",
        );
        return json(e.status, &e.body());
    }
    let path = req.uri().path().to_owned();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/" | "/index.html") => asset(INDEX_HTML, "text/html; charset=utf-8"),
        (&Method::GET, "/app.js") => asset(APP_JS, "text/javascript; charset=utf-8"),
        (&Method::GET, "/app.css") => asset(APP_CSS, "text/css; charset=utf-8"),
        (&Method::GET, "/api/models") => json(StatusCode::OK, &api::models(&state)),
        (&Method::GET, "/api/examples") => json(StatusCode::OK, &api::examples(&state)),
        (&Method::POST, "/api/assemble") => {
            // Admitted before the body is read: at `limits.max_concurrency`
            // no further body is buffered.
            let answer = match state.admission.admit() {
                Err(r) => Err(api::refused(r)),
                Ok(permit) => match read_body(&state, req).await {
                    Ok(body) => api::assemble(state, permit, &body).await,
                    Err(e) => Err(e),
                },
            };
            match answer {
                Ok(v) => json(StatusCode::OK, &v),
                Err(e) => json(e.status, &e.body()),
            }
        }
        (
            _,
            "/" | "/index.html" | "/app.js" | "/app.css" | "/api/models" | "/api/examples" | "/api/assemble",
        ) => {
            let e = ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "METHOD_NOT_ALLOWED",
                "method not allowed",
            );
            json(e.status, &e.body())
        }
        _ => {
            let e = ApiError::new(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                format!("no such page: {path}"),
            );
            json(e.status, &e.body())
        }
    }
}

/// Whether `host` names this machine: the page has no authentication, so
/// a page of another site that a rebound DNS name points here must not be
/// able to read it.
fn loopback_host(host: Option<&HeaderValue>) -> bool {
    let Some(host) = host.and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = match host.rsplit_once(':') {
        // `[::1]:8080`, `127.0.0.1:8080`, `localhost:8080`
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The body of a JSON request, at most `limits.max_request_bytes`, read
/// under [`PREVIEW_BODY_TIMEOUT`]. Only `application/json`: a cross-site
/// form cannot send that type without a CORS preflight, which is never
/// granted.
async fn read_body(state: &Preview, req: Request<Incoming>) -> Result<Bytes, ApiError> {
    let limit = state.admission.max_request_bytes();
    http1::read_json(req, limit, PREVIEW_BODY_TIMEOUT)
        .await
        .map_err(|e| match e {
            BodyError::NotJson => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UNSUPPORTED_MEDIA_TYPE",
                e.to_string(),
            ),
            BodyError::TooLarge { declared, limit } => ApiError::too_large(declared, limit),
            BodyError::Timeout(_) => {
                ApiError::new(StatusCode::REQUEST_TIMEOUT, "REQUEST_TIMEOUT", e.to_string())
            }
            BodyError::Broken(_) => ApiError::new(StatusCode::BAD_REQUEST, "BAD_BODY", e.to_string()),
        })
}

/// An embedded asset.
fn asset(text: &'static str, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert("content-security-policy", HeaderValue::from_static(CSP));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// A JSON answer.
fn json(status: StatusCode, value: &Value) -> Response<Full<Bytes>> {
    http1::json(status, value.to_string())
}
