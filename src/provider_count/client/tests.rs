use super::*;
use crate::provider_count::Secret;

fn settings(api: Api, url: &str, key: &str) -> Settings {
    Settings {
        api,
        url: url.to_owned(),
        api_key: Secret::new(key),
        requests_per_minute: 60,
        concurrency: 2,
        timeout: Duration::from_secs(1),
        queue: 10,
        breaker_failures: 3,
        breaker_cooldown: Duration::from_secs(1),
        wait: Duration::ZERO,
    }
}

fn problem(api: Api, url: &str, key: &str) -> CountError {
    match Client::new(&settings(api, url, key)) {
        Ok(_) => panic!("{url} was taken"),
        Err(e) => e,
    }
}

#[test]
fn urls_split_into_scheme_host_port_and_path() {
    let c = Client::new(&settings(
        Api::Anthropic,
        "https://api.anthropic.com/v1/messages/count_tokens",
        "k",
    ))
    .unwrap();
    assert_eq!(
        (c.host.as_str(), c.port, c.tls.is_some()),
        ("api.anthropic.com", 443, true)
    );
    assert_eq!(c.target("m").unwrap(), "/v1/messages/count_tokens");
    assert_eq!(c.headers[HOST], "api.anthropic.com");
    let c = Client::new(&settings(
        Api::Gemini,
        "http://[::1]:8080/v1beta/models/{model}:countTokens?x=1",
        "k",
    ))
    .unwrap();
    assert_eq!((c.host.as_str(), c.port, c.tls.is_some()), ("::1", 8080, false));
    assert_eq!(
        c.target("gemini-2.5-flash").unwrap(),
        "/v1beta/models/gemini-2.5-flash:countTokens?x=1"
    );
    assert_eq!(c.headers[HOST], "[::1]:8080");
    let c = Client::new(&settings(Api::Anthropic, "http://proxy", "k")).unwrap();
    assert_eq!((c.port, c.target("m").unwrap().to_string().as_str()), (80, "/"));
}

#[test]
fn each_api_sends_its_own_headers_and_the_key_is_sensitive() {
    let a = Client::new(&settings(Api::Anthropic, "http://h/p", "sk-1")).unwrap();
    assert_eq!(a.headers["x-api-key"], "sk-1");
    assert!(a.headers["x-api-key"].is_sensitive());
    assert_eq!(a.headers["anthropic-version"], "2023-06-01");
    assert!(a.headers.get("x-goog-api-key").is_none());
    let g = Client::new(&settings(Api::Gemini, "http://h/p", "sk-2")).unwrap();
    assert!(g.headers["x-goog-api-key"].is_sensitive());
    assert!(g.headers.get("x-api-key").is_none());
    assert!(g.headers.get("anthropic-version").is_none());
    for c in [&a, &g] {
        assert_eq!(c.headers[CONTENT_TYPE], "application/json");
    }
}

#[test]
fn unusable_urls_and_keys_are_refused_without_showing_the_key() {
    for url in [
        "ftp://h/p",
        "h/p",
        "http://",
        "http:///p",
        "http://user:secret@h/p",
        "http://{model}.h/p",
        "http://h:99999/p",
        "http://h/p with space",
    ] {
        assert!(
            matches!(
                problem(Api::Gemini, url, "k"),
                CountError::Settings { field: "url", .. }
            ),
            "{url}"
        );
    }
    let key = "sk-bad\nkey";
    let e = problem(Api::Anthropic, "http://h/p", key);
    assert_eq!(
        e,
        CountError::Settings {
            field: "api_key",
            problem: "not a valid header value"
        }
    );
    assert!(!format!("{e:?} {e}").contains("sk-bad"));
}
