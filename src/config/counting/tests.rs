use super::*;

const KEY: &str = "sk-test-0123456789-never-shown";

fn section(url: Option<&str>) -> CountingSection {
    CountingSection {
        url: url.map(str::to_owned),
        ..CountingSection::default()
    }
}

fn with_key_file(url: &str) -> (tempfile::NamedTempFile, CountingSection) {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), format!("  {KEY}\n")).unwrap();
    let mut c = section(Some(url));
    c.api_key_file = Some(f.path().to_owned());
    (f, c)
}

#[test]
fn off_without_a_url_and_on_with_one_and_a_key() {
    assert!(
        one("anthropic", Api::Anthropic, &section(None), 1000)
            .unwrap()
            .is_none()
    );
    let (_f, c) = with_key_file("https://api.anthropic.com/v1/messages/count_tokens");
    let s = one("anthropic", Api::Anthropic, &c, 1000).unwrap().unwrap();
    assert_eq!(s.requests_per_minute, 1000);
    assert_eq!(s.concurrency, 4);
    assert_eq!(s.timeout, Duration::from_millis(5000));
    assert_eq!(s.wait, Duration::ZERO, "requests never wait unless asked to");
    assert_eq!(s.api_key, Secret::new(KEY), "read once, trimmed");
    assert!(!format!("{s:?}").contains(KEY), "the key is never shown");
}

#[test]
fn bad_settings_name_their_key_and_never_quote_the_key() {
    let bad_url = |url: &str, api| {
        let (_f, c) = with_key_file(url);
        one("gemini", api, &c, 3000).unwrap_err()
    };
    assert_eq!(
        bad_url("ftp://x/{model}", Api::Gemini).key,
        "providers.gemini.counting.url"
    );
    assert_eq!(
        bad_url("https://x/countTokens", Api::Gemini).key,
        "providers.gemini.counting.url"
    );
    let mut c = section(None);
    c.api_key_env = Some("X".to_owned());
    assert_eq!(
        one("anthropic", Api::Anthropic, &c, 1).unwrap_err().key,
        "providers.anthropic.counting.url"
    );
    let no_key = section(Some("http://127.0.0.1:1/count"));
    assert_eq!(
        one("anthropic", Api::Anthropic, &no_key, 1).unwrap_err().key,
        "providers.anthropic.counting.api_key_file"
    );
    let mut unset = section(Some("http://127.0.0.1:1/count"));
    unset.api_key_env = Some("CONTEXT_ASSEMBLER_TEST_NO_SUCH_VARIABLE".to_owned());
    assert_eq!(
        one("anthropic", Api::Anthropic, &unset, 1).unwrap_err().key,
        "providers.anthropic.counting.api_key_env"
    );
    let (_f, mut waiting) = with_key_file("http://127.0.0.1:1/count");
    waiting.wait_ms = Some(300);
    let s = one("anthropic", Api::Anthropic, &waiting, 1).unwrap().unwrap();
    assert_eq!(s.wait, Duration::from_millis(300));
    waiting.wait_ms = Some(2001);
    let e = one("anthropic", Api::Anthropic, &waiting, 1).unwrap_err();
    assert_eq!(e.key, "providers.anthropic.counting.wait_ms");
    let (_f, mut slow) = with_key_file("http://127.0.0.1:1/count");
    slow.timeout_ms = Some(10);
    let e = one("anthropic", Api::Anthropic, &slow, 1).unwrap_err();
    assert_eq!(e.key, "providers.anthropic.counting.timeout_ms");
    let (f, mut binary) = with_key_file("http://127.0.0.1:1/count");
    std::fs::write(f.path(), format!("{KEY}\u{7}secret tail")).unwrap();
    binary.api_key_file = Some(f.path().to_owned());
    let e = one("anthropic", Api::Anthropic, &binary, 1).unwrap_err();
    assert_eq!(e.key, "providers.anthropic.counting.api_key_file");
    assert!(
        !e.message.contains(KEY) && !e.message.contains("secret tail"),
        "{e:?}"
    );
}
