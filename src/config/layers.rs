//! The layers of the server's settings, described once: each `serve` flag
//! (its variable read by clap) over the file key it names, over the file,
//! over the embedded default; and, for errors, the name each value was given
//! under. What a value may be is checked in [`super::validate`].

use clap::Args as _;

use super::file::{FileConfig, Layer as _, load_file};
use super::{ConfigError, ServeArgs};

/// Pairs each `serve` flag with the file key it overrides: builds the flag
/// layer, a [`FileConfig`] holding the flags given, and [`FLAG_KEYS`].
macro_rules! flags {
    ($($flag:ident => $section:ident $(. $field:ident)+;)*) => {
        /// The flags given, as a file layer, and the file keys they set.
        fn flag_layer(args: &ServeArgs) -> (FileConfig, Vec<&'static str>) {
            let mut layer = FileConfig::default();
            let mut given = Vec::new();
            $(if let Some(value) = &args.$flag {
                layer.$section$(.$field)+ = Some(value.clone());
                given.push(concat!(stringify!($section) $(, ".", stringify!($field))+));
            })*
            (layer, given)
        }

        /// Each file key a flag overrides, with that flag's clap id.
        const FLAG_KEYS: &[(&str, &str)] = &[
            $((concat!(stringify!($section) $(, ".", stringify!($field))+), stringify!($flag)),)*
        ];
    };
}

flags! {
    listen => server.listen;
    metrics_listen => server.metrics_listen;
    render_listen => render.listen;
    cache_mib => cache.mib;
    drain_secs => server.drain_secs;
    log_format => server.log_format;
    max_request_bytes => limits.max_request_bytes;
    max_blocks => limits.max_blocks;
    max_items => limits.max_items;
    max_batch_requests => limits.max_batch_requests;
    max_concurrency => limits.max_concurrency;
    default_timeout_ms => limits.default_timeout_ms;
    max_connections => limits.max_connections;
    tls_cert => server.tls.cert;
    tls_key => server.tls.key;
    tls_client_ca => server.tls.client_ca;
    memory_store => memory.store;
    memory_sqlite_path => memory.sqlite_path;
    memory_postgres_url => memory.postgres_url;
    otlp_endpoint => telemetry.otlp_endpoint;
    otlp_service_name => telemetry.service_name;
}

/// `--flag (VARIABLE)`, as clap declares the `serve` flag `id`.
fn flag_name(id: &str) -> String {
    let serve = ServeArgs::augment_args(clap::Command::new("serve"));
    let arg = serve.get_arguments().find(|a| a.get_id() == id);
    match arg.and_then(|a| Some((a.get_long()?, a.get_env()?))) {
        Some((long, env)) => format!("--{long} ({})", env.to_string_lossy()),
        None => id.to_owned(),
    }
}

/// Every setting, layered, and the keys the flags set.
pub(super) struct Layers {
    /// Each value from the highest layer that sets it.
    pub(super) merged: FileConfig,
    /// The file keys whose value came from a flag (or its variable).
    given: Vec<&'static str>,
}

impl Layers {
    /// Flags over the file named by `--config` over the embedded default.
    pub(super) fn new(args: &ServeArgs) -> Result<Layers, ConfigError> {
        let (flags, given) = flag_layer(args);
        Ok(Layers {
            merged: flags.over(load_file(args.config.as_deref())?),
            given,
        })
    }

    /// `key` as its value was given: the flag and its variable, or the key.
    pub(super) fn name(&self, key: &str) -> String {
        self.name_like(key, key)
    }

    /// `key` named the way `like` was given: by its flag if `like` came
    /// from a flag (the missing half of a pair is named as the given half).
    pub(super) fn name_like(&self, key: &str, like: &str) -> String {
        match FLAG_KEYS.iter().find(|(k, _)| *k == key) {
            Some((_, id)) if self.given.contains(&like) => flag_name(id),
            _ => key.to_owned(),
        }
    }

    /// An error about `key`, named as it was given.
    pub(super) fn error(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::new(self.name(key), message)
    }

    /// The value of `key`, which the embedded default sets.
    pub(super) fn required<'a, T>(&self, key: &str, value: &'a Option<T>) -> Result<&'a T, ConfigError> {
        value
            .as_ref()
            .ok_or_else(|| ConfigError::new(key, "missing (and no embedded default)"))
    }

    /// `value` of `key` if it lies between `lo` and `hi`.
    pub(super) fn within(&self, key: &str, value: u64, lo: u64, hi: u64) -> Result<u64, ConfigError> {
        if (lo..=hi).contains(&value) {
            Ok(value)
        } else {
            Err(self.error(key, format!("{value} is not between {lo} and {hi}")))
        }
    }

    /// [`Self::required`], then [`Self::within`].
    pub(super) fn bounded<T>(&self, key: &str, value: Option<T>, lo: u64, hi: u64) -> Result<u64, ConfigError>
    where
        T: Copy + Into<u64>,
    {
        self.within(key, (*self.required(key, &value)?).into(), lo, hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new `serve` flag needs a line in `flags!`, or it would be ignored.
    #[test]
    fn every_serve_flag_but_config_overrides_a_file_key() {
        let serve = ServeArgs::augment_args(clap::Command::new("serve"));
        let ids: Vec<&str> = serve
            .get_arguments()
            .map(|a| a.get_id().as_str())
            .filter(|id| *id != "config")
            .collect();
        let flagged: Vec<&str> = FLAG_KEYS.iter().map(|(_, id)| *id).collect();
        assert_eq!(ids, flagged);
    }

    #[test]
    fn a_flag_is_named_with_its_variable() {
        assert_eq!(flag_name("listen"), "--listen (CONTEXT_ASSEMBLER_LISTEN)");
        assert_eq!(
            flag_name("otlp_service_name"),
            "--otlp-service-name (OTEL_SERVICE_NAME)"
        );
    }
}
