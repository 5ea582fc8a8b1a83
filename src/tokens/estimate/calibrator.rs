//! Coefficients refined online from exact counts, and the error an
//! estimate has been making, for one [`Generation`].
//!
//! The refinement is least squares on relative error: an observation of
//! features `f` and true count `y` is the row `f / y` with target 1, so a
//! long text weighs no more than a short one. The coefficients are the
//! bounded least squares fit ([`FLOOR`] to [`CEILING`]) of the most recent
//! [`WINDOW`] rows, pulled towards the prior as a prior would be (each
//! coefficient's spread half of it, plus a floor, against a noise of a few
//! per cent of a count), refitted by coordinate descent from the
//! coefficients before, on normal equations kept as running sums (a row
//! added, the row it pushes out of the window taken away; summed again from
//! the rows every [`WINDOW`] observations, so rounding cannot drift). It
//! refits at every observation the estimate missed by more than
//! [`SURPRISE`], and otherwise every few (more apart as they accumulate, at
//! most [`MOST_BETWEEN_FITS`]). A window forgets: a tokenizer that changes under a model name is
//! learned again. A row whose error is past [`OUTLIER`] once the fit has
//! [`MIN_OBSERVATIONS`] rows (a report that counted images, say) is recorded
//! as an error but not fitted.
//!
//! Each [`ContentClass`] then has a scale, refitted with the coefficients
//! from its first row on, recent rows weighing more ([`SCALE_HALF_LIFE`]): a
//! kind of text the window has not held lately (JSON after hours of prose)
//! is the coefficients' compromise for other kinds, and the next piece of
//! it should not pay for that again. Until the class's recent rows weigh
//! [`MIN_CLASS_ROWS`] its scale is drawn towards 1 (as if
//! [`SCALE_PRIOR_ROWS`] rows had been exact) and held within
//! [`EARLY_SCALES`], so one odd piece cannot halve a class's budget.
//! (Refitting every few observations, and a class's scale only from its
//! eighth row, left the first seven pieces of a new kind at the
//! compromise's error: a replay's p99 of 13.6% on JSON and 10.8% on Chinese
//! after 100 observations, `a_new_kind_of_text_is_learned_from_its_first_pieces`.)
//!
//! (The first version updated by recursive least squares, clipped at the
//! bounds. On sessions of one kind of text after another, on a tokenizer no
//! linear estimate fits exactly, its clipped steps and wound-up covariance
//! left a 99th percentile error of 93% where the batch fit of the same rows
//! leaves 5%: `calibration_stays_stable_on_a_tokenizer_it_cannot_fit`.)
//!
//! Estimates run on the request path: they read one snapshot under a
//! read lock (coefficients, error quantile and count, published together).
//! Observations come from usage reports, off that path: they take the
//! learner's mutex, then the snapshot's write lock for a copy.

use std::sync::{Mutex, PoisonError, RwLock};

use super::{CEILING, Coefficients, ContentClass, FEATURES, FLOOR, Features, Generation};

/// The relative error [`Calibrator::p99_error`] reports until
/// [`MIN_OBSERVATIONS`]: the spread of the published measurements.
pub const DEFAULT_P99_ERROR: f64 = 0.35;
/// Observations before the error quantiles are measured rather than assumed.
pub const MIN_OBSERVATIONS: u64 = 20;
/// Recent errors kept, overall and for each content class.
pub const RECENT_ERRORS: usize = 512;
/// Rows the fit is made over: the most recent observations.
pub const WINDOW: usize = 512;
/// Most observations between two fits.
pub const MOST_BETWEEN_FITS: u64 = 16;
/// A relative error past which an observation is fitted at once.
pub const SURPRISE: f64 = 0.025;
/// The relative noise of one observation the fit expects (weighs the prior
/// against the rows).
const NOISE: f64 = 0.02;
/// The prior's uncertainty: this share of each coefficient, plus a floor in
/// tokens per feature (a zero coefficient can still grow).
const PRIOR_SPREAD: f64 = 0.5;
const PRIOR_FLOOR: f64 = 0.1;
/// A row whose relative error is past this is not fitted (once there are
/// [`MIN_OBSERVATIONS`]): a broken report must not drag the fit.
const OUTLIER: f64 = 1.0;
/// A class's rows before its scale is fitted without the pull towards 1
/// and the early bounds.
pub const MIN_CLASS_ROWS: usize = 8;
/// How many exact rows the pull towards a scale of 1 is worth, until
/// [`MIN_CLASS_ROWS`].
pub const SCALE_PRIOR_ROWS: f64 = 0.25;
/// Rows kept after a row that halve its weight in its class's scale.
pub const SCALE_HALF_LIFE: f64 = 64.0;
/// The bounds of a class's scale.
pub const SCALES: (f64, f64) = (0.5, 2.0);
/// The bounds of a class's scale before [`MIN_CLASS_ROWS`]: with the
/// default raise of [`DEFAULT_P99_ERROR`], a budget stays above the
/// coefficients' estimate (0.8 × 1.35 > 1).
pub const EARLY_SCALES: (f64, f64) = (0.8, 1.25);
/// Sweeps of coordinate descent a fit may take at most.
const MOST_SWEEPS: usize = 2000;

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
    /// What the coefficients' estimate of each [`ContentClass`] is
    /// multiplied by: the least squares scale of that class's rows, recent
    /// ones weighing more, bounded (tighter while the class's recent rows
    /// are few), 1 before any. One set of coefficients compromises between
    /// kinds of text; the scale takes each kind's bias out.
    pub scale: [f64; ContentClass::ALL.len()],
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
            scale: [1.0; ContentClass::ALL.len()],
            observations,
        }
    }

    /// The estimate of a text with features `f`: the coefficients' times
    /// its class's scale.
    pub fn estimate(&self, f: &Features) -> f64 {
        self.coefficients.estimate(f) * self.scale[ContentClass::of(f).index()]
    }

    /// The tokens a budget should reserve for a text with features `f`:
    /// `ceil(estimate × (1 + raise))` with the raise of `f`'s class,
    /// saturating at `u32::MAX`.
    pub fn budget_tokens(&self, f: &Features) -> u32 {
        let class = ContentClass::of(f).index();
        Snapshot::budget_of(self.coefficients.estimate(f), self.factor(class))
    }

    /// What a budget multiplies the coefficients' estimate of class
    /// `class` (an index) by: its scale and its raise.
    fn factor(&self, class: usize) -> f64 {
        self.scale[class] * (1.0 + self.raise[class])
    }

    /// The smallest factor of any class (for bounds that hold whatever a
    /// text's class).
    pub fn least_factor(&self) -> f64 {
        (0..ContentClass::ALL.len())
            .map(|k| self.factor(k))
            .fold(f64::INFINITY, f64::min)
    }

    /// The largest factor of any class.
    pub fn most_factor(&self) -> f64 {
        (0..ContentClass::ALL.len())
            .map(|k| self.factor(k))
            .fold(0.0, f64::max)
    }

    /// `ceil(estimate × factor)` of the coefficients' estimate, saturating.
    pub fn budget_of(estimate: f64, factor: f64) -> u32 {
        let budget = (estimate.max(0.0) * factor).ceil();
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
        self.read().estimate(f)
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

/// The rows fitted, the fit, and the recent errors.
#[derive(Debug)]
struct Learner {
    coefficients: [f64; FEATURES],
    prior: [f64; FEATURES],
    /// How much the prior weighs on each coefficient: (noise / spread)².
    pull: [f64; FEATURES],
    /// The most recent rows `f / y` and their classes, oldest first.
    rows: std::collections::VecDeque<([f64; FEATURES], usize)>,
    /// The normal equations of `rows`: Σ r rᵀ and Σ r.
    gram: [[f64; FEATURES]; FEATURES],
    sums: [f64; FEATURES],
    /// Rows added since the normal equations were summed from the rows.
    since_summed: usize,
    /// Each class's scale ([`Snapshot::scale`]).
    scale: [f64; ContentClass::ALL.len()],
    all: Ring,
    by_class: [Ring; ContentClass::ALL.len()],
    observations: u64,
    /// The observation count at which to fit next.
    next_fit: u64,
}

impl Learner {
    fn new(prior: Coefficients) -> Learner {
        Learner {
            coefficients: prior.0,
            prior: prior.0,
            pull: prior
                .0
                .map(|c| (NOISE / (PRIOR_SPREAD * c + PRIOR_FLOOR)).powi(2)),
            rows: std::collections::VecDeque::with_capacity(WINDOW),
            gram: [[0.0; FEATURES]; FEATURES],
            sums: [0.0; FEATURES],
            since_summed: 0,
            scale: [1.0; ContentClass::ALL.len()],
            all: Ring::default(),
            by_class: Default::default(),
            observations: 0,
            next_fit: 1,
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
            scale: self.scale,
            observations: self.observations,
        }
    }

    /// Records the error of the estimate before learning, keeps the row,
    /// and fits when the error is a surprise or a fit is due (the classes'
    /// scales otherwise); returns that error, signed.
    fn observe(&mut self, f: &Features, y: f64) -> f64 {
        let x = f.values().map(|v| v / y);
        let class = ContentClass::of(f).index();
        let relative = dot(&self.coefficients, &x) * self.scale[class];
        let error = (relative - 1.0).abs();
        self.all.push(error);
        if let Some(ring) = self.by_class.get_mut(class) {
            ring.push(error);
        }
        self.observations += 1;
        let outlier = self.observations > MIN_OBSERVATIONS && error > OUTLIER;
        if x.iter().all(|v| v.is_finite()) && !outlier {
            self.keep(x, class);
            if error > SURPRISE || self.observations >= self.next_fit {
                self.fit();
                self.next_fit = self.observations + (self.observations / 8).clamp(1, MOST_BETWEEN_FITS);
            } else {
                self.scale = self.scales();
            }
        }
        relative - 1.0
    }

    /// Keeps the row `x` of class `class`, the oldest row leaving a full
    /// window, in the rows and their normal equations.
    fn keep(&mut self, x: [f64; FEATURES], class: usize) {
        if self.rows.len() == WINDOW
            && let Some((old, _)) = self.rows.pop_front()
        {
            self.account(&old, -1.0);
        }
        self.rows.push_back((x, class));
        self.since_summed += 1;
        if self.since_summed >= WINDOW {
            // Summed again from the rows: additions and removals of the
            // last window's rows leave rounding behind.
            self.gram = [[0.0; FEATURES]; FEATURES];
            self.sums = [0.0; FEATURES];
            let rows = std::mem::take(&mut self.rows);
            rows.iter().for_each(|(r, _)| self.account(r, 1.0));
            self.rows = rows;
            self.since_summed = 0;
        } else {
            self.account(&x, 1.0);
        }
    }

    /// Adds `sign` times the row `r` to the normal equations.
    fn account(&mut self, r: &[f64; FEATURES], sign: f64) {
        for (i, ri) in r.iter().enumerate() {
            self.sums[i] += sign * ri;
            for (j, rj) in r.iter().enumerate() {
                self.gram[i][j] += sign * ri * rj;
            }
        }
    }

    /// The bounded least squares fit of the rows and the prior's pull, by
    /// cyclic coordinate descent on the normal equations from the present
    /// coefficients (convex: it reaches the minimum; warm, it takes few
    /// sweeps), then each class's scale. Kept only if finite.
    fn fit(&mut self) {
        let mut g = self.gram;
        let mut h = self.sums;
        for i in 0..FEATURES {
            g[i][i] += self.pull[i];
            h[i] += self.pull[i] * self.prior[i];
        }
        let mut c = self.coefficients;
        for _ in 0..MOST_SWEEPS {
            let mut moved: f64 = 0.0;
            for i in 0..FEATURES {
                let grad = dot(&g[i], &c) - h[i];
                let next = (c[i] - grad / g[i][i]).clamp(FLOOR.0[i], CEILING.0[i]);
                moved = moved.max((next - c[i]).abs());
                c[i] = next;
            }
            if moved < 1e-9 {
                break;
            }
        }
        if !c.iter().all(|v| v.is_finite()) {
            return;
        }
        self.coefficients = c;
        self.scale = self.scales();
    }

    /// Each class's scale s minimizes Σ w (s × c·x − 1)² over its rows,
    /// each row weighed by how recent it is (half as much every
    /// [`SCALE_HALF_LIFE`] rows kept after it), with [`SCALE_PRIOR_ROWS`]
    /// exact rows besides and within [`EARLY_SCALES`] while the weights sum
    /// to less than [`MIN_CLASS_ROWS`], within [`SCALES`] from then on. A
    /// class the window holds only from long ago (JSON-like code, hours
    /// before the JSON) is learned again from its next rows.
    fn scales(&self) -> [f64; ContentClass::ALL.len()] {
        let decay = 0.5f64.powf(1.0 / SCALE_HALF_LIFE);
        let mut sums = [(0.0f64, 0.0f64, 0.0f64); ContentClass::ALL.len()];
        let mut w = 1.0;
        for (x, class) in self.rows.iter().rev() {
            let r = dot(&self.coefficients, x);
            if let Some(s) = sums.get_mut(*class) {
                *s = (s.0 + w * r, s.1 + w * r * r, s.2 + w);
            }
            w *= decay;
        }
        sums.map(|(r, rr, n)| {
            if n < MIN_CLASS_ROWS as f64 {
                ((r + SCALE_PRIOR_ROWS) / (rr + SCALE_PRIOR_ROWS)).clamp(EARLY_SCALES.0, EARLY_SCALES.1)
            } else if rr > 0.0 {
                (r / rr).clamp(SCALES.0, SCALES.1)
            } else {
                1.0
            }
        })
    }
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
