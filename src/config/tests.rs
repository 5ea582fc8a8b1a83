use std::io::Write as _;

use super::*;
use crate::memory::keeper::RecallFailure;
use crate::vocab::Role;

fn parse(args: &[&str]) -> Cli {
    Cli::try_parse_from(std::iter::once("context-assembler").chain(args.iter().copied())).unwrap()
}

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

fn with_file(text: &str) -> (tempfile::NamedTempFile, Result<ServerConfig, ConfigError>) {
    let f = file(text);
    let args = ServeArgs {
        config: Some(f.path().to_owned()),
        ..ServeArgs::default()
    };
    let r = args.validate();
    (f, r)
}

fn err_key(text: &str) -> String {
    with_file(text).1.unwrap_err().key
}

#[test]
fn the_embedded_default_gives_the_documented_defaults() {
    let cli = parse(&[]);
    assert!(cli.command.is_none());
    let cfg = cli.serve.validate().unwrap();
    assert_eq!(cfg.listen, ListenAddr::Tcp("127.0.0.1:50051".parse().unwrap()));
    assert_eq!(cfg.metrics_listen, Some("127.0.0.1:9464".parse().unwrap()));
    assert_eq!(cfg.cache_bytes, 64 << 20);
    assert_eq!(cfg.drain, Duration::from_secs(10));
    assert_eq!(cfg.log_format, LogFormat::Plain);
    assert_eq!(
        cfg.limits,
        Limits {
            max_request_bytes: 4 << 20,
            max_blocks: 64,
            max_items: 10_000,
            max_batch_requests: 256,
            max_concurrency: 64,
            default_timeout: Some(Duration::from_secs(30)),
            max_connections: 1024,
        }
    );
    assert!(cfg.tls.is_none());
    assert_eq!(cfg.catalog.models.entries().len(), 35);
    assert!(cfg.catalog.policy("").is_some());
    let memory_first = cfg.catalog.policy("memory-first").unwrap();
    assert_eq!(memory_first.context_role, Role::User);
    assert_eq!(memory_first.priority(crate::prompt::BlockKind::Memory), 5);
    assert!(memory_first.compact_turns);
    assert_eq!(
        cfg.catalog.compaction,
        crate::compact::CompactionSettings::default()
    );
}

#[test]
fn compaction_settings_are_read_and_checked() {
    let (_f, cfg) = with_file(
        "[compaction]\ntrigger_percent = 90\ntarget_percent = 70\nbreaker_cooldown_secs = 5\n\
         [policies.drop-only]\ncompact_turns = false\n",
    );
    let cfg = cfg.unwrap();
    let c = cfg.catalog.compaction;
    assert_eq!(
        (c.trigger_percent, c.target_percent, c.preserve_recent),
        (90, 70, 4)
    );
    assert_eq!(c.breaker_cooldown, Duration::from_secs(5));
    assert!(!cfg.catalog.policy("drop-only").unwrap().compact_turns);
    assert_eq!(
        err_key("[compaction]\ntrigger_percent = 0\n"),
        "compaction.trigger_percent"
    );
    assert_eq!(
        err_key("[compaction]\ntarget_percent = 90\n"),
        "compaction.target_percent"
    );
    assert_eq!(
        err_key("[compaction]\nbreaker_failures = 0\n"),
        "compaction.breaker_failures"
    );
    assert_eq!(
        err_key("[compaction]\nbreaker_cooldown_secs = 7200\n"),
        "compaction.breaker_cooldown_secs"
    );
}

#[test]
fn the_embedded_default_parses_on_its_own() {
    let f = FileConfig::parse(EMBEDDED_DEFAULT, "embedded").unwrap();
    assert!(f.models.is_some() && f.policies.is_some());
    assert!(f.limits.max_connections.is_some() && f.server.listen.is_some());
}

#[test]
fn every_embedded_key_is_also_a_flag() {
    // The embedded file sets every scalar; a file that sets none of them
    // validates to the same values.
    let (_f, empty) = with_file("");
    let defaults = ServeArgs::default().validate().unwrap();
    let empty = empty.unwrap();
    assert_eq!(empty.listen, defaults.listen);
    assert_eq!(empty.limits, defaults.limits);
    assert_eq!(empty.catalog, defaults.catalog);
}

#[test]
fn flags_override_the_file_which_overrides_the_default() {
    let f = file("[server]\nlisten = \"127.0.0.1:7001\"\ndrain_secs = 3\n[limits]\nmax_blocks = 5\n");
    let cli = parse(&[
        "serve",
        "--config",
        f.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:7002",
    ]);
    let Some(Command::Serve(args)) = cli.command else {
        panic!("not serve")
    };
    let cfg = args.validate().unwrap();
    assert_eq!(cfg.listen.tcp().unwrap().port(), 7002, "flag wins over file");
    assert_eq!(cfg.drain, Duration::from_secs(3), "file wins over default");
    assert_eq!(cfg.limits.max_blocks, 5);
    assert_eq!(cfg.limits.max_items, 10_000, "default kept");
    assert_eq!(cfg.source.config.as_deref(), Some(f.path()));
}

#[test]
fn models_resolve_to_their_tokenizer_generation_and_an_unlisted_one_to_unknown() {
    let cfg = parse(&[]).serve.validate().unwrap();
    let models = &cfg.catalog.models;
    let generation = |name: &str| {
        models
            .resolve(name)
            .unwrap()
            .generation_label()
            .map(str::to_owned)
    };
    let new = Some("claude-2026".to_owned());
    let old = Some("claude-legacy".to_owned());
    for name in [
        "claude-opus-4-7",
        "claude-opus-4-8-20260601",
        "claude-sonnet-5",
        "claude-sonnet-5-5",
        "claude-opus-5-5",
        "claude-haiku-5-5",
        "claude-opus-5-20261001",
    ] {
        assert_eq!(generation(name), new, "{name}");
    }
    for name in [
        "claude-opus-4-6",
        "claude-sonnet-4-6",
        "claude-haiku-4-5",
        "claude-3-5-sonnet-20241022",
        "claude-sonnet-4-20250514",
        "claude-opus-4-5",
    ] {
        assert_eq!(generation(name), old, "{name}");
    }
    assert_eq!(generation("claude-mystery-9").as_deref(), Some("unknown"));
    assert_eq!(generation("gemini-2.5-pro").as_deref(), Some("gemini-gemma3"));
    assert_eq!(
        generation("gemini-3-pro-preview").as_deref(),
        Some("gemini-gemma3")
    );
    assert_eq!(generation("gemini-3.1-pro").as_deref(), Some("gemini-gemma4"));
    assert_eq!(generation("gpt-4o"), None, "a public tokenizer has no generation");
}

#[test]
fn a_generation_is_a_bounded_label_of_a_model_without_a_public_tokenizer() {
    let entry = |extra: &str| {
        format!(
            "[[models]]\nname = \"m\"\nencoding = \"cl100k_base\"\ncontext_window = 10\noutput_reserve = 1\n{extra}"
        )
    };
    let estimated = "estimate_margin_percent = 10\n";
    assert_eq!(
        err_key(&entry(&format!(
            "{estimated}tokenizer_generation = \"Claude 2026\"\n"
        ))),
        "models[0].tokenizer_generation"
    );
    assert_eq!(
        err_key(&entry(&format!(
            "{estimated}tokenizer_generation = \"{}\"\n",
            "a".repeat(33)
        ))),
        "models[0].tokenizer_generation"
    );
    assert_eq!(
        err_key(&entry("tokenizer_generation = \"claude-2026\"\n")),
        "models[0].tokenizer_generation",
        "an exact encoding needs none"
    );
    let (_f, cfg) = with_file(&entry(&format!(
        "{estimated}tokenizer_generation = \"claude-2026\"\n"
    )));
    let cfg = cfg.unwrap();
    assert_eq!(
        cfg.catalog.models.resolve("m").unwrap().generation_label(),
        Some("claude-2026")
    );
}

#[test]
fn a_file_model_table_replaces_the_default_one() {
    let (_f, cfg) = with_file(
        "[[models]]\nname = \"local-llama\"\nprefix = true\nencoding = \"cl100k_base\"\n\
         estimate_margin_percent = 10\ncontext_window = 8192\noutput_reserve = 512\n\
         [policies.lean]\ncontext_role = \"system\"\n[policies.lean.priorities]\nhistory = 2\n",
    );
    let cfg = cfg.unwrap();
    let models = &cfg.catalog.models;
    assert_eq!(models.entries().len(), 1);
    let spec = models.resolve("local-llama-3-8b").unwrap();
    assert!(!spec.tokenizer.is_exact());
    assert!(models.resolve("gpt-4o").is_none());
    let lean = cfg.catalog.policy("lean").unwrap();
    assert_eq!(lean.context_role, Role::System);
    assert_eq!(lean.priority(crate::prompt::BlockKind::History), 2);
    assert_eq!(lean.priority(crate::prompt::BlockKind::Evidence), 5);
    assert!(cfg.catalog.policy("default").is_some(), "default is always there");
    assert!(
        cfg.catalog.policy("memory-first").is_none(),
        "file policies replace"
    );
}

#[test]
fn bad_settings_name_their_key() {
    let cases = [
        ("[limits]\nmax_concurrency = 0\n", "limits.max_concurrency"),
        ("[limits]\nmax_request_bytes = 10\n", "limits.max_request_bytes"),
        ("[server]\nlisten = \"nowhere\"\n", "server.listen"),
        (
            "[server]\nmetrics_listen = \"127.0.0.1:50051\"\n",
            "server.metrics_listen",
        ),
        ("[cache]\nmib = 0\n", "cache.mib"),
        (
            "[[models]]\nname = \"m\"\nencoding = \"p50k\"\ncontext_window = 10\noutput_reserve = 1\n",
            "models[0].encoding",
        ),
        (
            "[[models]]\nname = \"m\"\nencoding = \"o200k_base\"\ncontext_window = 10\noutput_reserve = 10\n",
            "models[0].output_reserve",
        ),
        (
            "[[models]]\nname = \"m\"\nencoding = \"o200k_base\"\ncontext_window = 10\noutput_reserve = 1\n[[models]]\nname = \"m\"\nencoding = \"o200k_base\"\ncontext_window = 10\noutput_reserve = 1\n",
            "models[1].name",
        ),
        ("models = []\n", "models"),
        ("[cache]\nfamilies = [\"a\", \"other\"]\n", "cache.families[1]"),
        ("[cache]\nfamilies = [\"a\", \"a\"]\n", "cache.families[1]"),
        (
            "[[models]]\nname = \"m\"\nencoding = \"o200k_base\"\ncontext_window = 10\noutput_reserve = 1\nengine_block_tokens = 0\n",
            "models[0].engine_block_tokens",
        ),
        (
            "[[models]]\nname = \"m\"\nencoding = \"o200k_base\"\ncontext_window = 10\noutput_reserve = 1\ncache_min_tokens = 11\n",
            "models[0].cache_min_tokens",
        ),
        (
            "[policies.p]\ncontext_role = \"assistant\"\n",
            "policies.p.context_role",
        ),
        (
            "[policies.p.priorities]\nmemory = 0\n",
            "policies.p.priorities.memory",
        ),
        ("[server.tls]\ncert = \"/nonexistent.pem\"\n", "server.tls.key"),
        (
            "[server.tls]\ncert = \"/nonexistent.pem\"\nkey = \"/nonexistent.key\"\n",
            "server.tls.cert",
        ),
        (
            "[server]\nlisten = \"127.0.0.1:7\"\n[render]\nlisten = \"127.0.0.1:7\"\n",
            "render.listen",
        ),
        ("[render]\nlisten = \"nowhere\"\n", "render.listen"),
    ];
    for (text, key) in cases {
        assert_eq!(err_key(text), key, "{text}");
    }
    let err = parse(&["--cache-mib", "0"]).serve.validate().unwrap_err();
    assert!(err.key.starts_with("--cache-mib"), "{}", err.key);
    let err = parse(&["--listen", "127.0.0.1:1", "--metrics-listen", "127.0.0.1:1"])
        .serve
        .validate()
        .unwrap_err();
    assert!(err.key.starts_with("--metrics-listen"), "{}", err.key);
}

#[test]
fn unknown_keys_and_bad_types_name_the_file_line_and_key() {
    let (f, r) = with_file("[server]\nlisten = \"127.0.0.1:1\"\n\n[limits]\nmax_blockz = 3\n");
    let e = r.unwrap_err();
    assert_eq!(e.key, f.path().display().to_string());
    assert!(e.message.contains("max_blockz"), "{}", e.message);
    assert!(e.message.contains("line 5"), "{}", e.message);
    let (_f, r) = with_file("[limits]\nmax_blocks = \"many\"\n");
    assert!(r.unwrap_err().message.contains("line 2"));
    let e = ServeArgs {
        config: Some("/nonexistent/context-assembler.toml".into()),
        ..ServeArgs::default()
    }
    .validate()
    .unwrap_err();
    assert!(e.message.starts_with("cannot read"), "{}", e.message);
}

#[test]
fn serve_subcommand_takes_the_same_flags() {
    let cli = parse(&["serve", "--listen", "0.0.0.0:7000", "--metrics-listen", "off"]);
    let Some(Command::Serve(args)) = cli.command else {
        panic!("not serve")
    };
    let cfg = args.validate().unwrap();
    assert_eq!(cfg.listen.tcp().unwrap().port(), 7000);
    assert_eq!(cfg.metrics_listen, None);
}

#[test]
fn assemble_and_config_subcommands_parse() {
    let cli = parse(&["assemble", "-", "--json"]);
    let Some(Command::Assemble(a)) = cli.command else {
        panic!("not assemble")
    };
    assert_eq!(a.file, PathBuf::from("-"));
    assert!(a.json);
    let cli = parse(&["config", "--print-default"]);
    assert!(matches!(
        cli.command,
        Some(Command::Config(ConfigArgs {
            print_default: true,
            ..
        }))
    ));
    assert!(
        Cli::try_parse_from(["context-assembler", "config"]).is_err(),
        "config needs an action"
    );
}

#[test]
fn reload_reads_the_catalog_under_the_same_flags_or_refuses() {
    // Valid only because a flag overrides the file's clashing address.
    let f = file("[server]\nmetrics_listen = \"127.0.0.1:50051\"\n[policies.x]\ncontext_role = \"system\"\n");
    let args = ServeArgs {
        config: Some(f.path().to_owned()),
        metrics_listen: Some("off".to_owned()),
        ..ServeArgs::default()
    };
    let cfg = args.validate().unwrap();
    let catalog = cfg.reload_catalog().unwrap().unwrap();
    assert!(catalog.policy("x").is_some());
    std::fs::write(f.path(), "[policies.x]\ncontext_role = 3\n").unwrap();
    assert!(cfg.reload_catalog().unwrap().is_err());
    assert!(
        ServeArgs::default()
            .validate()
            .unwrap()
            .reload_catalog()
            .is_none()
    );
}

#[test]
fn tls_errors_name_the_missing_half_as_the_other_was_given() {
    let only_cert_flag = ServeArgs {
        tls_cert: Some("/x.pem".into()),
        ..ServeArgs::default()
    };
    assert!(
        only_cert_flag
            .validate()
            .unwrap_err()
            .key
            .starts_with("--tls-key")
    );
    assert_eq!(err_key("[server.tls]\nkey = \"/x.key\"\n"), "server.tls.cert");
    let only_ca = ServeArgs {
        tls_client_ca: Some("/ca.pem".into()),
        ..ServeArgs::default()
    };
    assert!(only_ca.validate().unwrap_err().key.starts_with("--tls-client-ca"));
}

#[test]
fn metrics_may_not_share_the_grpc_port_on_any_overlapping_address() {
    let err = parse(&["--listen", "127.0.0.1:7100", "--metrics-listen", "0.0.0.0:7100"])
        .serve
        .validate()
        .unwrap_err();
    assert!(err.key.starts_with("--metrics-listen"), "{err}");
    assert!(
        parse(&["--listen", "127.0.0.1:7100", "--metrics-listen", "127.0.0.2:7100"])
            .serve
            .validate()
            .is_ok()
    );
}

#[test]
fn memory_settings_are_read_and_checked() {
    let cfg = parse(&[]).serve.validate().unwrap();
    assert_eq!(
        cfg.memory_backend,
        Backend::Sqlite {
            path: "context-assembler-memory.db".into()
        }
    );
    assert_eq!(cfg.memory.types.len(), 5);
    assert_eq!(cfg.memory.retention.max_per_subject, 10_000);
    assert_eq!(cfg.memory.retention.max_age, None);
    assert_eq!(cfg.memory.retention.max_total_bytes, 0);
    assert_eq!(cfg.memory.recall_timeout, Duration::from_millis(50));
    assert_eq!(cfg.memory.recall_failure, RecallFailure::Degrade);
    assert_eq!(cfg.memory.max_memory_bytes, 16_384);
    let (_f, tuned) = with_file(
        "[memory]\nrecall_timeout_ms = 200\nrecall_failure = \"fail\"\nmax_memory_bytes = 1024\n\
         max_recall_bytes = 65536\nmax_page_bytes = 8192\nmax_total_bytes = 1000000\nmax_store_waits = 8\n",
    );
    let tuned = tuned.unwrap().memory;
    assert_eq!(tuned.recall_timeout, Duration::from_millis(200));
    assert_eq!(tuned.recall_failure, RecallFailure::Fail);
    assert_eq!(
        (
            tuned.max_memory_bytes,
            tuned.max_recall_bytes,
            tuned.max_page_bytes
        ),
        (1024, 65_536, 8192)
    );
    assert_eq!(
        (tuned.retention.max_total_bytes, tuned.max_store_waits),
        (1_000_000, 8)
    );
    let (_f, cfg) = with_file(
        "[memory]\nstore = \"postgres\"\npostgres_url = \"postgres://u:p@h/db\"\nextra_types = [\"incident\"]\n\
         max_age_days = 2\nrecency_half_life_hours = 24\n",
    );
    let cfg = cfg.unwrap();
    assert_eq!(
        cfg.memory_backend,
        Backend::Postgres {
            url: "postgres://u:p@h/db".into(),
            max_connections: 8,
            statement_timeout: Duration::from_secs(5),
        }
    );
    assert!(cfg.memory.types.contains(&"incident".to_owned()));
    assert_eq!(
        cfg.memory.retention.max_age,
        Some(Duration::from_secs(2 * 86_400))
    );
    assert_eq!(cfg.memory.half_life, Duration::from_secs(24 * 3600));
    let off = parse(&["--memory-store", "off"]).serve.validate().unwrap();
    assert_eq!(off.memory_backend, Backend::Off);

    assert_eq!(err_key("[memory]\nstore = \"redis\"\n"), "memory.store");
    let bad_url = with_file("[memory]\nstore = \"postgres\"\npostgres_url = \"mysql://u:secret@h\"\n")
        .1
        .unwrap_err();
    assert_eq!(bad_url.key, "memory.postgres_url");
    assert!(!bad_url.message.contains("secret"), "{bad_url}");
    assert_eq!(
        err_key("[memory]\nextra_types = [\"Bad Type\"]\n"),
        "memory.extra_types[0]"
    );
    assert_eq!(
        err_key("[memory]\nextra_types = [\"summary\"]\n"),
        "memory.extra_types[0]"
    );
    assert_eq!(err_key("[memory]\nrecall_limit = 500\n"), "memory.recall_limit");
    assert_eq!(
        err_key("[memory]\nrecall_timeout_ms = 0\n"),
        "memory.recall_timeout_ms"
    );
    assert_eq!(
        err_key("[memory]\nrecall_failure = \"retry\"\n"),
        "memory.recall_failure"
    );
    assert_eq!(
        err_key("[memory]\nmax_store_waits = 0\n"),
        "memory.max_store_waits"
    );
    assert_eq!(
        err_key("[memory]\nmax_memory_bytes = 10\n"),
        "memory.max_memory_bytes"
    );
    assert_eq!(
        err_key("[memory]\nmax_recall_bytes = 10\n"),
        "memory.max_recall_bytes"
    );
    assert_eq!(
        err_key("[memory]\nmax_page_bytes = 10\n"),
        "memory.max_page_bytes"
    );
    assert_eq!(
        err_key(
            "[memory]\nstore = \"postgres\"\npostgres_url = \"postgres://h/db\"\npostgres_statement_timeout_ms = 0\n"
        ),
        "memory.postgres_statement_timeout_ms"
    );
    let many: Vec<String> = (0..33).map(|i| format!("\"t{i}\"")).collect();
    assert_eq!(
        err_key(&format!("[memory]\nextra_types = [{}]\n", many.join(","))),
        "memory.extra_types"
    );
}

#[test]
fn the_marker_key_is_checked_and_never_shown() {
    let secret = "a-marker-key-of-at-least-thirty-two-characters";
    let (_f, cfg) = with_file(&format!("[compaction]\nmarker_key = \"{secret}\"\n"));
    let cfg = cfg.unwrap();
    assert_eq!(
        cfg.catalog.compaction.marker_key,
        crate::compact::MarkerKey::derive(secret)
    );
    assert!(!format!("{cfg:?}").contains(secret), "the key is in Debug");
    let short = with_file("[compaction]\nmarker_key = \"too-short-secret\"\n")
        .1
        .unwrap_err();
    assert_eq!(short.key, "compaction.marker_key");
    assert!(!short.to_string().contains("too-short-secret"));
    assert_eq!(
        err_key(&format!("[compaction]\nmarker_key = \" {secret}\"\n")),
        "compaction.marker_key"
    );
    // Unset: the process's own key, the same for every catalog it builds.
    assert_eq!(
        parse(&[]).serve.validate().unwrap().catalog.compaction.marker_key,
        crate::compact::MarkerKey::per_process()
    );
}

#[test]
fn window_marks_are_read_per_policy_and_checked() {
    let (_f, cfg) = with_file("[policies.steady]\nwindow_low_percent = 60\nwindow_high_percent = 90\n");
    let cfg = cfg.unwrap();
    let steady = cfg.catalog.policy("steady").unwrap();
    assert_eq!((steady.window_low_percent, steady.window_high_percent), (60, 90));
    // 30% of a 1,000-token budget between anchors; the turns stay under 900.
    let w = steady.window(1_000);
    assert_eq!((w.step, w.high), (300, 900));
    // The default: steps of 30%, no ceiling but the room.
    let default = cfg.catalog.policy("").unwrap().window(4_000);
    assert_eq!((default.step, default.high), (1_200, u32::MAX));
    // Equal marks: no window.
    let (_f, off) = with_file("[policies.off]\nwindow_low_percent = 100\n");
    assert_eq!(off.unwrap().catalog.policy("off").unwrap().window(4_000).step, 0);
    assert_eq!(
        err_key("[policies.p]\nwindow_high_percent = 101\n"),
        "policies.p.window_high_percent"
    );
    assert_eq!(
        err_key("[policies.p]\nwindow_low_percent = 95\nwindow_high_percent = 90\n"),
        "policies.p.window_low_percent"
    );
}

#[test]
fn lightening_is_read_per_policy_and_checked() {
    let (_f, cfg) = with_file(
        "[policies.agents]\nclear_tool_results = false\nkeep_recent_tool_results = 3\n\
         clear_at_least_tokens = 5000\nexclude_tools = [\"memory\", \"plan\"]\ndrop_closed_thinking = false\n",
    );
    let cfg = cfg.unwrap();
    let agents = cfg.catalog.policy("agents").unwrap();
    assert!(!agents.clear_tool_results && !agents.drop_closed_thinking);
    assert_eq!(agents.keep_recent_tool_results, 3);
    assert_eq!(agents.clear_at_least(8_000), 5_000);
    assert_eq!(agents.exclude_tools, vec!["memory".to_owned(), "plan".to_owned()]);
    // The defaults: clear and drop, keep the newest result, a window step
    // at once.
    let default = cfg.catalog.policy("").unwrap();
    assert!(default.clear_tool_results && default.drop_closed_thinking);
    assert_eq!(default.keep_recent_tool_results, 1);
    assert_eq!(default.clear_at_least(8_000), 2_400);
    assert_eq!(
        err_key("[policies.p]\nexclude_tools = [\"\"]\n"),
        "policies.p.exclude_tools"
    );
    let many: Vec<String> = (0..300).map(|i| format!("\"t{i}\"")).collect();
    assert_eq!(
        err_key(&format!("[policies.p]\nexclude_tools = [{}]\n", many.join(", "))),
        "policies.p.exclude_tools"
    );
}

#[test]
fn tracing_is_off_unless_an_endpoint_is_configured_and_the_flag_wins_over_the_file() {
    assert_eq!(parse(&[]).serve.validate().unwrap().tracing, None);
    let (_f, cfg) = with_file("[telemetry]\notlp_endpoint = \"off\"\n");
    assert_eq!(cfg.unwrap().tracing, None);
    let (_f, cfg) = with_file(
        "[telemetry]\notlp_endpoint = \"http://file-collector:4317\"\nservice_name = \"from-file\"\nmax_queue_spans = 7\nexport_timeout_ms = 250\n",
    );
    let t = cfg.unwrap().tracing.unwrap();
    assert_eq!(t.endpoint, "http://file-collector:4317");
    assert_eq!(t.service_name, "from-file");
    assert_eq!(t.max_queue_spans, 7);
    assert_eq!(t.export_timeout, Duration::from_millis(250));

    let f =
        file("[telemetry]\notlp_endpoint = \"http://file-collector:4317\"\nservice_name = \"from-file\"\n");
    let path = f.path().to_str().unwrap();
    let cli = parse(&[
        "--config",
        path,
        "--otlp-endpoint",
        "http://flag-collector:4317",
        "--otlp-service-name",
        "from-flag",
    ]);
    let t = cli.serve.validate().unwrap().tracing.unwrap();
    assert_eq!(t.endpoint, "http://flag-collector:4317");
    assert_eq!(t.service_name, "from-flag");
    // The flag turns off what the file turns on.
    let cli = parse(&["--config", path, "--otlp-endpoint", ""]);
    assert_eq!(cli.serve.validate().unwrap().tracing, None);
    // The defaults beside the endpoint.
    let t = parse(&["--otlp-endpoint", "http://127.0.0.1:4317"])
        .serve
        .validate()
        .unwrap()
        .tracing
        .unwrap();
    assert_eq!(t.service_name, "context-assembler");
    assert_eq!(t.max_queue_spans, 2048);
    assert_eq!(t.export_timeout, Duration::from_secs(10));
}

#[test]
fn a_malformed_otlp_endpoint_is_refused_by_name() {
    for bad in [
        "collector:4317",
        "ftp://collector:4317",
        "http://",
        "http://a b",
        "https://c:4317",
    ] {
        let err = parse(&["--otlp-endpoint", bad]).serve.validate().unwrap_err();
        assert_eq!(err.key, "--otlp-endpoint (OTEL_EXPORTER_OTLP_ENDPOINT)", "{bad}");
    }
    assert_eq!(
        err_key("[telemetry]\notlp_endpoint = \"localhost\"\n"),
        "telemetry.otlp_endpoint"
    );
    assert_eq!(
        err_key("[telemetry]\notlp_endpoint = \"http://c:4317\"\nmax_queue_spans = 0\n"),
        "telemetry.max_queue_spans"
    );
    assert_eq!(
        err_key("[telemetry]\notlp_endpoint = \"http://c:4317\"\nexport_timeout_ms = 0\n"),
        "telemetry.export_timeout_ms"
    );
    assert_eq!(
        err_key("[telemetry]\notlp_endpoint = \"http://c:4317\"\nservice_name = \"\"\n"),
        "telemetry.service_name"
    );
}

/// A model entry with `body` after its name.
fn model_entry(body: &str) -> String {
    format!("[[models]]\nname = \"m\"\ncontext_window = 8000\noutput_reserve = 100\n{body}\n")
}

/// A model folder named by `tokenizer_dir`, relative to the config file or
/// absolute, is loaded at validation; the entry counts with it, exactly.
#[test]
fn a_tokenizer_dir_is_loaded_relative_to_the_file() {
    let dir = tempfile::tempdir().unwrap();
    crate::tokens::hf::fixture::write_folder(
        &dir.path().join("qwen-ish"),
        Some(crate::tokens::hf::fixture::CHATML),
    );
    let config = dir.path().join("sidecar.toml");
    std::fs::write(&config, model_entry("tokenizer_dir = \"qwen-ish\"")).unwrap();
    let cfg = ServeArgs {
        config: Some(config.clone()),
        ..ServeArgs::default()
    }
    .validate()
    .unwrap();
    let spec = cfg.catalog.models.resolve("m").unwrap();
    assert_eq!(spec.tokenizer.to_string(), "hf:qwen-ish");
    assert!(spec.tokenizer.is_exact());
    assert!(spec.tokenizer.hf_model().unwrap().template().is_some());
    assert_eq!(spec.tokenizer.count("hello world"), 2);

    let absolute = model_entry(&format!("tokenizer_dir = {:?}", dir.path().join("qwen-ish")));
    let (_f, r) = with_file(&absolute);
    assert_eq!(
        r.unwrap()
            .catalog
            .models
            .resolve("m")
            .unwrap()
            .tokenizer
            .to_string(),
        "hf:qwen-ish"
    );
}

/// What is wrong with a model folder entry is named by its key.
#[test]
fn a_bad_tokenizer_dir_names_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("plain");
    crate::tokens::hf::fixture::write_folder(&folder, None);
    let path = format!("tokenizer_dir = {folder:?}");
    assert_eq!(
        err_key(&model_entry("tokenizer_dir = \"/no/such/folder\"")),
        "models[0].tokenizer_dir"
    );
    assert_eq!(
        err_key(&model_entry(&format!("{path}\nencoding = \"o200k_base\""))),
        "models[0].tokenizer_dir"
    );
    assert_eq!(err_key(&model_entry("")), "models[0].encoding");
    assert_eq!(
        err_key(&model_entry(&format!("{path}\nestimate_margin_percent = 10"))),
        "models[0].estimate_margin_percent"
    );
    assert_eq!(
        err_key(&model_entry(
            "encoding = \"o200k_base\"\nmessage_overhead_tokens = 3"
        )),
        "models[0].message_overhead_tokens"
    );
    // A folder without a template takes a per-message overhead.
    let (_f, r) = with_file(&model_entry(&format!("{path}\nmessage_overhead_tokens = 2")));
    let spec = r.unwrap().catalog.models.resolve("m").unwrap().clone();
    assert_eq!(spec.tokenizer.frame_tokens(Role::User), 2);
    assert_eq!(spec.tokenizer.priming_tokens(), 0);
    // A broken tokenizer.json is refused with the file named.
    std::fs::write(folder.join("tokenizer.json"), "{}").unwrap();
    let err = with_file(&model_entry(&path)).1.unwrap_err();
    assert_eq!(err.key, "models[0].tokenizer_dir");
    assert!(err.message.contains("tokenizer.json"), "{}", err.message);
}

#[test]
fn grpc_and_render_listen_on_unix_sockets_and_their_refusals_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let grpc = dir.path().join("grpc.sock");
    let render = dir.path().join("render.sock");
    let cfg = parse(&[
        "--listen",
        &format!("unix:{}", grpc.display()),
        "--render-listen",
        &format!("unix:{}", render.display()),
    ])
    .serve
    .validate()
    .unwrap();
    assert_eq!(cfg.listen, ListenAddr::Unix(grpc.clone()));
    assert_eq!(cfg.render_listen, Some(ListenAddr::Unix(render)));

    let same = format!("unix:{}", grpc.display());
    let cases = [
        (
            format!("[server]\nlisten = \"unix:{}\"\n", "rel.sock"),
            "server.listen",
        ),
        (
            "[server]\nlisten = \"unix:/no/such/folder/g.sock\"\n".to_owned(),
            "server.listen",
        ),
        (
            format!("[server]\nmetrics_listen = \"{same}\"\n"),
            "server.metrics_listen",
        ),
        (
            format!("[server]\nlisten = \"{same}\"\n[render]\nlisten = \"{same}\"\n"),
            "render.listen",
        ),
        // TLS is refused on a Unix socket before any file is read.
        (
            format!("[server]\nlisten = \"{same}\"\n[server.tls]\ncert = \"/x.pem\"\nkey = \"/x.key\"\n"),
            "server.tls.cert",
        ),
    ];
    for (text, key) in cases {
        assert_eq!(err_key(&text), key, "{text}");
    }
    let err = parse(&["--listen", &same, "--tls-cert", "/x.pem", "--tls-key", "/x.key"])
        .serve
        .validate()
        .unwrap_err();
    assert!(err.key.starts_with("--tls-cert"), "{err}");
    assert!(err.message.contains("Unix socket"), "{err}");
}

/// The rules of `model` under the catalog of `cfg`.
fn rules_of(cfg: &ServerConfig, model: &str) -> crate::tokens::provider::ProviderRules {
    let spec = cfg.catalog.models.resolve(model).unwrap();
    assert_eq!(spec.cache.min_tokens, spec.cache.provider.min_tokens, "{model}");
    spec.cache.provider
}

fn ttls(list: &[&str]) -> crate::tokens::provider::Ttls {
    let parsed: Vec<_> = list
        .iter()
        .map(|t| crate::tokens::provider::Ttl::parse(t).unwrap())
        .collect();
    crate::tokens::provider::Ttls::new(&parsed).unwrap()
}

#[test]
fn provider_rules_come_from_the_embedded_tables_and_the_model_entries() {
    use crate::tokens::provider::{Provider, Ttl};
    let cfg = ServeArgs::default().validate().unwrap();
    let gpt = rules_of(&cfg, "gpt-4o-mini");
    assert_eq!(gpt, crate::tokens::provider::ProviderRules::default());
    assert_eq!(gpt.marker_limit(), 0);
    let gpt56 = rules_of(&cfg, "gpt-5.6-mini");
    assert_eq!(gpt56.provider, Provider::OpenAi);
    assert!(gpt56.explicit_breakpoints);
    assert_eq!(gpt56.marker_limit(), 4);
    assert_eq!(gpt56.ttls, ttls(&["30m"]));
    assert_eq!(gpt56.default_ttl, Ttl::parse("30m"));
    assert!(!rules_of(&cfg, "gpt-5-mini").explicit_breakpoints);

    let sonnet = rules_of(&cfg, "claude-sonnet-4-5");
    assert_eq!(sonnet.provider, Provider::Anthropic);
    assert_eq!(
        (sonnet.min_tokens, sonnet.max_breakpoints, sonnet.lookback_blocks),
        (1024, 4, 20)
    );
    assert_eq!(sonnet.ttls, ttls(&["5m", "1h"]));
    assert_eq!(sonnet.default_ttl, Some(Ttl::FIVE_MINUTES));
    assert_eq!(rules_of(&cfg, "claude-haiku-4-5-20251001").min_tokens, 4096);
    assert_eq!(rules_of(&cfg, "claude-opus-4-5").min_tokens, 4096);

    let gemini = rules_of(&cfg, "gemini-2.5-pro");
    assert_eq!((gemini.provider, gemini.min_tokens), (Provider::Gemini, 2048));
    assert_eq!((gemini.marker_limit(), gemini.default_ttl), (0, None));
    assert_eq!(rules_of(&cfg, "gemini-3-pro-preview").min_tokens, 4096);
}

#[test]
fn a_file_overrides_provider_rules_field_by_field() {
    use crate::tokens::provider::Provider;
    let (_f, cfg) = with_file(&format!(
        "[providers.anthropic]\nmin_tokens = 2048\n[providers.trtllm]\nstep_tokens = 64\nmin_tokens = 64\n\
         [providers.openai]\nttls = [\"5m\", \"24h\", \"1h\"]\n\
         {}{}{}",
        model_entry("provider = \"anthropic\"\nencoding = \"cl100k_base\""),
        "[[models]]\nname = \"engine\"\nprovider = \"trtllm\"\nencoding = \"cl100k_base\"\ncontext_window = 8000\noutput_reserve = 100\n",
        "[[models]]\nname = \"engine-big\"\nprovider = \"vllm\"\nencoding = \"cl100k_base\"\ncontext_window = 8000\noutput_reserve = 100\nengine_block_tokens = 128\n",
    ));
    let cfg = cfg.unwrap();
    let m = rules_of(&cfg, "m");
    assert_eq!(m.provider, Provider::Anthropic);
    assert_eq!(
        (m.min_tokens, m.max_breakpoints, m.lookback_blocks),
        (2048, 4, 20)
    );
    assert_eq!(m.ttls, ttls(&["5m", "1h"]), "fields not given stay");
    let engine = cfg.catalog.models.resolve("engine").unwrap();
    assert_eq!(
        (
            engine.cache.provider.step_tokens,
            engine.cache.engine_block_tokens
        ),
        (64, 64)
    );
    assert_eq!(engine.cache.min_tokens, 64);
    let big = cfg.catalog.models.resolve("engine-big").unwrap();
    assert_eq!(
        (big.cache.provider.step_tokens, big.cache.engine_block_tokens),
        (128, 128)
    );
    assert_eq!(big.cache.provider.provider, Provider::Vllm);
}

#[test]
fn a_model_folder_is_served_by_vllm_unless_it_says_otherwise() {
    use crate::tokens::provider::Provider;
    let dir = tempfile::tempdir().unwrap();
    crate::tokens::hf::fixture::write_folder(&dir.path().join("q"), Some(crate::tokens::hf::fixture::CHATML));
    let folder = format!("tokenizer_dir = {:?}", dir.path().join("q"));
    let (_f, cfg) = with_file(&model_entry(&folder));
    let spec_rules = rules_of(&cfg.unwrap(), "m");
    assert_eq!(
        (spec_rules.provider, spec_rules.step_tokens, spec_rules.min_tokens),
        (Provider::Vllm, 16, 16)
    );
    let (_f, cfg) = with_file(&model_entry(&format!("{folder}\nprovider = \"sglang\"")));
    assert_eq!(rules_of(&cfg.unwrap(), "m").provider, Provider::Sglang);
}

#[test]
fn bad_provider_rules_name_their_key() {
    let model = |body: &str| model_entry(&format!("encoding = \"o200k_base\"\n{body}"));
    let cases = [
        (
            "[providers.anthropic]\nttls = [\"5m\", \"2x\"]\n".to_owned(),
            "providers.anthropic.ttls[1]",
        ),
        (
            "[providers.anthropic]\nttls = [\"5m\", \"300s\"]\n".to_owned(),
            "providers.anthropic.ttls[1]",
        ),
        (
            "[providers.anthropic]\ndefault_ttl = \"30m\"\n".to_owned(),
            "providers.anthropic.default_ttl",
        ),
        (
            "[providers.anthropic]\ndefault_ttl = \"soon\"\n".to_owned(),
            "providers.anthropic.default_ttl",
        ),
        (
            "[providers.anthropic]\nmax_breakpoints = 5\n".to_owned(),
            "providers.anthropic.max_breakpoints",
        ),
        (
            "[providers.bedrock]\nmax_breakpoints = 5\n".to_owned(),
            "providers.bedrock.max_breakpoints",
        ),
        (
            "[providers.vllm]\nstep_tokens = 0\n".to_owned(),
            "providers.vllm.step_tokens",
        ),
        (
            "[providers.gemini]\nexplicit_breakpoints = true\n".to_owned(),
            "providers.gemini.explicit_breakpoints",
        ),
        (
            "[providers.sglang]\nmax_breakpoints = 2\n".to_owned(),
            "providers.sglang.max_breakpoints",
        ),
        (
            "[providers.anthropic]\nexplicit_breakpoints = false\n".to_owned(),
            "providers.anthropic.explicit_breakpoints",
        ),
        (
            "[providers.openai]\nmax_breakpoints = 0\nexplicit_breakpoints = true\n".to_owned(),
            "providers.openai.explicit_breakpoints",
        ),
        (
            "[providers.openai]\nttls = []\n".to_owned(),
            "providers.openai.default_ttl",
        ),
        (
            "[providers.openai]\nttls = [\"1m\", \"2m\", \"3m\", \"4m\", \"5m\"]\n".to_owned(),
            "providers.openai.ttls",
        ),
        (
            "[providers.openai]\nlookback_blocks = 100000\n".to_owned(),
            "providers.openai.lookback_blocks",
        ),
        (model("provider = \"azure\""), "models[0].provider"),
        (
            model("provider = \"vllm\"\nexplicit_breakpoints = true"),
            "models[0].explicit_breakpoints",
        ),
        (model("cache_ttls = [\"1h\"]"), "models[0].cache_default_ttl"),
        (model("cache_ttls = [\"1h\", \"1x\"]"), "models[0].cache_ttls[1]"),
        (model("cache_default_ttl = \"1x\""), "models[0].cache_default_ttl"),
        (
            model("provider = \"vllm\"\nengine_block_tokens = 0"),
            "models[0].engine_block_tokens",
        ),
    ];
    for (text, key) in cases {
        assert_eq!(err_key(&text), key, "{text}");
    }
    // An unknown provider table is an unknown key of the file.
    let (f, r) = with_file("[providers.azure]\nmin_tokens = 1\n");
    let e = r.unwrap_err();
    assert_eq!(e.key, f.path().display().to_string());
    assert!(
        e.message.contains("azure") && e.message.contains("line 1"),
        "{}",
        e.message
    );
    // The message says what is offered.
    let e = with_file("[providers.anthropic]\ndefault_ttl = \"24h\"\n")
        .1
        .unwrap_err();
    assert!(e.message.contains("5m, 1h"), "{}", e.message);
}

#[test]
fn the_gateway_passes_on_by_default_and_refuses_where_told() {
    let (_f, c) = with_file("");
    let g = c.unwrap().gateway;
    assert!(!g.refuse_malformed && !g.refuse_unknown_model && !g.refuse_overloaded);
    assert!(g.cache_markers && g.prompt_cache_key);
    let (_f, c) = with_file(
        "[gateway]\nrefuse_malformed = true\nrefuse_unknown_model = true\non_overload = \"refuse\"\ncache_markers = false\nprompt_cache_key = false\n",
    );
    let g = c.unwrap().gateway;
    assert!(g.refuse_malformed && g.refuse_unknown_model && g.refuse_overloaded);
    assert!(!g.cache_markers && !g.prompt_cache_key);
    assert_eq!(
        err_key("[gateway]\non_overload = \"queue\"\n"),
        "gateway.on_overload"
    );
    // An unknown key is an error of the file.
    let (_f, c) = with_file("[gateway]\nrefuse_everything = true\n");
    assert!(c.unwrap_err().message.contains("refuse_everything"));
}
