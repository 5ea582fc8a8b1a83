//! The key is sent only in its header and shown nowhere else: not in a
//! `Debug` of the settings, the counter or an error, not in a log line at
//! any level, not in a metric. Nor is the prompt's text.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use context_assembler::provider_count::{Api, CountError, PieceKind, Secret};
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::standin::{Mode, StandIn};
use crate::{piece, settings, start, until};

const KEY: &str = "sk-ant-LEAKCHECK-7f3a9c";
const TEXT: &str = "confidential prompt text PROMPTMARK";

/// A log sink in memory.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buffer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Runs a counter through learning, refusing, failing, throttling and an
/// open breaker, for both APIs; returns every `Debug` it could show.
async fn exercise(api: Api) -> Vec<String> {
    let provider = StandIn::start_with_key(KEY).await;
    let url = match api {
        Api::Anthropic => provider.anthropic_url(),
        Api::Gemini => provider.gemini_url(),
    };
    let mut s = settings(api, url);
    s.api_key = Secret::new(KEY);
    s.breaker_failures = 1;
    s.breaker_cooldown = Duration::from_secs(60);
    let mut shown = vec![
        format!("{s:?}"),
        format!("{:?}", s.api_key),
        s.api_key.to_string(),
    ];
    let (counter, sink) = start(s);
    for kind in [PieceKind::Turn, PieceKind::System] {
        counter.submit(piece("m", kind, TEXT));
    }
    until("learned", || sink.learned_len() == 2).await;
    provider.set_mode(Mode::Throttling {
        retry_after: Some(0),
        times: 1,
    });
    counter.submit(piece("m", PieceKind::Turn, "throttled PROMPTMARK"));
    until("learned after a 429", || sink.learned_len() == 3).await;
    provider.set_mode(Mode::Refusing);
    counter.submit(piece("m", PieceKind::Tools, "[{\"name\":\"PROMPTMARK\"}]"));
    until("refused", || sink.refused_texts().len() == 1).await;
    provider.set_mode(Mode::Failing);
    counter.submit(piece("m", PieceKind::Turn, "failing PROMPTMARK"));
    until("the breaker open", || counter.stats().breaker_open).await;
    let err = counter.measure_frames("new-model").await.unwrap_err();
    assert_eq!(err, CountError::BreakerOpen);
    shown.extend([format!("{err:?}"), err.to_string(), format!("{counter:?}")]);
    shown.push(format!("{:?}", piece("m", PieceKind::Turn, TEXT)));
    for r in provider.requests() {
        let header = match api {
            Api::Anthropic => "x-api-key",
            Api::Gemini => "x-goog-api-key",
        };
        assert_eq!(r.headers[header], KEY);
        for (name, value) in &r.headers {
            if name.as_str() != header {
                assert!(
                    !value.as_bytes().windows(KEY.len()).any(|w| w == KEY.as_bytes()),
                    "{name}"
                );
            }
        }
        assert!(!r.text().contains(KEY), "the key in a body");
        assert!(!r.path.contains(KEY), "the key in a path");
    }
    counter.close();
    shown
}

/// Every log line of this test binary, at every level: the one global
/// subscriber, installed by the first caller. (A scoped subscriber misses
/// events whose call site another test's thread registered first, when no
/// subscriber was interested.)
fn captured_logs() -> &'static Buffer {
    static LOGS: OnceLock<Buffer> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Buffer::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer({
                let logs = logs.clone();
                move || logs.clone()
            })
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber of this binary");
        logs
    })
}

#[tokio::test]
async fn the_key_is_sent_only_in_its_header_and_never_shown() {
    let logs = captured_logs();
    let recorder = PrometheusBuilder::new().build_recorder();
    let scrape = recorder.handle();
    let _metrics = metrics::set_default_local_recorder(&recorder);

    let mut shown = exercise(Api::Anthropic).await;
    shown.extend(exercise(Api::Gemini).await);
    // Errors the counter can make, each shown.
    for e in [
        CountError::Closed,
        CountError::Refused { status: 400 },
        CountError::Throttled,
        CountError::Unsendable { reason: "x" },
    ] {
        shown.push(format!("{e:?} {e}"));
    }
    for s in &shown {
        assert!(!s.contains(KEY), "the key in a Debug or Display: {s}");
        assert!(!s.contains("PROMPTMARK"), "prompt text in a Debug: {s}");
    }
    assert!(shown.iter().any(|s| s.contains("<redacted>")));

    let logs = logs.text();
    // The capture saw the counter's lines, so their absence means something.
    for line in [
        "provider count call",
        "provider count frames measured",
        "breaker open",
    ] {
        assert!(
            logs.contains(line),
            "no `{line}` in {} bytes of captured logs",
            logs.len()
        );
    }
    assert!(!logs.contains(KEY), "the key in a log line");
    assert!(!logs.contains("PROMPTMARK"), "prompt text in a log line");

    let scrape = scrape.render();
    for series in [
        r#"assembler_provider_count_calls_total{provider="anthropic",outcome="learned"}"#,
        r#"assembler_provider_count_calls_total{provider="gemini",outcome="refused"}"#,
        r#"assembler_provider_count_calls_total{provider="gemini",outcome="throttled"} 1"#,
        r#"assembler_provider_count_calls_total{provider="anthropic",outcome="breaker_open"} 1"#,
        r#"assembler_provider_count_queue_depth{provider="anthropic"}"#,
    ] {
        assert!(scrape.contains(series), "no {series} in:\n{scrape}");
    }
    assert!(!scrape.contains(KEY), "the key in a metric");
    assert!(!scrape.contains("PROMPTMARK"), "prompt text in a metric");
}
