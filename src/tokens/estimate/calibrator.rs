//! Coefficients refined online from exact counts, and the error an
//! estimate has been making, for one [`Generation`].
//!
//! The refinement is recursive least squares on relative error: an
//! observation of features `f` and true count `y` is the row `f / y` with
//! target 1, so a long text weighs no more than a short one and the noise is
//! the same for all (a few per cent of the count). It starts from the
//! prior, with a standard deviation of half of each prior coefficient (plus
//! a floor); it forgets old observations by a factor of [`FORGETTING`] (the
//! tokenizer may change under a model name), and caps the covariance at its
//! start so a feature absent for a long while does not wind up into a wild
//! first step when it comes back. Coefficients are clipped at [`FLOOR`] after
//! each step.
//!
//! Estimates run on the request path: they read one snapshot under a
//! read lock (coefficients, error quantile and count, published together).
//! Observations come from usage reports, off that path: they take the
//! learner's mutex, then the snapshot's write lock for a copy.

use std::sync::{Mutex, PoisonError, RwLock};

use super::{Coefficients, ContentClass, FEATURES, FLOOR, Features, Generation};

/// The relative error [`Calibrator::p99_error`] reports until
/// [`MIN_OBSERVATIONS`]: the spread of the published measurements.
pub const DEFAULT_P99_ERROR: f64 = 0.35;
/// Observations before the error quantiles are measured rather than assumed.
pub const MIN_OBSERVATIONS: u64 = 20;
/// Recent errors kept, overall and for each content class.
pub const RECENT_ERRORS: usize = 512;
/// How much each observation forgets the ones before it (a memory of about
/// 200 observations).
const FORGETTING: f64 = 0.995;
/// The relative noise of one observation the update expects.
const NOISE: f64 = 0.02;
/// The prior's uncertainty: this share of each coefficient, plus a floor in
/// tokens per feature (a zero coefficient can still grow).
const PRIOR_SPREAD: f64 = 0.5;
const PRIOR_FLOOR: f64 = 0.1;
/// The largest relative error one observation acts on: a broken report (a
/// count that includes images, say) moves the coefficients no more than a
/// 100% error would.
const MAX_STEP: f64 = 1.0;

/// What estimates read: published together, so an estimate and its
/// quantiles belong to the same moment. A copy is what a request counts
/// with ([`Calibrator::snapshot`]): every text of one request is estimated
/// by the same coefficients, whatever the calibrator learns meanwhile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot {
    /// The coefficients.
    pub coefficients: Coefficients,
    /// The 99th percentile of recent relative errors ([`Calibrator::p99_error`]).
    pub p99: f64,
    /// What a budget adds to an estimate of each [`ContentClass`] (by
    /// [`ContentClass::index`]): the 99th percentile of the recent errors
    /// on texts of that class, or [`DEFAULT_P99_ERROR`] before
    /// [`MIN_OBSERVATIONS`] of them. One error for every class would leave
    /// the class the coefficients fit worst under its budget.
    pub raise: [f64; ContentClass::ALL.len()],
    /// Observations learned from when it was taken.
    pub observations: u64,
}

impl Snapshot {
    /// A snapshot of `coefficients` raising every class by `p99`.
    pub fn uniform(coefficients: Coefficients, p99: f64, observations: u64) -> Snapshot {
        Snapshot {
            coefficients,
            p99,
            raise: [p99; ContentClass::ALL.len()],
            observations,
        }
    }

    /// The tokens a budget should reserve for a text with features `f`:
    /// `ceil(estimate × (1 + raise))` with the raise of `f`'s class,
    /// saturating at `u32::MAX`.
    pub fn budget_tokens(&self, f: &Features) -> u32 {
        let raise = self.raise[ContentClass::of(f).index()];
        Snapshot::budget_of(self.coefficients.estimate(f), raise)
    }

    /// The smallest raise of any class (for bounds that hold whatever a
    /// text's class).
    pub fn least_raise(&self) -> f64 {
        self.raise.into_iter().fold(f64::INFINITY, f64::min)
    }

    /// The largest raise of any class.
    pub fn most_raise(&self) -> f64 {
        self.raise.into_iter().fold(0.0, f64::max)
    }

    /// `ceil(estimate × (1 + raise))` of a raw estimate, saturating.
    pub fn budget_of(estimate: f64, raise: f64) -> u32 {
        let budget = (estimate.max(0.0) * (1.0 + raise)).ceil();
        // `as` saturates (and takes NaN to 0); the estimate is finite.
        budget.min(f64::from(u32::MAX)) as u32
    }
}

/// The 50th and 99th percentiles of recent relative errors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorQuantiles {
    /// Median of |estimate − true| / true.
    pub p50: f64,
    /// 99th percentile of |estimate − true| / true.
    pub p99: f64,
    /// How many errors the quantiles were taken over.
    pub samples: usize,
}

/// The estimator of one [`Generation`]: starts from its prior, learns from
/// exact counts. `Send + Sync`; share it behind an `Arc`.
#[derive(Debug)]
pub struct Calibrator {
    generation: Generation,
    snapshot: RwLock<Snapshot>,
    learner: Mutex<Learner>,
}

impl Calibrator {
    /// A calibrator at `generation`'s prior, with no observations.
    pub fn new(generation: Generation) -> Calibrator {
        let learner = Learner::new(generation.prior());
        Calibrator {
            generation,
            snapshot: RwLock::new(learner.snapshot()),
            learner: Mutex::new(learner),
        }
    }

    /// The generation this calibrator estimates.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    fn read(&self) -> Snapshot {
        *self.snapshot.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The coefficients estimates use now.
    pub fn coefficients(&self) -> Coefficients {
        self.read().coefficients
    }

    /// The estimated tokens of a text with features `f` (0 for the empty
    /// text; never less when any feature grows).
    pub fn estimate(&self, f: &Features) -> f64 {
        self.read().coefficients.estimate(f)
    }

    /// The 99th percentile of recent relative errors |estimate − true| /
    /// true, or [`DEFAULT_P99_ERROR`] before [`MIN_OBSERVATIONS`]. "Recent"
    /// is the newer half of the [`RECENT_ERRORS`] errors held (at least
    /// [`MIN_OBSERVATIONS`]): the older half was made by coefficients the
    /// observations since have corrected, and would hold the quantile at
    /// the first guesses' errors long after they stopped being made.
    pub fn p99_error(&self) -> f64 {
        self.read().p99
    }

    /// The tokens a budget should reserve for a text with features `f`
    /// ([`Snapshot::budget_tokens`]: raised by its class's error).
    pub fn budget_tokens(&self, f: &Features) -> u32 {
        self.read().budget_tokens(f)
    }

    /// The coefficients, error quantile and observation count now, together.
    pub fn snapshot(&self) -> Snapshot {
        self.read()
    }

    /// Observations learned from so far (ignored ones not counted).
    pub fn observations(&self) -> u64 {
        self.read().observations
    }

    /// Learns from an exact count: `true_tokens` is what the provider
    /// counted for a text with features `f` (its counting endpoint, say).
    /// The relative error the estimate made before learning is recorded,
    /// overall and for `f`'s [`ContentClass`]. An empty text or a zero
    /// count is ignored (a relative error needs both). Returns the signed
    /// relative error (estimate − true) / true of the estimate made before
    /// learning, and the class it was recorded under.
    pub fn observe(&self, f: &Features, true_tokens: u64) -> Option<(ContentClass, f64)> {
        if true_tokens == 0 || f.is_empty() {
            return None;
        }
        let mut learner = self.learner.lock().unwrap_or_else(PoisonError::into_inner);
        let error = learner.observe(f, true_tokens as f64);
        // Published under the learner's lock, so snapshots go out in order.
        let published = learner.snapshot();
        *self.snapshot.write().unwrap_or_else(PoisonError::into_inner) = published;
        Some((ContentClass::of(f), error))
    }

    /// Learns from a usage report, where only a whole prompt's total is
    /// known: `features_sum` is the sum of the features of every text the
    /// prompt sent (see [`Features::adds_up`] for when that equals the
    /// features of the joined text), and `true_total` is Anthropic's
    /// `input_tokens + cache_creation_input_tokens + cache_read_input_tokens`
    /// (input_tokens alone leaves out what the cache wrote and read). One
    /// observation of the summed features, classed as the sum is.
    pub fn observe_total(&self, features_sum: &Features, true_total: u64) -> Option<(ContentClass, f64)> {
        self.observe(features_sum, true_total)
    }

    /// The p50 and p99 of recent relative errors on texts of `class` (the
    /// newer half of that class's ring, as for [`Calibrator::p99_error`]),
    /// or `None` before any observation of the class. Reporting, not the
    /// request path: it takes the learner's mutex.
    pub fn error_quantiles(&self, class: ContentClass) -> Option<ErrorQuantiles> {
        let learner = self.learner.lock().unwrap_or_else(PoisonError::into_inner);
        let recent = learner.by_class.get(class.index())?.recent();
        Some(ErrorQuantiles {
            p50: quantile(&recent, 0.5)?,
            p99: quantile(&recent, 0.99)?,
            samples: recent.len(),
        })
    }
}

/// One [`Calibrator`] for each [`Generation`].
#[derive(Debug)]
pub struct Calibrators([Calibrator; 4]);

impl Calibrators {
    /// Every generation at its prior.
    pub fn new() -> Calibrators {
        Calibrators(Generation::ALL.map(Calibrator::new))
    }

    /// The calibrator of `generation`.
    pub fn get(&self, generation: Generation) -> &Calibrator {
        let [legacy, now, gemini, unknown] = &self.0;
        match generation {
            Generation::ClaudeLegacy => legacy,
            Generation::Claude2026 => now,
            Generation::Gemini => gemini,
            Generation::Unknown => unknown,
        }
    }
}

impl Default for Calibrators {
    fn default() -> Calibrators {
        Calibrators::new()
    }
}

/// Recursive least squares state and the recent errors.
#[derive(Debug)]
struct Learner {
    coefficients: [f64; FEATURES],
    /// The inverse information matrix, in units of the noise's variance.
    p: [[f64; FEATURES]; FEATURES],
    /// The diagonal of `p` at the start: the most uncertainty ever held.
    cap: [f64; FEATURES],
    all: Ring,
    by_class: [Ring; ContentClass::ALL.len()],
    observations: u64,
}

impl Learner {
    fn new(prior: Coefficients) -> Learner {
        let cap = prior
            .0
            .map(|c| ((PRIOR_SPREAD * c + PRIOR_FLOOR) / NOISE).powi(2));
        Learner {
            coefficients: prior.0,
            p: diagonal(&cap),
            cap,
            all: Ring::default(),
            by_class: Default::default(),
            observations: 0,
        }
    }

    fn snapshot(&self) -> Snapshot {
        let p99 = if self.observations < MIN_OBSERVATIONS {
            DEFAULT_P99_ERROR
        } else {
            quantile(&self.all.recent(), 0.99).unwrap_or(DEFAULT_P99_ERROR)
        };
        let raise = self.by_class.each_ref().map(|ring| {
            let recent = ring.recent();
            match quantile(&recent, 0.99) {
                Some(q) if recent.len() as u64 >= MIN_OBSERVATIONS => q,
                _ => DEFAULT_P99_ERROR,
            }
        });
        Snapshot {
            coefficients: Coefficients(self.coefficients),
            p99,
            raise,
            observations: self.observations,
        }
    }

    /// Records the error of the estimate before the update, then updates;
    /// returns that error, signed.
    fn observe(&mut self, f: &Features, y: f64) -> f64 {
        let x = f.values().map(|v| v / y);
        let relative = dot(&self.coefficients, &x);
        let error = (relative - 1.0).abs();
        self.all.push(error);
        if let Some(ring) = self.by_class.get_mut(ContentClass::of(f).index()) {
            ring.push(error);
        }
        self.observations += 1;
        self.update(&x, (1.0 - relative).clamp(-MAX_STEP, MAX_STEP));
        relative - 1.0
    }

    /// One step of recursive least squares towards `coefficients · x = 1`,
    /// whose residual is `innovation`; kept only if it stays finite.
    fn update(&mut self, x: &[f64; FEATURES], innovation: f64) {
        let px = self.p.map(|row| dot(&row, x));
        let denom = FORGETTING + dot(x, &px);
        if !(denom.is_finite() && denom > 0.0) {
            return;
        }
        let mut c = self.coefficients;
        for ((c, gain), floor) in c.iter_mut().zip(&px).zip(FLOOR.0) {
            *c = (*c + gain / denom * innovation).max(floor);
        }
        let mut p = self.p;
        for (row, pi) in p.iter_mut().zip(&px) {
            for (cell, pj) in row.iter_mut().zip(&px) {
                *cell = (*cell - pi * pj / denom) / FORGETTING;
            }
        }
        cap_variances(&mut p, &self.cap);
        let sane =
            (0..FEATURES).all(|i| p[i][i] > 0.0) && c.iter().chain(p.iter().flatten()).all(|v| v.is_finite());
        if sane {
            self.coefficients = c;
            self.p = p;
        } else {
            // Rounding lost the covariance's shape: start it again.
            self.p = diagonal(&self.cap);
        }
    }
}

/// Scales row and column `i` of `p` so no variance exceeds `cap[i]`
/// (`D p D` with `D` diagonal and positive: still positive definite).
fn cap_variances(p: &mut [[f64; FEATURES]; FEATURES], cap: &[f64; FEATURES]) {
    for (i, &most) in cap.iter().enumerate() {
        let v = p[i][i];
        if v > most {
            let s = (most / v).sqrt();
            for row in p.iter_mut() {
                row[i] *= s;
            }
            for cell in p[i].iter_mut() {
                *cell *= s;
            }
        }
    }
}

fn diagonal(d: &[f64; FEATURES]) -> [[f64; FEATURES]; FEATURES] {
    let mut m = [[0.0; FEATURES]; FEATURES];
    for (i, row) in m.iter_mut().enumerate() {
        row[i] = d[i];
    }
    m
}

fn dot(a: &[f64; FEATURES], b: &[f64; FEATURES]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

/// The `q` quantile of `values` by nearest rank, or `None` when empty.
pub(super) fn quantile(values: &[f64], q: f64) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.saturating_sub(1)).copied()
}

/// The last [`RECENT_ERRORS`] relative errors, oldest overwritten first.
#[derive(Debug, Default)]
pub(super) struct Ring {
    errors: Vec<f64>,
    /// Where the next error goes: the oldest once full (`<= errors.len()`).
    next: usize,
}

impl Ring {
    pub(super) fn push(&mut self, error: f64) {
        if self.errors.len() < RECENT_ERRORS {
            self.errors.push(error);
        } else if let Some(slot) = self.errors.get_mut(self.next) {
            *slot = error;
        }
        self.next = (self.next + 1) % RECENT_ERRORS;
    }

    /// The newer half of the errors held, but at least
    /// [`MIN_OBSERVATIONS`] of them (or all there are).
    pub(super) fn recent(&self) -> Vec<f64> {
        let n = self.errors.len();
        let keep = (n / 2).max(MIN_OBSERVATIONS as usize).min(n);
        // Oldest first: from `next` to the end, then the start.
        let (newer, older) = self.errors.split_at(self.next.min(n));
        older.iter().chain(newer).skip(n - keep).copied().collect()
    }
}
