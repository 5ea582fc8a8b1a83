//! `[providers.anthropic.counting]` and `[providers.gemini.counting]`: the
//! provider's free counting endpoint, off unless `url` is set. The API key
//! is read here, once, from a file or an environment variable; no error
//! ever quotes it.

use std::time::Duration;

use super::ConfigError;
use super::file::{CountingSection, ProvidersSection};
use crate::provider_count::{Api, Secret, Settings};

/// Default calls per minute: Anthropic's tiers start low; Gemini allows 3,000.
const DEFAULT_RPM: [u32; 2] = [1000, 3000];
/// Most calls per minute one sidecar may make.
const MAX_RPM: u32 = 100_000;
/// Default and largest calls in flight.
const DEFAULT_CONCURRENCY: u32 = 4;
const MAX_CONCURRENCY: u32 = 64;
/// Default and bounds of one call's time, in milliseconds.
const DEFAULT_TIMEOUT_MS: u64 = 5000;
const TIMEOUT_MS: (u64, u64) = (100, 60_000);
/// Default and largest queue of pieces waiting.
const DEFAULT_QUEUE: u32 = 10_000;
const MAX_QUEUE: u32 = 1_000_000;
/// The longest a request may wait for its static prefix's count, in
/// milliseconds (default 0: never).
const MAX_WAIT_MS: u64 = 2000;
/// Failures that open the breaker, and how long it stays open.
const BREAKER_FAILURES: u32 = 5;
const BREAKER_COOLDOWN: Duration = Duration::from_secs(30);
/// The longest key read from a file or variable.
const MAX_KEY_BYTES: usize = 4096;

/// The counting endpoints configured, by provider (`anthropic`, `gemini`).
pub(super) fn counting(section: &ProvidersSection) -> Result<Vec<(&'static str, Settings)>, ConfigError> {
    let mut out = Vec::new();
    for (i, (name, api, c)) in [
        ("anthropic", Api::Anthropic, &section.anthropic.counting),
        ("gemini", Api::Gemini, &section.gemini.counting),
    ]
    .into_iter()
    .enumerate()
    {
        if let Some(settings) = one(name, api, c, DEFAULT_RPM[i])? {
            out.push((name, settings));
        }
    }
    Ok(out)
}

fn one(name: &str, api: Api, c: &CountingSection, default_rpm: u32) -> Result<Option<Settings>, ConfigError> {
    let key = |f: &str| format!("providers.{name}.counting.{f}");
    let Some(url) = &c.url else {
        let set = c.api_key_file.is_some() || c.api_key_env.is_some();
        return match set {
            true => Err(ConfigError::new(key("url"), "a key without a url: set url too")),
            false => Ok(None),
        };
    };
    let lower = url.to_ascii_lowercase();
    let http = lower.starts_with("http://") || lower.starts_with("https://");
    if !http || url.len() > 2048 || url.chars().any(char::is_whitespace) {
        return Err(ConfigError::new(key("url"), "must be an http:// or https:// URL"));
    }
    if api == Api::Gemini && !url.contains("{model}") {
        return Err(ConfigError::new(
            key("url"),
            "must hold the {model} placeholder (models/{model}:countTokens)",
        ));
    }
    let api_key = api_key(c, &key)?;
    let within = |v: u64, lo: u64, hi: u64, f: &str| {
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(ConfigError::new(
                key(f),
                format!("{v} is not between {lo} and {hi}"),
            ))
        }
    };
    let rpm = within(
        u64::from(c.requests_per_minute.unwrap_or(default_rpm)),
        1,
        u64::from(MAX_RPM),
        "requests_per_minute",
    )?;
    let concurrency = within(
        u64::from(c.concurrency.unwrap_or(DEFAULT_CONCURRENCY)),
        1,
        u64::from(MAX_CONCURRENCY),
        "concurrency",
    )?;
    let timeout = within(
        c.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
        TIMEOUT_MS.0,
        TIMEOUT_MS.1,
        "timeout_ms",
    )?;
    let wait = within(c.wait_ms.unwrap_or(0), 0, MAX_WAIT_MS, "wait_ms")?;
    let queue = within(
        u64::from(c.queue.unwrap_or(DEFAULT_QUEUE)),
        1,
        u64::from(MAX_QUEUE),
        "queue",
    )?;
    Ok(Some(Settings {
        api,
        url: url.clone(),
        api_key,
        requests_per_minute: u32::try_from(rpm).unwrap_or(MAX_RPM),
        concurrency: usize::try_from(concurrency).unwrap_or(1),
        timeout: Duration::from_millis(timeout),
        queue: usize::try_from(queue).unwrap_or(1),
        breaker_failures: BREAKER_FAILURES,
        breaker_cooldown: BREAKER_COOLDOWN,
        wait: Duration::from_millis(wait),
    }))
}

/// The key from exactly one of `api_key_file` and `api_key_env`, trimmed;
/// the errors say where it was looked for, never what was found.
fn api_key(c: &CountingSection, key: &dyn Fn(&str) -> String) -> Result<Secret, ConfigError> {
    let text = match (&c.api_key_file, &c.api_key_env) {
        (Some(path), None) => std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(
                key("api_key_file"),
                format!("cannot read {}: {}", path.display(), e.kind()),
            )
        })?,
        (None, Some(var)) => std::env::var(var).map_err(|_| {
            ConfigError::new(
                key("api_key_env"),
                format!("the variable {var} is not set (or not UTF-8)"),
            )
        })?,
        (Some(_), Some(_)) => {
            return Err(ConfigError::new(
                key("api_key_env"),
                "set api_key_file or api_key_env, not both",
            ));
        }
        (None, None) => {
            return Err(ConfigError::new(
                key("api_key_file"),
                "set api_key_file or api_key_env",
            ));
        }
    };
    let trimmed = text.trim();
    let printable = trimmed.bytes().all(|b| b.is_ascii_graphic());
    if trimmed.is_empty() || trimmed.len() > MAX_KEY_BYTES || !printable {
        let f = if c.api_key_file.is_some() {
            "api_key_file"
        } else {
            "api_key_env"
        };
        return Err(ConfigError::new(
            key(f),
            "the key must be 1 to 4096 printable ASCII characters",
        ));
    }
    Ok(Secret::new(trimmed))
}

#[cfg(test)]
mod tests;
