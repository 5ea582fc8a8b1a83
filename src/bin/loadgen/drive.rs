//! The load itself: `concurrency` workers claim tickets (positions in the
//! endless replay of the workload), send them as `Assemble`, `AssembleBatch`
//! or `AssembleStream` calls over the shared connections, check every answer
//! and record its latency.
//!
//! Closed loop (no rate): a worker sends its next request as soon as the last
//! one is answered, and latency runs from the send. Open loop (a rate):
//! ticket `i` is due at `start + i / rate` whatever happened before, and an
//! overdue ticket's latency runs from its due time, so a slow answer that
//! delays the next sends is charged to those requests too (no coordinated
//! omission).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use context_assembler::grpc::pb::{self, assembler_client::AssemblerClient};
use tokio::sync::watch;
use tonic::Code;
use tonic::transport::Channel;

use crate::hist::Histogram;
use crate::kept::{KeptShare, Offers};
use crate::sessions::{self, SessionAnswer};

mod check;
mod stream;

use check::{check, check_groups, failed, sample};

/// Which RPC carries the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Rpc {
    /// One unary `Assemble` call per request.
    Assemble,
    /// `AssembleBatch` calls of `--batch-size` consecutive requests.
    Batch,
    /// One `AssembleStream` per worker, one request in flight on each.
    Stream,
}

impl Rpc {
    /// The method name, as the server labels it.
    pub fn method(self) -> &'static str {
        match self {
            Rpc::Assemble => "Assemble",
            Rpc::Batch => "AssembleBatch",
            Rpc::Stream => "AssembleStream",
        }
    }
}

/// What to send, how fast and for how long.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The RPC.
    pub rpc: Rpc,
    /// Workers, hence calls in flight at most.
    pub concurrency: usize,
    /// Requests per second (open loop); 0 = closed loop.
    pub rate: f64,
    /// Requests per `AssembleBatch` call.
    pub batch_size: usize,
    /// Stop sending after this long, if given.
    pub duration: Option<Duration>,
    /// Stop after this many requests, if given.
    pub requests: Option<u64>,
    /// The per-call deadline (`grpc-timeout`; per message on a stream,
    /// enforced by the client).
    pub deadline: Duration,
    /// Make every request's content unique so no server cache can hit.
    pub cold: bool,
    /// Keep up to this many OK answers (every [`SAMPLE_EVERY`]th ticket)
    /// for a recount with the reference tokenizer; 0 = none.
    pub sample_answers: usize,
    /// 0 for the replay workload; for the session workload, its number of
    /// sessions: the workload lists request `r` of session `s` at
    /// `r * sessions + s`, so a session's requests go in order, each long
    /// after its predecessor (when there are more sessions than workers).
    pub sessions: usize,
}

/// One answer in this many is sampled (a prime, so that the samples spread
/// over the workload's families and users).
pub const SAMPLE_EVERY: u64 = 7;

/// What happened to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// OK and well-formed.
    Ok,
    /// A gRPC status other than OK, and its message.
    Status(Code, String),
    /// OK but wrong: the reason.
    Malformed(&'static str),
}

/// Everything recorded so far.
#[derive(Clone, Default)]
pub struct Stats {
    /// Latency per call over the whole run.
    pub per_call: Histogram,
    /// Latency per request: a batch call's latency divided by its size.
    pub per_request: Histogram,
    /// Requests answered OK and well-formed.
    pub ok: u64,
    /// Calls completed (a batch is one call).
    pub calls: u64,
    /// Requests that ended in a status other than OK, by status name.
    pub codes: BTreeMap<&'static str, u64>,
    /// Requests answered OK but malformed, by reason.
    pub malformed: BTreeMap<&'static str, u64>,
    /// The first message seen for each status in `codes`, cut to
    /// [`MESSAGE_CHARS`] (status messages name fields and counts, never
    /// prompt content).
    pub messages: BTreeMap<&'static str, String>,
}

/// The longest status message kept.
const MESSAGE_CHARS: usize = 160;

impl Stats {
    /// Requests that did not succeed.
    pub fn errors(&self) -> u64 {
        self.codes.values().sum::<u64>() + self.malformed.values().sum::<u64>()
    }

    /// Requests completed, successfully or not.
    pub fn completed(&self) -> u64 {
        self.ok + self.errors()
    }
}

/// The progress since the previous window.
pub struct Window {
    /// Seconds since the run started.
    pub elapsed: Duration,
    /// Requests sent so far.
    pub sent: u64,
    /// Requests OK so far.
    pub ok: u64,
    /// Requests failed so far.
    pub errors: u64,
    /// Requests completed per second in this window.
    pub rps: f64,
    /// Median call latency in this window.
    pub p50: Option<Duration>,
    /// 99th percentile call latency in this window.
    pub p99: Option<Duration>,
}

struct Recorder {
    stats: Stats,
    /// Sampled OK answers: what the reference recount needs of each.
    answers: Vec<serde_json::Value>,
    /// Answers of the measured sessions (session workload).
    session_answers: Vec<SessionAnswer>,
    /// What the answers kept of their offers (fresh workload).
    kept: KeptShare,
    window: Histogram,
    window_started: Instant,
    window_completed: u64,
}

/// One run: the plan, the workload and what was recorded.
pub struct Driver {
    plan: Plan,
    workload: Arc<[pb::AssembleRequest]>,
    /// Distinguishes this run's cold nonces from an earlier run's.
    run_id: u64,
    started: Instant,
    next: AtomicU64,
    sent: AtomicU64,
    stop: watch::Receiver<bool>,
    recorder: Mutex<Recorder>,
    /// Each distinct request's offer, when the kept share is measured.
    offers: Option<Offers>,
}

/// The tickets one call carries.
#[derive(Debug, Clone, Copy)]
struct Tickets {
    first: u64,
    count: u64,
}

impl Driver {
    /// A run starting now. `stop` turning true ends it early (in-flight calls
    /// still complete).
    pub fn new(plan: Plan, workload: Arc<[pb::AssembleRequest]>, stop: watch::Receiver<bool>) -> Driver {
        let now = Instant::now();
        Driver {
            plan,
            workload,
            run_id: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            started: now,
            next: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            stop,
            recorder: Mutex::new(Recorder {
                stats: Stats::default(),
                answers: Vec::new(),
                session_answers: Vec::new(),
                kept: KeptShare::default(),
                window: Histogram::default(),
                window_started: now,
                window_completed: 0,
            }),
            offers: None,
        }
    }

    /// Measures what every OK answer kept of its request's offer (`offers`
    /// in workload order; `None`: not measured).
    pub fn measuring_kept(mut self, offers: Option<Offers>) -> Driver {
        self.offers = offers;
        self
    }

    /// What the answers kept of their offers, if measured.
    pub fn kept_share(&self) -> Option<KeptShare> {
        self.offers.as_ref().map(|_| self.lock().kept.clone())
    }

    /// Runs the workers to the end; returns the wall time from the start to
    /// the last answer.
    pub async fn run(self: Arc<Self>, clients: &[AssemblerClient<Channel>]) -> anyhow::Result<Duration> {
        let workers: Vec<_> = (0..self.plan.concurrency)
            .map(|w| {
                let driver = self.clone();
                let clients = clients.to_vec();
                tokio::spawn(async move {
                    match driver.plan.rpc {
                        Rpc::Assemble => driver.unary_worker(&clients).await,
                        Rpc::Batch => driver.batch_worker(&clients).await,
                        Rpc::Stream => driver.stream_worker(&clients[w % clients.len()]).await,
                    }
                })
            })
            .collect();
        for w in workers {
            w.await?;
        }
        Ok(self.started.elapsed())
    }

    /// Requests sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// A copy of everything recorded.
    pub fn stats(&self) -> Stats {
        self.lock().stats.clone()
    }

    /// The sampled answers (JSON objects: rpc, request id, tokenizer, total
    /// tokens, budget, messages with role and content).
    pub fn answers(&self) -> Vec<serde_json::Value> {
        self.lock().answers.clone()
    }

    /// The answers of the measured sessions (session workload).
    pub fn session_answers(&self) -> Vec<SessionAnswer> {
        self.lock().session_answers.clone()
    }

    /// Checks an OK answer to `ticket` and samples it if it is well-formed.
    fn checked(&self, resp: &pb::AssembleResponse, ticket: u64) -> Outcome {
        let sent = self.template(ticket);
        let outcome = check(resp, sent);
        if outcome != Outcome::Ok {
            return outcome;
        }
        let index = (ticket % self.workload.len() as u64) as usize;
        if let Some((offered, kept)) = self
            .offers
            .as_ref()
            .and_then(|o| o.measure(index, resp, self.nonce(ticket).as_deref()))
        {
            let budget = resp.usage.as_ref().map_or(0, |u| u.budget);
            self.lock().kept.add(offered, kept, budget);
        }
        if ticket.is_multiple_of(SAMPLE_EVERY) {
            let mut r = self.lock();
            if r.answers.len() < self.plan.sample_answers {
                r.answers.push(sample(self.plan.rpc, resp));
            }
        }
        // The first pass of every measured session.
        if let Some((session, position)) = self.session_of(ticket)
            && ticket < self.workload.len() as u64
            && session.is_multiple_of(sessions::SAMPLE_EVERY)
        {
            let mut r = self.lock();
            if r.session_answers.len() < sessions::MAX_ANSWERS {
                r.session_answers
                    .push(SessionAnswer::new(session, position, sent, resp));
            }
        }
        outcome
    }

    /// The session of a ticket and the request's position in it (session
    /// workload).
    fn session_of(&self, ticket: u64) -> Option<(usize, usize)> {
        let n = self.plan.sessions;
        let at = (ticket % self.workload.len() as u64) as usize;
        (n > 0).then(|| (at % n, at / n))
    }

    /// The outcome of one result of a batch or a stream.
    fn result(&self, r: &pb::AssembleResult, ticket: u64) -> Outcome {
        match &r.result {
            Some(pb::assemble_result::Result::Response(resp)) => self.checked(resp, ticket),
            Some(pb::assemble_result::Result::Error(e)) => match Code::from(e.code) {
                // An error that says OK is not an answer.
                Code::Ok => Outcome::Malformed("error with code OK"),
                code => Outcome::Status(code, e.message.clone()),
            },
            None => Outcome::Malformed("empty result"),
        }
    }

    /// The progress since the last call, and a new window.
    pub fn window(&self) -> Window {
        let mut r = self.lock();
        let now = Instant::now();
        let completed = r.stats.completed();
        let secs = now.duration_since(r.window_started).as_secs_f64();
        let window = Window {
            elapsed: now.duration_since(self.started),
            sent: self.sent(),
            ok: r.stats.ok,
            errors: r.stats.errors(),
            rps: if secs > 0.0 {
                (completed - r.window_completed) as f64 / secs
            } else {
                0.0
            },
            p50: r.window.quantile(0.5),
            p99: r.window.quantile(0.99),
        };
        r.window.reset();
        r.window_started = now;
        r.window_completed = completed;
        window
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorder> {
        // A worker that panicked mid-record leaves counts that are still
        // counts: keep going.
        self.recorder.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Claims the next `want` tickets, or `None` when the run is over.
    fn claim(&self, want: u64) -> Option<Tickets> {
        if self.stopped() {
            return None;
        }
        let first = self.next.fetch_add(want, Ordering::Relaxed);
        let count = match self.plan.requests {
            Some(n) if first >= n => return None,
            Some(n) => want.min(n - first),
            None => want,
        };
        if let Some(d) = self.plan.duration {
            let at = self.due(first + count - 1).unwrap_or_else(Instant::now);
            if at.duration_since(self.started) >= d {
                return None;
            }
        }
        Some(Tickets { first, count })
    }

    /// When a ticket is due on the open-loop schedule.
    fn due(&self, ticket: u64) -> Option<Instant> {
        (self.plan.rate > 0.0).then(|| self.started + Duration::from_secs_f64(ticket as f64 / self.plan.rate))
    }

    /// Waits until the last of `tickets` is due (open loop) and returns the
    /// instant its latency counts from; `None` if the run was stopped.
    ///
    /// A ticket already overdue when its worker gets to it waited behind
    /// slow calls: its latency counts from when it was due. A worker that
    /// is early sleeps, and counts from when it wakes: the timer's slack (up
    /// to a millisecond) is the client's, not the server's.
    async fn wait_due(&self, tickets: Tickets) -> Option<Instant> {
        let Some(at) = self.due(tickets.first + tickets.count - 1) else {
            return Some(Instant::now());
        };
        if Instant::now() >= at {
            return Some(at);
        }
        let mut stop = self.stop.clone();
        tokio::select! {
            () = tokio::time::sleep_until(at.into()) => Some(Instant::now()),
            _ = stop.wait_for(|s| *s) => None,
        }
    }

    /// The request of a ticket: the workload in a loop, made unique when
    /// cold. Ids are kept.
    fn request(&self, ticket: u64) -> pb::AssembleRequest {
        let mut r = self.template(ticket).clone();
        if let Some(nonce) = self.nonce(ticket) {
            for s in &mut r.static_segments {
                s.content.insert_str(0, &nonce);
            }
            for item in r.blocks.iter_mut().flat_map(|b| b.items.iter_mut()) {
                item.content.insert_str(0, &nonce);
                if let Some(c) = &mut item.compact_form {
                    c.insert_str(0, &nonce);
                }
                // Thinking text is counted on its own (a redacted block's
                // data is opaque, never counted).
                for t in item.thinking.iter_mut().filter(|t| !t.redacted) {
                    t.text.insert_str(0, &nonce);
                }
            }
            r.query.insert_str(0, &nonce);
        }
        r
    }

    /// What a cold run puts before every text of a ticket's request.
    fn nonce(&self, ticket: u64) -> Option<String> {
        if !self.plan.cold {
            return None;
        }
        // Sessions stay sessions: one nonce per session and pass over the
        // workload, so each request repeats its predecessor's turns.
        Some(match self.session_of(ticket) {
            Some((session, _)) => {
                let pass = ticket / self.workload.len() as u64;
                format!("r{:x}.{pass}.s{session} ", self.run_id)
            }
            None => format!("r{:x}.{ticket} ", self.run_id),
        })
    }

    fn template(&self, ticket: u64) -> &pb::AssembleRequest {
        &self.workload[(ticket % self.workload.len() as u64) as usize]
    }

    fn record(&self, latency: Duration, outcomes: &[Outcome]) {
        let mut r = self.lock();
        r.stats.per_call.record(latency);
        r.window.record(latency);
        r.stats.calls += 1;
        if self.plan.rpc == Rpc::Batch {
            r.stats
                .per_request
                .record(latency / u32::try_from(outcomes.len().max(1)).unwrap_or(u32::MAX));
        }
        for o in outcomes {
            match o {
                Outcome::Ok => r.stats.ok += 1,
                Outcome::Status(code, message) => {
                    let name = context_assembler::grpc::status::code_label(*code);
                    *r.stats.codes.entry(name).or_default() += 1;
                    r.stats
                        .messages
                        .entry(name)
                        .or_insert_with(|| message.chars().take(MESSAGE_CHARS).collect());
                }
                Outcome::Malformed(why) => *r.stats.malformed.entry(why).or_default() += 1,
            }
        }
    }

    async fn unary_worker(&self, clients: &[AssemblerClient<Channel>]) {
        while let Some(t) = self.claim(1) {
            let Some(from) = self.wait_due(t).await else { break };
            let mut call = tonic::Request::new(self.request(t.first));
            call.set_timeout(self.plan.deadline);
            let mut client = clients[(t.first % clients.len() as u64) as usize].clone();
            self.sent.fetch_add(1, Ordering::Relaxed);
            let outcome = match client.assemble(call).await {
                Ok(r) => self.checked(&r.into_inner(), t.first),
                Err(status) => failed(&status),
            };
            self.record(from.elapsed(), &[outcome]);
        }
    }

    async fn batch_worker(&self, clients: &[AssemblerClient<Channel>]) {
        let size = self.plan.batch_size as u64;
        while let Some(t) = self.claim(size) {
            let Some(from) = self.wait_due(t).await else { break };
            let requests: Vec<pb::AssembleRequest> =
                (t.first..t.first + t.count).map(|i| self.request(i)).collect();
            let salts: Vec<String> = requests.iter().map(|r| r.cache_salt.clone()).collect();
            let mut call = tonic::Request::new(pb::AssembleBatchRequest { requests });
            call.set_timeout(self.plan.deadline);
            let mut client = clients[((t.first / size) % clients.len() as u64) as usize].clone();
            self.sent.fetch_add(t.count, Ordering::Relaxed);
            let outcomes: Vec<Outcome> = match client.assemble_batch(call).await {
                Ok(r) => {
                    let answer = r.into_inner();
                    if answer.results.len() as u64 == t.count {
                        let outcomes = answer
                            .results
                            .iter()
                            .zip(t.first..)
                            .map(|(r, i)| self.result(r, i));
                        match check_groups(&answer, &salts) {
                            Ok(()) => outcomes.collect(),
                            // Every answer of a batch mis-grouped is wrong.
                            Err(why) => outcomes
                                .map(|o| {
                                    if o == Outcome::Ok {
                                        Outcome::Malformed(why)
                                    } else {
                                        o
                                    }
                                })
                                .collect(),
                        }
                    } else {
                        vec![Outcome::Malformed("batch result count"); t.count as usize]
                    }
                }
                Err(status) => vec![failed(&status); t.count as usize],
            };
            self.record(from.elapsed(), &outcomes);
        }
    }
}

#[cfg(test)]
mod tests;
