//! The one Assemble flow every edge calls, for one request or a batch: the
//! recall (fetched outside the CPU work slot, within the recall timeout,
//! then settled into the request's MEMORY block, each text once), the warm
//! try where the request was decoded, the cold run on the blocking pool
//! holding the work slot, the request metrics, and the recall report.
//! Knows nothing of any wire: an edge converts its request into a
//! [`Prepared`], admits it with its own [`Admit`], calls [`Flow::one`] or
//! [`Flow::batch`], and converts the [`Answered`] (or maps the
//! [`FlowError`]) back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::warn;

use super::batch;
use super::{AssembleError, Assembler, Attempt, Catalog, Options};
use crate::memory::RecallReport;
use crate::memory::keeper::{self, Placement, RecallFailure, RecallSpec, Recalled};
use crate::memory::store::StoreError;
use crate::memory::{Memories, MemoryError, MemoryId, MemorySettings};
use crate::prompt::{AssembleRequest, Assembly};
use crate::prompt_cache::batch::Group;
use crate::telemetry::{metrics, trace};
use crate::tokens::RequestKeys;
use crate::vocab::codes::RECALL_UNAVAILABLE;
use crate::vocab::{self, Cancel, FieldViolation};

/// How an edge admits work into the domain: a slot held while CPU work
/// runs, or the reason there is none.
pub trait Admit {
    /// What the slot is; dropping it frees the slot.
    type Permit: Send + 'static;
    /// Why a request was refused.
    type Refusal;
    /// Takes a slot now, or refuses.
    fn admit(&self) -> Result<Self::Permit, Self::Refusal>;
    /// Requests holding a slot now.
    fn in_flight(&self) -> usize;
}

/// Why a request of the flow failed.
#[derive(Debug)]
pub enum FlowError<R> {
    /// The assembler refused it.
    Assemble(AssembleError),
    /// The memory store failed its recall (the policy fails the request),
    /// or the recall was refused.
    Memory(MemoryError),
    /// Recalled memories could not be placed (a field of the request).
    Invalid(Vec<FieldViolation>),
    /// No work slot after the recall.
    Refused(R),
    /// The work panicked; the payload is never kept (it may quote content).
    Panicked,
}

/// A request ready for the flow: converted, and its recall (if it asks for
/// one) checked but not run.
#[derive(Debug)]
pub struct Prepared {
    /// The domain request.
    pub req: AssembleRequest,
    /// The recall and where its memories go.
    pub recall: Option<(RecallSpec, Placement)>,
}

/// An answered request: the assembly, and the recall report when the
/// request asked for a recall.
#[derive(Debug)]
pub struct Answered {
    /// The assembly.
    pub assembly: Assembly,
    /// What was recalled and where it went.
    pub recall: Option<RecallReport>,
}

/// A batch's answers, in the order of the requests given, and its groups
/// and order by indices into them.
#[derive(Debug)]
pub struct BatchAnswer<R> {
    /// One answer per request.
    pub results: Vec<Result<Answered, FlowError<R>>>,
    /// Requests grouped by shared prefix.
    pub groups: Vec<Group>,
    /// The order to send them in.
    pub order: Vec<usize>,
}

/// A recall done for a request: where the memories went, their ids,
/// whether the store failed to answer (then there are none), and the
/// MEMORY_DUPLICATE warning naming those left out as repeats.
#[derive(Debug)]
struct RecallDone {
    placement: Placement,
    ids: Vec<MemoryId>,
    unavailable: bool,
    duplicates: Option<vocab::Warning>,
}

/// What the store answered a recall, and how long it took.
type Fetched = (Result<Recalled, MemoryError>, Duration);

/// Requests of at most this many encoded bytes are first tried where they
/// were decoded ([`Options::inline`]: hashing, cache lookups and at most
/// [`INLINE_COUNT_BYTES`] of new text counted, no hand-off to the blocking
/// pool, whose wake-ups cost a warm request more than its assembly).
/// Hashing this much takes tens of microseconds; a quiet server's try
/// ([`try_allowance`]) may count more, for a bounded time.
pub const WARM_TRY_BYTES: usize = 64 * 1024;

pub use super::counting::INLINE_COUNT_BYTES;

/// New text an inline try may count or summarize on a quiet server
/// ([`try_allowance`]): as much as a request tried inline can hold, so a
/// fresh request is assembled where it was decoded. Past
/// [`INLINE_COUNT_BYTES`] it counts only within
/// [`TRY_TIME`](super::counting::TRY_TIME) of its start, one text of at
/// most that at a time (see [`Allowance`](super::counting::Allowance)).
/// Handing a fresh 4k request to the blocking pool cost a third more server
/// CPU and latency at concurrency 1 than assembling it in place (history
/// section 47: the threads' wake-ups, and the caches the work found cold
/// on another core).
pub const QUIET_COUNT_BYTES: usize = WARM_TRY_BYTES;

/// What an inline try may count with `in_flight` requests holding a work
/// slot (this one included) on a runtime of `workers` threads: all of it
/// while fewer requests are in flight than there are workers, so that
/// another worker is usually free to serve the sockets (work not yet
/// holding a slot, such as decoding, is not counted); else
/// [`INLINE_COUNT_BYTES`].
pub fn try_allowance(in_flight: usize, workers: usize) -> usize {
    if in_flight < workers {
        QUIET_COUNT_BYTES
    } else {
        INLINE_COUNT_BYTES
    }
}

/// The flow over a shared assembler and memory store.
#[derive(Debug, Clone)]
pub struct Flow {
    assembler: Arc<Assembler>,
    memories: Arc<Memories>,
}

impl Flow {
    /// The flow of `assembler`, recalling from `memories`.
    pub fn new(assembler: Arc<Assembler>, memories: Arc<Memories>) -> Self {
        Flow { assembler, memories }
    }

    /// The checks a recall must pass before it runs (field paths under
    /// `recall`).
    pub fn check_recall(&self, spec: &RecallSpec) -> Vec<FieldViolation> {
        self.memories.check_recall("recall", spec)
    }

    /// One request, admitted with `permit`, under `catalog` (the one in
    /// force at admission: a reload while the recall waits applies to the
    /// requests admitted after it). A recall gives the slot back while the
    /// store answers and takes one again from `admit` after it: a slow
    /// store cannot starve assembly. A request of at most
    /// [`WARM_TRY_BYTES`] on the wire (`small`) is tried warm first.
    pub async fn one<A: Admit>(
        &self,
        admit: &A,
        permit: A::Permit,
        catalog: Arc<Catalog>,
        prepared: Prepared,
        small: bool,
    ) -> Result<Answered, FlowError<A::Refusal>> {
        let Prepared { mut req, recall } = prepared;
        let (recalled, permit) = match recall {
            None => (None, permit),
            Some((spec, placement)) => {
                drop(permit);
                let fetched = fetch(self.memories.clone(), spec, req.principal.scopes.clone()).await;
                trace::phase(trace::PHASE_RECALL, fetched.1);
                let done = settle(self.memories.settings(), &mut req, placement, fetched)?;
                (Some(done), admit.admit().map_err(FlowError::Refused)?)
            }
        };
        // The try's count keys, for the full run it may give up to.
        let keys = RequestKeys::new();
        let tried = if small {
            let workers = tokio::runtime::Handle::try_current().map_or(1, |h| h.metrics().num_workers());
            let allowance = try_allowance(admit.in_flight(), workers);
            warm(&self.assembler, &catalog, req, &keys, allowance)?
        } else {
            Attempt::Cold(req, None)
        };
        let outcome = match tried {
            Attempt::Done(outcome, _) => outcome,
            Attempt::Cold(req, key) => {
                let assembler = self.assembler.clone();
                blocking(permit, move |cancel| {
                    let options = Options {
                        prefix: key.as_ref(),
                        keys: Some(&keys),
                        ..Options::new(cancel)
                    };
                    assembler.run(&catalog, req, options).done()
                })
                .await?
            }
        };
        answer(record(outcome), recalled)
    }

    /// A batch, admitted with `permit`, under `catalog`. The recalls run
    /// together, outside the work slot (each holds a store slot and is
    /// bounded by the recall timeout, so a batch waits on a slow store once,
    /// not once per request); a request whose recall fails, fails alone.
    pub async fn batch<A: Admit>(
        &self,
        admit: &A,
        permit: A::Permit,
        catalog: Arc<Catalog>,
        prepared: Vec<Prepared>,
    ) -> Result<BatchAnswer<A::Refusal>, FlowError<A::Refusal>> {
        let mut fetched: Vec<Option<Fetched>> = (0..prepared.len()).map(|_| None).collect();
        let permit = if prepared.iter().any(|p| p.recall.is_some()) {
            drop(permit);
            fetch_all(&self.memories, &prepared, &mut fetched).await;
            admit.admit().map_err(FlowError::Refused)?
        } else {
            permit
        };
        let Settled {
            results,
            valid,
            requests,
            recalls,
        } = settle_all(self.memories.settings(), prepared, fetched);
        let assembler = self.assembler.clone();
        let outcome = blocking(permit, move |cancel| {
            batch::assemble_batch(&assembler, &catalog, requests, cancel)
        })
        .await?;
        Ok(answer_batch(results, &valid, recalls, outcome))
    }
}

/// A batch's requests once their recalls are settled: those whose recall
/// failed are answered, the others are to be assembled.
struct Settled<R> {
    /// One per request: its answer when its recall failed, else `None`.
    results: Vec<Option<Result<Answered, FlowError<R>>>>,
    /// The index of each request to assemble.
    valid: Vec<usize>,
    /// The requests to assemble, in order.
    requests: Vec<AssembleRequest>,
    /// Their recalls.
    recalls: Vec<Option<RecallDone>>,
}

/// Runs the recalls of a batch together, each outside the work slot and
/// within the recall timeout: `fetched[k]` is what request `k`'s recall
/// fetched (left `None` when its task failed).
async fn fetch_all(memories: &Arc<Memories>, prepared: &[Prepared], fetched: &mut [Option<Fetched>]) {
    let mut fetches = tokio::task::JoinSet::new();
    for (k, p) in prepared.iter().enumerate() {
        if let Some((spec, _)) = &p.recall {
            let (memories, spec) = (memories.clone(), spec.clone());
            let scopes = p.req.principal.scopes.clone();
            fetches.spawn(async move { (k, fetch(memories, spec, scopes).await) });
        }
    }
    while let Some(joined) = fetches.join_next().await {
        if let Ok((k, f)) = joined {
            // Ended about now: the recalls of a batch run together.
            trace::phase(trace::PHASE_RECALL, f.1);
            fetched[k] = Some(f);
        }
    }
}

/// Settles what each request's recall fetched (`fetched[k]` for request
/// `k`; a recall without an answer is a store that did not answer) into
/// its request: a request whose recall fails is answered with the failure.
fn settle_all<R>(
    settings: &MemorySettings,
    prepared: Vec<Prepared>,
    fetched: Vec<Option<Fetched>>,
) -> Settled<R> {
    let n = prepared.len();
    let mut results: Vec<Option<Result<Answered, FlowError<R>>>> = (0..n).map(|_| None).collect();
    let mut valid: Vec<usize> = Vec::with_capacity(n);
    let mut requests = Vec::with_capacity(n);
    let mut recalls = Vec::with_capacity(n);
    for ((k, Prepared { mut req, recall }), fetched) in prepared.into_iter().enumerate().zip(fetched) {
        let recalled = match recall {
            None => None,
            Some((_, placement)) => {
                let fetched = fetched.unwrap_or_else(|| {
                    let lost = StoreError::Unavailable("recall task failed".into());
                    (Err(lost.into()), Duration::ZERO)
                });
                match settle(settings, &mut req, placement, fetched) {
                    Ok(done) => Some(done),
                    Err(e) => {
                        results[k] = Some(Err(e));
                        continue;
                    }
                }
            }
        };
        valid.push(k);
        requests.push(req);
        recalls.push(recalled);
    }
    Settled {
        results,
        valid,
        requests,
        recalls,
    }
}

/// A batch's answers in request order: `results` as settled, with the
/// answer of each request assembled (the `k`th of `outcome`, request
/// `valid[k]`, with its recall `recalls[k]`), and the outcome's groups and
/// order mapped back to request indices.
fn answer_batch<R>(
    mut results: Vec<Option<Result<Answered, FlowError<R>>>>,
    valid: &[usize],
    recalls: Vec<Option<RecallDone>>,
    outcome: batch::BatchOutcome,
) -> BatchAnswer<R> {
    for ((k, r), recalled) in outcome.results.into_iter().enumerate().zip(recalls) {
        results[valid[k]] = Some(answer(record(r), recalled));
    }
    let at = |m: usize| valid[m];
    BatchAnswer {
        // Every request was answered above, early or by the batch.
        results: results
            .into_iter()
            .map(|r| r.unwrap_or(Err(FlowError::Panicked)))
            .collect(),
        groups: outcome
            .groups
            .into_iter()
            .map(|g| Group {
                members: g.members.iter().map(|&m| at(m)).collect(),
                warmup: at(g.warmup),
                ..g
            })
            .collect(),
        order: outcome.order.into_iter().map(at).collect(),
    }
}

/// Runs a recall on the store within the recall timeout.
async fn fetch(memories: Arc<Memories>, spec: RecallSpec, scopes: Vec<String>) -> Fetched {
    let started = Instant::now();
    let _waiting = metrics::RecallInFlight::enter();
    let recalled = memories.recall_within(&spec, &scopes, now_ms()).await;
    (recalled, started.elapsed())
}

/// Puts what a recall fetched into the request's MEMORY block, each text
/// once and none the request holds already ([`Recalled::choose`]). A store
/// that did not answer leaves the block without memories (`degrade`,
/// reported as a RECALL_UNAVAILABLE warning) or fails the request (`fail`).
fn settle<R>(
    settings: &MemorySettings,
    req: &mut AssembleRequest,
    placement: Placement,
    (fetched, took): Fetched,
) -> Result<RecallDone, FlowError<R>> {
    let (chosen, unavailable) = match fetched {
        Ok(recalled) => {
            let chosen = recalled.choose(req);
            metrics::recall(took, chosen.memories.len());
            (chosen, false)
        }
        Err(MemoryError::Store(e)) => {
            metrics::recall_unavailable();
            if settings.recall_failure == RecallFailure::Fail {
                return Err(FlowError::Memory(MemoryError::Store(e)));
            }
            warn!(err = %e, "recall unavailable: assembling without memories");
            (keeper::Chosen::default(), true)
        }
        Err(e) => return Err(FlowError::Memory(e)),
    };
    let ids = chosen.memories.iter().map(|r| r.candidate.id.clone()).collect();
    let block = keeper::attach(req, &placement, keeper::items(&chosen.memories), "recall")
        .map_err(|v| FlowError::Invalid(vec![v]))?;
    Ok(RecallDone {
        placement,
        ids,
        unavailable,
        duplicates: chosen.warning(block),
    })
}

/// An assembly with its recall report (and a RECALL_UNAVAILABLE warning
/// when the store did not answer, or a MEMORY_DUPLICATE one naming the
/// memories left out as repeats).
fn answer<R>(
    outcome: Result<Assembly, AssembleError>,
    mut recalled: Option<RecallDone>,
) -> Result<Answered, FlowError<R>> {
    let mut assembly = outcome.map_err(FlowError::Assemble)?;
    if recalled.as_ref().is_some_and(|r| r.unavailable) {
        assembly.warnings.push(vocab::Warning {
            code: RECALL_UNAVAILABLE,
            message: "the memory store did not answer the recall in time: no memories recalled".into(),
            about: Vec::new(),
        });
    }
    if let Some(duplicates) = recalled.as_mut().and_then(|r| r.duplicates.take()) {
        assembly.warnings.push(duplicates);
    }
    let recall = recalled.map(|r| keeper::report(&assembly, &r.placement, &r.ids));
    Ok(Answered { assembly, recall })
}

/// Records an assembly's metrics (or a budget overflow) and passes it on.
fn record(outcome: Result<Assembly, AssembleError>) -> Result<Assembly, AssembleError> {
    match &outcome {
        Ok(a) => {
            for d in &a.decisions {
                metrics::block_decision(
                    d.kind.as_str(),
                    d.outcome.as_str(),
                    d.dropped_item_ids.len(),
                    d.filtered_item_ids.len(),
                );
            }
            metrics::prompt_tokens(a.usage.static_tokens, a.usage.dynamic_tokens);
        }
        Err(AssembleError::BudgetOverflow { model, .. }) => metrics::budget_overflow(model.clone()),
        Err(_) => {}
    }
    outcome
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Sets the cancellation flag when dropped: when the edge's deadline drops
/// the handler, and when the caller goes away.
struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Runs short domain work on this thread, holding `permit` until it ends;
/// a panic there is [`FlowError::Panicked`], as on the pool.
pub fn inline<P, T, R>(permit: P, f: impl FnOnce(&Cancel) -> T) -> Result<T, FlowError<R>> {
    let _permit = permit;
    let cancel = Cancel::new();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&cancel))).map_err(|_| {
        // Never the panic payload: it may quote request content.
        warn!(panicked = true, "domain work failed");
        FlowError::Panicked
    })
}

/// Runs longer domain work on this thread, [`inline`], after handing this
/// worker's other tasks to another thread (`block_in_place`): no hand-off
/// of the work or its result, and the runtime keeps serving. On a runtime
/// that cannot (a current-thread one, as in some tests) it is
/// [`blocking`]. The work cannot be cancelled once begun.
pub async fn in_place<P: Send + 'static, T: Send + 'static, R>(
    permit: P,
    f: impl FnOnce(&Cancel) -> T + Send + 'static,
) -> Result<T, FlowError<R>> {
    if tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
        tokio::task::block_in_place(|| inline(permit, f))
    } else {
        blocking(permit, f).await
    }
}

/// A try on this thread ([`inline`]) counting at most `allowance` bytes of
/// new text ([`try_allowance`]), keeping the count keys it makes in `keys`.
fn warm<R>(
    assembler: &Assembler,
    catalog: &Catalog,
    req: AssembleRequest,
    keys: &RequestKeys,
    allowance: usize,
) -> Result<Attempt, FlowError<R>> {
    inline((), |cancel| {
        let options = Options {
            inline: Some(allowance),
            keys: Some(keys),
            ..Options::new(cancel)
        };
        assembler.run(catalog, req, options)
    })
}

/// Runs CPU-bound domain work on the blocking pool, holding `permit` until
/// the work itself ends (so the slot counts work, not waiting callers), and
/// cancelling it when the caller's future is dropped. A panic there is
/// [`FlowError::Panicked`] instead of taking the connection down.
pub async fn blocking<P: Send + 'static, T: Send + 'static, R>(
    permit: P,
    f: impl FnOnce(&Cancel) -> T + Send + 'static,
) -> Result<T, FlowError<R>> {
    let cancel = Cancel::new();
    let _on_drop = CancelOnDrop(cancel.clone());
    let span = tracing::Span::current();
    // The request's trace recorder (tracing on), so the domain's phases on
    // the blocking pool are kept as spans.
    let recorder = trace::current();
    let task = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let _recording = recorder.as_ref().map(trace::Recorder::enter);
        span.in_scope(|| f(&cancel))
    });
    task.await.map_err(|e| {
        // Never the panic payload: it may quote request content.
        warn!(panicked = e.is_panic(), "domain task failed");
        FlowError::Panicked
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_try_counts_a_whole_request_only_while_a_worker_is_left_free() {
        assert_eq!(try_allowance(1, 2), QUIET_COUNT_BYTES);
        assert_eq!(try_allowance(2, 2), INLINE_COUNT_BYTES);
        assert_eq!(try_allowance(7, 8), QUIET_COUNT_BYTES);
        assert_eq!(try_allowance(9, 8), INLINE_COUNT_BYTES);
        // A runtime of one thread never holds it for long.
        assert_eq!(try_allowance(1, 1), INLINE_COUNT_BYTES);
        const { assert!(QUIET_COUNT_BYTES > INLINE_COUNT_BYTES) };
    }
}
