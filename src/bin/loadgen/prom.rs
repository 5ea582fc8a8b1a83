//! Scrapes the sidecar's Prometheus endpoint (a plain HTTP/1.0 GET, so no
//! chunked body) and answers questions about one scrape: a metric's value
//! summed over the series that match some labels, or the values a label
//! takes. A scrape that fails is `None` to the caller, shown as "n/a".

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use context_assembler::telemetry::exposition::{self, Sample};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// How long one scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(3);
/// The largest page read.
const MAX_PAGE_BYTES: u64 = 64 << 20;

/// Where the metrics are.
pub struct Scraper {
    /// `host:port`.
    authority: String,
    /// Path and query, from `/`.
    path: String,
    /// Whether a failure was already reported (reported once per run).
    warned: AtomicBool,
}

/// One scrape and when it was taken.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When the page was read.
    pub at: Instant,
    samples: Vec<Sample>,
}

impl Scraper {
    /// A scraper of `url`, which must be `http://host:port/path`.
    pub fn new(url: &str) -> anyhow::Result<Scraper> {
        let rest = url
            .strip_prefix("http://")
            .with_context(|| format!("metrics URL {url:?}: only http:// is supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/metrics"),
        };
        if authority.is_empty() {
            bail!("metrics URL {url:?} has no host");
        }
        Ok(Scraper {
            authority: authority.to_owned(),
            path: path.to_owned(),
            warned: AtomicBool::new(false),
        })
    }

    /// Scrapes once; a failure is reported on stderr the first time only.
    pub async fn scrape(&self) -> Option<Snapshot> {
        match tokio::time::timeout(SCRAPE_TIMEOUT, self.fetch()).await {
            Ok(Ok(page)) => Some(Snapshot {
                at: Instant::now(),
                samples: exposition::parse(&page),
            }),
            Ok(Err(e)) => self.warn(&format!("{e:#}")),
            Err(_) => self.warn("timed out"),
        }
    }

    fn warn(&self, why: &str) -> Option<Snapshot> {
        if !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!(
                "loadgen: metrics scrape of http://{}{} failed ({why}); server figures will be n/a",
                self.authority, self.path
            );
        }
        None
    }

    async fn fetch(&self) -> anyhow::Result<String> {
        let mut stream = tokio::net::TcpStream::connect(&self.authority)
            .await
            .with_context(|| format!("connect {}", self.authority))?;
        let request = format!(
            "GET {} HTTP/1.0\r\nHost: {}\r\nAccept: text/plain\r\n\r\n",
            self.path, self.authority
        );
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.take(MAX_PAGE_BYTES).read_to_end(&mut raw).await?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n").context("no end of HTTP headers")?;
        let status = head.split_whitespace().nth(1).unwrap_or("");
        if status != "200" {
            bail!("HTTP status {status}");
        }
        Ok(body.to_owned())
    }
}

impl Snapshot {
    /// The sum of every series of `name` whose labels include `labels`;
    /// `None` when no series matches.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        exposition::sum(&self.samples, name, labels)
    }

    /// The distinct values of `label` on the series of `name`, in order of
    /// first appearance.
    pub fn label_values(&self, name: &str, label: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in self.samples.iter().filter(|s| s.name == name) {
            if let Some(v) = s.label(label)
                && !out.iter().any(|o| o == v)
            {
                out.push(v.to_owned());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The parser itself is tested in `telemetry::exposition`.
    const PAGE: &str = r#"# TYPE assembler_segment_cache_lookups_total counter
assembler_segment_cache_lookups_total{result="hit"} 90
assembler_segment_cache_lookups_total{result="miss"} 10
assembler_phase_duration_seconds_sum{phase="decode"} 0.25
assembler_phase_duration_seconds_sum{phase="tokenize"} 1.5
assembler_phase_duration_seconds_sum{phase="decode",rpc="other"} 0.5
"#;

    fn snapshot() -> Snapshot {
        Snapshot {
            at: Instant::now(),
            samples: exposition::parse(PAGE),
        }
    }

    #[test]
    fn sums_and_label_values() {
        let s = snapshot();
        assert_eq!(s.sum("assembler_segment_cache_lookups_total", &[]), Some(100.0));
        assert_eq!(
            s.sum("assembler_segment_cache_lookups_total", &[("result", "hit")]),
            Some(90.0)
        );
        assert_eq!(
            s.sum("assembler_phase_duration_seconds_sum", &[("phase", "decode")]),
            Some(0.75)
        );
        assert_eq!(s.sum("missing", &[]), None);
        assert_eq!(
            s.label_values("assembler_phase_duration_seconds_sum", "phase"),
            vec!["decode", "tokenize"]
        );
    }

    #[test]
    fn urls() {
        let s = Scraper::new("http://127.0.0.1:9464/metrics").ok();
        assert_eq!(
            s.map(|s| (s.authority, s.path)),
            Some(("127.0.0.1:9464".to_owned(), "/metrics".to_owned()))
        );
        let s = Scraper::new("http://localhost:1").ok();
        assert_eq!(s.map(|s| s.path), Some("/metrics".to_owned()));
        assert!(Scraper::new("https://x/metrics").is_err());
        assert!(Scraper::new("http:///metrics").is_err());
    }
}
