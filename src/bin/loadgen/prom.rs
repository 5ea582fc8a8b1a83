//! Scrapes the sidecar's Prometheus endpoint (a plain HTTP/1.0 GET, so no
//! chunked body) and answers questions about one scrape: a metric's value
//! summed over the series that match some labels, or the values a label
//! takes. A scrape that fails is `None` to the caller, shown as "n/a".

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
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

/// One series of one scrape.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
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
                samples: parse(&page),
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
        let mut matched = self
            .samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
            })
            .map(|s| s.value)
            .peekable();
        matched.peek()?;
        Some(matched.sum())
    }

    /// The distinct values of `label` on the series of `name`, in order of
    /// first appearance.
    pub fn label_values(&self, name: &str, label: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in self.samples.iter().filter(|s| s.name == name) {
            if let Some((_, v)) = s.labels.iter().find(|(k, _)| k == label)
                && !out.contains(v)
            {
                out.push(v.clone());
            }
        }
        out
    }
}

/// Parses the Prometheus text exposition format; lines it cannot read are
/// skipped.
fn parse(page: &str) -> Vec<Sample> {
    page.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(inner)?;
        labels = parsed;
        rest = after;
    }
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Reads `k="v",...}` and returns the labels and what follows the brace.
fn parse_labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start_matches([' ', ',']);
        if let Some(after) = s.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_owned();
        s = s[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        };
        labels.push((key, value));
        s = &s[end + 1..];
    }
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        s => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"# HELP process_cpu_seconds_total user and system CPU time
# TYPE process_cpu_seconds_total gauge
process_cpu_seconds_total 12.5
assembler_segment_cache_lookups_total{result="hit"} 90
assembler_segment_cache_lookups_total{result="miss"} 10
assembler_phase_duration_seconds_sum{phase="decode"} 0.25
assembler_phase_duration_seconds_sum{phase="tokenize"} 1.5 1700000000000
assembler_phase_duration_seconds_bucket{phase="decode",le="+Inf"} 7
odd_label{a="x\"y, z}",b="2"} -Inf
broken{a="unterminated} 3
"#;

    fn snapshot() -> Snapshot {
        Snapshot {
            at: Instant::now(),
            samples: parse(PAGE),
        }
    }

    #[test]
    fn reads_values_labels_and_escapes() {
        let s = snapshot();
        assert_eq!(s.sum("process_cpu_seconds_total", &[]), Some(12.5));
        assert_eq!(s.sum("assembler_segment_cache_lookups_total", &[]), Some(100.0));
        assert_eq!(
            s.sum("assembler_segment_cache_lookups_total", &[("result", "hit")]),
            Some(90.0)
        );
        assert_eq!(
            s.sum("assembler_phase_duration_seconds_sum", &[("phase", "tokenize")]),
            Some(1.5)
        );
        assert_eq!(
            s.sum("assembler_phase_duration_seconds_bucket", &[("le", "+Inf")]),
            Some(7.0)
        );
        assert_eq!(
            s.sum("odd_label", &[("a", "x\"y, z}"), ("b", "2")]),
            Some(f64::NEG_INFINITY)
        );
        assert_eq!(s.sum("broken", &[]), None);
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
