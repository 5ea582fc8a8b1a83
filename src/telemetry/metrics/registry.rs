//! Where a series is recorded: the registry of the server it belongs to.
//!
//! A [`Registry`] is one Prometheus recorder (explicit buckets, every
//! metric described) and the handles of the series every request records
//! (see `handle_table`). The process's global recorder is a [`Router`]: each
//! `counter!`, `gauge!` or `histogram!` call goes to the registry the
//! calling thread has entered ([`Registry::enter_thread`]), else to the
//! process's registry ([`serving`] installs it), else nowhere.
//!
//! In production one server runs per process and records into the
//! process's registry: its page is the one a plain global recorder served.
//! The integration tests start many servers in one process, each on a
//! runtime of its own whose threads enter its own registry, so a counter on
//! one server's page moves only by that server's requests. The process
//! gauges (memory, descriptors, threads, CPU) read the whole process
//! whichever page shows them.
//!
//! The hot path pays one thread-local read per call: the handles are the
//! registry's own, registered on first use, never looked up by name.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::PrometheusRecorder;

use super::handle_table::Handles;

/// How often histogram storage is compacted.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

thread_local! {
    /// The registry this thread records into, when it entered one.
    static ENTERED: RefCell<Option<Arc<Registry>>> = const { RefCell::new(None) };
}

/// The process's registry, once a server outside any entered thread asked
/// for one ([`serving`]).
static PROCESS: OnceLock<Result<Arc<Registry>, String>> = OnceLock::new();

/// One server's metrics: the recorder its `/metrics` page renders and the
/// handles of its per-request series.
pub struct Registry {
    recorder: PrometheusRecorder,
    pub(super) handles: Handles,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Registry")
    }
}

impl Registry {
    /// A registry with explicit buckets and every metric described, kept
    /// up by the process's upkeep thread while it lives. Routes the
    /// process's recorder through registries (once per process); fails if
    /// another global recorder was installed first.
    pub fn new() -> Result<Arc<Registry>, String> {
        route()?;
        let recorder = super::build_recorder()?;
        metrics::with_local_recorder(&recorder, super::describe);
        let registry = Arc::new(Registry {
            recorder,
            handles: Handles::default(),
        });
        keep_up(&registry)?;
        Ok(registry)
    }

    /// From now until it ends, this thread records into `self` (a runtime's
    /// thread-start hook calls it for every thread of a server's runtime).
    pub fn enter_thread(self: &Arc<Self>) {
        let _ = ENTERED.try_with(|entered| {
            if let Ok(mut entered) = entered.try_borrow_mut() {
                *entered = Some(self.clone());
            }
        });
    }

    /// One scrape's page: the process gauges set in this registry, every
    /// series recorded so far, then the process's CPU time.
    pub fn render(&self) -> String {
        let cpu = metrics::with_local_recorder(&self.recorder, super::refresh_process);
        super::append_cpu(self.recorder.handle().render(), cpu)
    }
}

/// The registry a server starting on this thread records into and serves:
/// the one the thread entered, else the process's (built by the first
/// call, with an upkeep thread).
pub fn serving() -> Result<Arc<Registry>, String> {
    if let Some(entered) = ENTERED
        .try_with(|e| e.try_borrow().ok().and_then(|e| e.clone()))
        .ok()
        .flatten()
    {
        return Ok(entered);
    }
    PROCESS.get_or_init(Registry::new).clone()
}

/// Calls `f` with the registry this thread records into; `None` (and `f`
/// not called) when there is none.
pub(super) fn with_current<T>(f: impl FnOnce(&Registry) -> T) -> Option<T> {
    let mut f = Some(f);
    let entered = ENTERED.try_with(|entered| {
        let entered = entered.try_borrow().ok()?;
        let registry = entered.as_deref()?;
        f.take().map(|f| f(registry))
    });
    if let Ok(Some(done)) = entered {
        return Some(done);
    }
    let registry = PROCESS.get()?.as_deref().ok()?;
    f.map(|f| f(registry))
}

/// The process's global recorder: hands every call to the current
/// registry (see the module docs).
struct Router;

impl Recorder for Router {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        with_current(|r| r.recorder.describe_counter(key, unit, description));
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        with_current(|r| r.recorder.describe_gauge(key, unit, description));
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        with_current(|r| r.recorder.describe_histogram(key, unit, description));
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        with_current(|r| r.recorder.register_counter(key, metadata)).unwrap_or_else(Counter::noop)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        with_current(|r| r.recorder.register_gauge(key, metadata)).unwrap_or_else(Gauge::noop)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        with_current(|r| r.recorder.register_histogram(key, metadata)).unwrap_or_else(Histogram::noop)
    }
}

/// Installs the [`Router`] as the process's recorder, once.
fn route() -> Result<(), String> {
    static ROUTED: OnceLock<Result<(), String>> = OnceLock::new();
    ROUTED
        .get_or_init(|| metrics::set_global_recorder(Router).map_err(|e| e.to_string()))
        .clone()
}

/// Registers `registry` with the upkeep thread, which compacts the
/// histogram storage of every live registry and forgets dropped ones. The
/// thread is started by the first registry and outlives any one runtime.
fn keep_up(registry: &Arc<Registry>) -> Result<(), String> {
    static LIVE: Mutex<Vec<Weak<Registry>>> = Mutex::new(Vec::new());
    static STARTED: OnceLock<Result<(), String>> = OnceLock::new();
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Arc::downgrade(registry));
    STARTED
        .get_or_init(|| {
            std::thread::Builder::new()
                .name("metrics-upkeep".to_owned())
                .spawn(|| {
                    loop {
                        std::thread::sleep(UPKEEP_INTERVAL);
                        let live: Vec<Arc<Registry>> = {
                            let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
                            live.retain(|r| r.strong_count() > 0);
                            live.iter().filter_map(Weak::upgrade).collect()
                        };
                        for registry in live {
                            registry.recorder.handle().run_upkeep();
                        }
                    }
                })
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .clone()
}
