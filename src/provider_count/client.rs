//! The HTTP/1.1 client of one counting endpoint: hyper's connection API over
//! TCP, or TLS (rustls with ring and the webpki roots) for `https://`, with a
//! small pool of idle connections (at most `concurrency`, each dropped after
//! [`IDLE_FOR`] unused). The request's headers are built once; the key's is
//! marked sensitive. A reused connection that fails before the answer's
//! head is tried once more on a fresh one (a count is free and changes
//! nothing, so sending it twice is harmless). The caller bounds the whole
//! exchange with its timeout.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST, RETRY_AFTER, USER_AGENT};
use http::{HeaderMap, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt as _, Full, LengthLimitError, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::error::{CountError, Failure};
use super::wire::MAX_ANSWER_BYTES;
use super::{Api, Settings};

/// An idle connection unused this long is closed rather than reused (before
/// a provider's own keep-alive timeout closes it under a request).
pub const IDLE_FOR: Duration = Duration::from_secs(30);

/// The placeholder of a Gemini URL's model.
const MODEL: &str = "{model}";

/// An answer: its status, `retry-after` and body (at most
/// [`MAX_ANSWER_BYTES`]). No `Debug`: the body is the provider's, never
/// logged.
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The `retry-after` header, if any.
    pub retry_after: Option<HeaderValue>,
    /// The body.
    pub body: Bytes,
}

/// How to open a TLS connection.
struct Tls {
    connector: TlsConnector,
    name: ServerName<'static>,
}

/// The client of one endpoint.
pub struct Client {
    host: String,
    port: u16,
    tls: Option<Tls>,
    /// The path and query, perhaps with [`MODEL`].
    path: String,
    headers: HeaderMap,
    idle: Mutex<Vec<(SendRequest<Full<Bytes>>, Instant)>>,
    max_idle: usize,
}

/// How an exchange on one connection ended badly.
enum Broke {
    /// Before the answer's head: a reused connection may be retried.
    BeforeAnswer,
    /// After it.
    Failed(Failure),
}

fn bad_url(problem: &'static str) -> CountError {
    CountError::Settings {
        field: "url",
        problem,
    }
}

/// `url` split into scheme, authority and path (`/` when absent).
fn split(url: &str) -> Result<(bool, &str, &str), CountError> {
    let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err(bad_url("must start with http:// or https://"));
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.is_empty() || authority.contains(['@', '{', '}']) {
        return Err(bad_url("needs a host, without credentials or a placeholder"));
    }
    Ok((https, authority, if path.is_empty() { "/" } else { path }))
}

/// The client configuration for https: ring, TLS 1.2 and 1.3, the webpki
/// roots, HTTP/1.1 by ALPN.
fn tls_config() -> Result<rustls::ClientConfig, CountError> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let mut config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|_| bad_url("no TLS protocol version available"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The headers every request carries: host, the key's (sensitive), the
/// API's version and the content type.
fn headers(settings: &Settings, authority: &str) -> Result<HeaderMap, CountError> {
    let mut headers = HeaderMap::new();
    headers.insert(
        HOST,
        HeaderValue::from_str(authority).map_err(|_| bad_url("bad host"))?,
    );
    let mut key = HeaderValue::from_str(settings.api_key.expose()).map_err(|_| CountError::Settings {
        field: "api_key",
        problem: "not a valid header value",
    })?;
    key.set_sensitive(true);
    match settings.api {
        Api::Anthropic => {
            headers.insert("x-api-key", key);
            headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        }
        Api::Gemini => {
            headers.insert("x-goog-api-key", key);
        }
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        USER_AGENT,
        HeaderValue::from_static(concat!("context-assembler/", env!("CARGO_PKG_VERSION"))),
    );
    Ok(headers)
}

impl Client {
    /// The client of `settings.url`, checked: a scheme, a host, a path that
    /// makes a URI with any model name put in.
    pub fn new(settings: &Settings) -> Result<Client, CountError> {
        let (https, authority, path) = split(&settings.url)?;
        let probe: Uri = format!("http://{authority}{}", path.replace(MODEL, "m"))
            .parse()
            .map_err(|_| bad_url("not a valid URL"))?;
        let host = probe.host().ok_or(bad_url("needs a host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        // `Uri` takes a port it cannot read as a u16 (`:99999`) and answers
        // none: read it here so it is refused, not replaced by the default.
        let port = match authority.rsplit_once(':').filter(|(_, p)| !p.contains(']')) {
            Some((_, port)) => port.parse().map_err(|_| bad_url("bad port"))?,
            None if https => 443,
            None => 80,
        };
        let tls = match https {
            false => None,
            true => Some(Tls {
                connector: TlsConnector::from(Arc::new(tls_config()?)),
                name: ServerName::try_from(host.clone()).map_err(|_| bad_url("not a TLS server name"))?,
            }),
        };
        Ok(Client {
            host,
            port,
            tls,
            path: path.to_owned(),
            headers: headers(settings, authority)?,
            idle: Mutex::new(Vec::new()),
            max_idle: settings.concurrency.max(1),
        })
    }

    /// The request target for `model` (a name [`super::wire::model_ok`]
    /// passed).
    pub fn target(&self, model: &str) -> Result<Uri, CountError> {
        self.path
            .replace(MODEL, model)
            .parse()
            .map_err(|_| CountError::Unsendable {
                reason: "the model name does not fit the URL",
            })
    }

    /// POSTs `body` to `target` and reads the answer.
    pub async fn post(&self, target: Uri, body: Bytes) -> Result<Reply, Failure> {
        if let Some(mut send) = self.checkout() {
            match exchange(&mut send, self.request(target.clone(), body.clone())).await {
                Ok(reply) => {
                    self.checkin(send);
                    return Ok(reply);
                }
                Err(Broke::Failed(f)) => return Err(f),
                Err(Broke::BeforeAnswer) => {}
            }
        }
        let mut send = self.connect().await?;
        match exchange(&mut send, self.request(target, body)).await {
            Ok(reply) => {
                self.checkin(send);
                Ok(reply)
            }
            Err(Broke::Failed(f)) => Err(f),
            Err(Broke::BeforeAnswer) => Err(Failure::Io),
        }
    }

    fn request(&self, target: Uri, body: Bytes) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = target;
        *request.headers_mut() = self.headers.clone();
        request
    }

    /// The newest idle connection still open and young enough.
    fn checkout(&self) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        while let Some((send, since)) = idle.pop() {
            if !send.is_closed() && now.saturating_duration_since(since) < IDLE_FOR {
                return Some(send);
            }
        }
        None
    }

    fn checkin(&self, send: SendRequest<Full<Bytes>>) {
        if send.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.max_idle {
            idle.push((send, Instant::now()));
        }
    }

    /// A fresh connection, its driver spawned.
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, Failure> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|_| Failure::Connect)?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => handshake(tcp).await,
            Some(tls) => {
                let stream = tls
                    .connector
                    .connect(tls.name.clone(), tcp)
                    .await
                    .map_err(|_| Failure::Tls)?;
                handshake(stream).await
            }
        }
    }
}

/// HTTP/1.1 over `io`; the connection is driven by its own task, which ends
/// when the sender is dropped or the peer closes.
async fn handshake<T>(io: T) -> Result<SendRequest<Full<Bytes>>, Failure>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|_| Failure::Io)?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(send)
}

/// One request and its answer on `send`.
async fn exchange(
    send: &mut SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Result<Reply, Broke> {
    send.ready().await.map_err(|_| Broke::BeforeAnswer)?;
    let answer = send
        .send_request(request)
        .await
        .map_err(|_| Broke::BeforeAnswer)?;
    let status = answer.status().as_u16();
    let retry_after = answer.headers().get(RETRY_AFTER).cloned();
    let declared = answer
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_ANSWER_BYTES as u64) {
        return Err(Broke::Failed(Failure::TooLarge));
    }
    let body = Limited::new(answer.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|e| {
            Broke::Failed(if e.downcast_ref::<LengthLimitError>().is_some() {
                Failure::TooLarge
            } else {
                Failure::Io
            })
        })?
        .to_bytes();
    Ok(Reply {
        status,
        retry_after,
        body,
    })
}

#[cfg(test)]
mod tests;
