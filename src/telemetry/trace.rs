//! Trace spans: a per-request [`Recorder`] of phases and attributes, and the
//! [`Exporter`] that sends finished spans over OTLP/gRPC.
//!
//! The phases already report their time through [`super::metrics::phase`]
//! on the thread doing the work; while a [`Recorder`] is entered on that
//! thread ([`Recorder::enter`]), the phase is also kept as a span. With
//! tracing off, nothing is ever entered: a phase costs one relaxed load and
//! one branch more (`ENABLED`).
//!
//! Export is our own batch loop over the generated OTLP client rather than
//! the OpenTelemetry SDK: spans are built after the fact with explicit
//! times, and the queue must be bounded with every drop counted
//! ([`TRACE_SPANS_DROPPED_TOTAL`]). [`Exporter::submit`]
//! never waits: past [`TraceSettings::max_queue_spans`] spans are dropped,
//! so a collector that is down or slow costs the request path nothing.
//! (This is the one place outside `grpc/` that holds a tonic client: the
//! exporter is a leaf and knows nothing of the service.)

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span, status};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use super::names::{
    TRACE_DROPPED_EXPORT_FAILED, TRACE_DROPPED_QUEUE_FULL, TRACE_SPANS_DROPPED_TOTAL,
    TRACE_SPANS_EXPORTED_TOTAL,
};

/// Counts spans dropped for `reason` (one of
/// [`super::metrics::TRACE_DROP_REASONS`]).
pub fn spans_dropped(reason: &'static str, spans: usize) {
    ::metrics::counter!(TRACE_SPANS_DROPPED_TOTAL, "reason" => reason).increment(spans as u64);
}

/// Counts spans the collector accepted.
fn spans_exported(spans: usize) {
    ::metrics::counter!(TRACE_SPANS_EXPORTED_TOTAL).increment(spans as u64);
}

/// Whether any [`Exporter`] was started in this process: until then no
/// recorder can be entered and [`phase`] returns at once.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Phases kept per request at most (a large batch has five per member);
/// more are counted as dropped.
pub const MAX_PHASES: usize = 1024;
/// Spans sent in one export call at most.
pub const MAX_EXPORT_BATCH: usize = 512;
/// How long finished spans wait for more before they are exported.
pub const EXPORT_INTERVAL: Duration = Duration::from_millis(500);

thread_local! {
    static CURRENT: RefCell<Option<Recorder>> = const { RefCell::new(None) };
}

/// A span attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string (ids, hashes, labels: never prompt content).
    Str(String),
    /// An integer (counts, tokens).
    Int(i64),
    /// A flag.
    Bool(bool),
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

macro_rules! int_value {
    ($($t:ty),+) => {
        $(impl From<$t> for Value {
            fn from(n: $t) -> Self {
                Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
            }
        })+
    };
}
int_value!(u32, i32, u64, i64, usize);

/// One phase of a request: its name (a `metrics::PHASE_*` constant or
/// [`PHASE_RECALL`]), when it ended and how long it took.
#[derive(Debug, Clone, Copy)]
pub struct Phase {
    /// The phase's name.
    pub name: &'static str,
    /// When it ended.
    pub end: Instant,
    /// How long it took.
    pub took: Duration,
}

/// Phase: the memory store's recall (async; recorded by the RPC handler).
pub const PHASE_RECALL: &str = "recall";

/// What one request recorded: its phases and attributes.
#[derive(Debug, Default)]
pub struct Recording {
    /// Phases in the order they ended.
    pub phases: Vec<Phase>,
    /// Attributes of the request's span, by key (a later value wins).
    pub attributes: Vec<(&'static str, Value)>,
    /// Phases not kept past [`MAX_PHASES`].
    pub phases_dropped: usize,
}

/// The shared recording of one request, entered on each thread that works
/// for it.
#[derive(Debug, Clone, Default)]
pub struct Recorder(Arc<Mutex<Recording>>);

impl Recorder {
    /// A recorder with nothing recorded.
    pub fn new() -> Self {
        Recorder::default()
    }

    /// Makes this the current thread's recorder until the guard drops (the
    /// previous one, if any, comes back then). Never hold the guard across
    /// an `.await`: the task may resume on another thread.
    pub fn enter(&self) -> Entered {
        let previous = CURRENT.with(|c| c.replace(Some(self.clone())));
        Entered { previous }
    }

    /// Records a phase that ends now.
    pub fn phase(&self, name: &'static str, took: Duration) {
        self.phase_ended(name, Instant::now(), took);
    }

    /// Records a phase that ended at `end`.
    pub fn phase_ended(&self, name: &'static str, end: Instant, took: Duration) {
        let mut r = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if r.phases.len() < MAX_PHASES {
            r.phases.push(Phase { name, end, took });
        } else {
            r.phases_dropped += 1;
        }
    }

    /// Sets an attribute of the request's span.
    pub fn attribute(&self, key: &'static str, value: impl Into<Value>) {
        let value = value.into();
        let mut r = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match r.attributes.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => r.attributes.push((key, value)),
        }
    }

    /// Takes what was recorded so far.
    pub fn take(&self) -> Recording {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The guard of [`Recorder::enter`].
#[must_use = "the recorder is current while the guard lives"]
#[derive(Debug)]
pub struct Entered {
    previous: Option<Recorder>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| c.replace(previous));
    }
}

/// The current thread's recorder, to enter on another thread (the blocking
/// pool) for the same request. `None` when tracing is off.
pub fn current() -> Option<Recorder> {
    if !ENABLED.load(Ordering::Relaxed) {
        return None;
    }
    CURRENT.with(|c| c.borrow().clone())
}

/// Whether a recorder is current on this thread: callers check it before
/// building attribute values.
pub fn armed() -> bool {
    ENABLED.load(Ordering::Relaxed) && CURRENT.with(|c| c.borrow().is_some())
}

/// Records a phase ending now on the current recorder, if any.
pub fn phase(name: &'static str, took: Duration) {
    // Checked first: untraced, the clock is not read.
    if ENABLED.load(Ordering::Relaxed) {
        phase_ended(name, Instant::now(), took);
    }
}

/// Records a phase that ended at `end` on the current recorder, if any.
pub fn phase_ended(name: &'static str, end: Instant, took: Duration) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    CURRENT.with(|c| {
        if let Some(r) = c.borrow().as_ref() {
            r.phase_ended(name, end, took);
        }
    });
}

/// Sets an attribute on the current recorder, if any.
pub fn attribute(key: &'static str, value: impl Into<Value>) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    CURRENT.with(|c| {
        if let Some(r) = c.borrow().as_ref() {
            r.attribute(key, value);
        }
    });
}

/// The kind of a finished span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The server side of an RPC.
    Server,
    /// Work inside the process (a phase).
    Internal,
}

/// A finished span, in plain values.
#[derive(Debug, Clone)]
pub struct FinishedSpan {
    /// The trace it belongs to.
    pub trace_id: [u8; 16],
    /// Its own id.
    pub span_id: [u8; 8],
    /// Its parent's id (all zeros for a root).
    pub parent_span_id: [u8; 8],
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// When it started.
    pub start: SystemTime,
    /// When it ended.
    pub end: SystemTime,
    /// Its attributes.
    pub attributes: Vec<(&'static str, Value)>,
    /// Whether it ended in error.
    pub error: bool,
}

/// Where and how spans are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSettings {
    /// The OTLP/gRPC collector, e.g. `http://otel-collector:4317`.
    pub endpoint: String,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Spans waiting for export at most; more are dropped and counted.
    pub max_queue_spans: usize,
    /// The time one export call (connecting included) may take.
    pub export_timeout: Duration,
}

/// Checks an OTLP endpoint: an `http://` URI with a host. (The exporter's
/// channel has no TLS: an `https://` collector is refused here rather than
/// failing every export later; run the collector as a local agent.)
pub fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|e| format!("otlp endpoint {endpoint:?} is not a URI: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(format!(
                "otlp endpoint {endpoint:?}: https is not supported (no TLS for export): use http://"
            ));
        }
        _ => return Err(format!("otlp endpoint {endpoint:?} must start with http://")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("otlp endpoint {endpoint:?} has no host"));
    }
    Ok(())
}

enum Message {
    Spans(Vec<FinishedSpan>),
    Flush(oneshot::Sender<()>),
}

#[derive(Debug)]
struct Queue {
    tx: mpsc::UnboundedSender<Message>,
    /// Spans submitted and not yet exported (or given up on).
    queued: AtomicUsize,
    max: usize,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Message::Spans(s) => write!(f, "Spans({})", s.len()),
            Message::Flush(_) => write!(f, "Flush"),
        }
    }
}

/// The handle that queues finished spans for the export task.
#[derive(Debug, Clone)]
pub struct Exporter {
    queue: Arc<Queue>,
}

impl Exporter {
    /// Starts the export task on the current tokio runtime. Connects
    /// lazily: a collector that is down fails exports, never the start.
    pub fn start(settings: &TraceSettings) -> Result<Exporter, String> {
        check_endpoint(&settings.endpoint)?;
        let channel = tonic::transport::Endpoint::from_shared(settings.endpoint.clone())
            .map_err(|e| format!("otlp endpoint: {e}"))?
            .connect_timeout(settings.export_timeout)
            .timeout(settings.export_timeout)
            .connect_lazy();
        let (tx, rx) = mpsc::unbounded_channel();
        let queue = Arc::new(Queue {
            tx,
            queued: AtomicUsize::new(0),
            max: settings.max_queue_spans,
        });
        let client = TraceServiceClient::new(channel);
        tokio::spawn(export_loop(rx, queue.clone(), client, settings.clone()));
        ENABLED.store(true, Ordering::Relaxed);
        Ok(Exporter { queue })
    }

    /// Whether `spans` more would fit the queue now: a caller that finds
    /// no room counts them dropped with [`Exporter::dropped`] instead of
    /// building them.
    pub fn has_room(&self, spans: usize) -> bool {
        self.queue.queued.load(Ordering::Relaxed) + spans <= self.queue.max
    }

    /// Counts `spans` dropped because the queue was full.
    pub fn dropped(&self, spans: usize) {
        spans_dropped(TRACE_DROPPED_QUEUE_FULL, spans);
    }

    /// Queues one request's spans, or drops them all (counted) when the
    /// queue is full. Never waits.
    pub fn submit(&self, spans: Vec<FinishedSpan>) {
        let n = spans.len();
        let before = self.queue.queued.fetch_add(n, Ordering::Relaxed);
        if before + n > self.queue.max {
            self.queue.queued.fetch_sub(n, Ordering::Relaxed);
            spans_dropped(TRACE_DROPPED_QUEUE_FULL, n);
            return;
        }
        if self.queue.tx.send(Message::Spans(spans)).is_err() {
            self.queue.queued.fetch_sub(n, Ordering::Relaxed);
            spans_dropped(TRACE_DROPPED_EXPORT_FAILED, n);
        }
    }

    /// Exports what is queued, waiting at most `timeout` (shutdown).
    /// Returns whether the flush finished in time.
    pub async fn flush(&self, timeout: Duration) -> bool {
        let (done, wait) = oneshot::channel();
        if self.queue.tx.send(Message::Flush(done)).is_err() {
            return false;
        }
        matches!(tokio::time::timeout(timeout, wait).await, Ok(Ok(())))
    }
}

/// Collects queued spans and exports them in batches of at most
/// [`MAX_EXPORT_BATCH`]: once that many wait, [`EXPORT_INTERVAL`] after the
/// oldest arrived, or on a flush.
async fn export_loop(
    mut rx: mpsc::UnboundedReceiver<Message>,
    queue: Arc<Queue>,
    mut client: TraceServiceClient<tonic::transport::Channel>,
    settings: TraceSettings,
) {
    let resource = Resource {
        attributes: vec![key_value(
            "service.name",
            Value::Str(settings.service_name.clone()),
        )],
        ..Resource::default()
    };
    let mut pending: Vec<FinishedSpan> = Vec::new();
    // When the oldest pending span must be exported.
    let mut due = tokio::time::Instant::now();
    loop {
        let message = if pending.is_empty() {
            let m = rx.recv().await;
            due = tokio::time::Instant::now() + EXPORT_INTERVAL;
            m
        } else {
            match tokio::time::timeout_at(due, rx.recv()).await {
                Ok(m) => m,
                Err(_) => {
                    export(&mut client, &resource, &queue, &settings, &mut pending).await;
                    continue;
                }
            }
        };
        match message {
            None => {
                export(&mut client, &resource, &queue, &settings, &mut pending).await;
                return;
            }
            Some(Message::Spans(spans)) => {
                pending.extend(spans);
                if pending.len() >= MAX_EXPORT_BATCH {
                    export(&mut client, &resource, &queue, &settings, &mut pending).await;
                }
            }
            Some(Message::Flush(done)) => {
                // What arrived before the flush is exported with it (and
                // any other flush waiting is answered by the same export).
                let mut waiting = vec![done];
                while let Ok(message) = rx.try_recv() {
                    match message {
                        Message::Spans(spans) => pending.extend(spans),
                        Message::Flush(done) => waiting.push(done),
                    }
                }
                export(&mut client, &resource, &queue, &settings, &mut pending).await;
                for done in waiting {
                    let _ = done.send(());
                }
            }
        }
    }
}

/// Exports `pending` (in batches), counting the spans exported or lost.
async fn export(
    client: &mut TraceServiceClient<tonic::transport::Channel>,
    resource: &Resource,
    queue: &Queue,
    settings: &TraceSettings,
    pending: &mut Vec<FinishedSpan>,
) {
    while !pending.is_empty() {
        let take = pending.len().min(MAX_EXPORT_BATCH);
        let batch: Vec<FinishedSpan> = pending.drain(..take).collect();
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: env!("CARGO_PKG_NAME").to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                        ..InstrumentationScope::default()
                    }),
                    spans: batch.into_iter().map(to_proto).collect(),
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        let sent = tokio::time::timeout(settings.export_timeout, client.export(request)).await;
        match sent {
            Ok(Ok(_)) => spans_exported(take),
            Ok(Err(status)) => {
                debug!(code = ?status.code(), "span export failed");
                spans_dropped(TRACE_DROPPED_EXPORT_FAILED, take);
            }
            Err(_) => {
                warn!(
                    timeout_ms = settings.export_timeout.as_millis(),
                    "span export timed out"
                );
                spans_dropped(TRACE_DROPPED_EXPORT_FAILED, take);
            }
        }
        queue.queued.fetch_sub(take, Ordering::Relaxed);
    }
}

fn key_value(key: &str, value: Value) -> KeyValue {
    let value = match value {
        Value::Str(s) => any_value::Value::StringValue(s),
        Value::Int(n) => any_value::Value::IntValue(n),
        Value::Bool(b) => any_value::Value::BoolValue(b),
    };
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..KeyValue::default()
    }
}

fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn to_proto(s: FinishedSpan) -> Span {
    let parent = if s.parent_span_id == [0; 8] {
        Vec::new()
    } else {
        s.parent_span_id.to_vec()
    };
    Span {
        trace_id: s.trace_id.to_vec(),
        span_id: s.span_id.to_vec(),
        parent_span_id: parent,
        name: s.name,
        kind: match s.kind {
            Kind::Server => span::SpanKind::Server as i32,
            Kind::Internal => span::SpanKind::Internal as i32,
        },
        start_time_unix_nano: unix_nanos(s.start),
        end_time_unix_nano: unix_nanos(s.end),
        attributes: s.attributes.into_iter().map(|(k, v)| key_value(k, v)).collect(),
        status: Some(Status {
            code: if s.error {
                status::StatusCode::Error as i32
            } else {
                status::StatusCode::Unset as i32
            },
            message: String::new(),
        }),
        ..Span::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_is_kept_only_while_a_recorder_is_entered() {
        ENABLED.store(true, Ordering::Relaxed);
        phase("decode", Duration::from_micros(5));
        let recorder = Recorder::new();
        {
            let _in = recorder.enter();
            assert!(armed());
            phase("decode", Duration::from_micros(7));
            attribute("k", 3u32);
            attribute("k", 4u32);
        }
        assert!(!armed());
        phase("render", Duration::from_micros(9));
        let r = recorder.take();
        assert_eq!(r.phases.len(), 1);
        assert_eq!(r.phases[0].took, Duration::from_micros(7));
        assert_eq!(r.attributes, vec![("k", Value::Int(4))]);
    }

    #[test]
    fn endpoints_are_checked() {
        assert!(check_endpoint("http://collector:4317").is_ok());
        assert!(check_endpoint("http://10.0.0.1:4317/").is_ok());
        for bad in [
            "collector:4317",
            "ftp://x:1",
            "http://",
            "not a uri",
            "",
            "https://c:4317",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
    }
}
