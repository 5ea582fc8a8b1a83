use super::*;

#[test]
fn a_piece_key_is_its_generations_and_its_texts() {
    let a = Learned::key("claude-2026", "hello");
    assert_eq!(a, Learned::key("claude-2026", "hello"));
    assert_ne!(
        a,
        Learned::key("claude-legacy", "hello"),
        "generations never share a count"
    );
    assert_ne!(a, Learned::key("claude-2026", "hello "));
    // The generation's length is in the key: no two (generation, text)
    // pairs run together into one.
    assert_ne!(Learned::key("ab", "c"), Learned::key("a", "bc"));
}

#[test]
fn learned_counts_are_kept_and_bounded() {
    let learned = Learned::new(100);
    learned.insert(Learned::key("g", "x"), 7);
    assert_eq!(learned.get(&Learned::key("g", "x")), Some(7));
    assert_eq!(learned.get(&Learned::key("g", "y")), None);
    for i in 0..1000 {
        learned.insert(Learned::key("g", &i.to_string()), i);
    }
    assert!(learned.len() <= 100, "{}", learned.len());
}

#[test]
fn a_public_tokenizer_learns_nothing_and_an_estimate_learns_under_its_generation() {
    let catalog = crate::config::default_catalog();
    let learning = Learning::default();
    let gpt = catalog.models.resolve("gpt-4o").unwrap();
    assert!(learning.scope(gpt, "gpt-4o").is_none());
    let claude = catalog.models.resolve("claude-sonnet-5").unwrap();
    let scope = learning.scope(claude, "claude-sonnet-5").unwrap();
    assert_eq!(scope.count("hi"), None, "nothing learned yet, no counter to ask");
    learning.learned().insert(Learned::key("claude-2026", "hi"), 3);
    assert_eq!(scope.count("hi"), Some(3));
    let opus = catalog.models.resolve("claude-opus-5").unwrap();
    let same = learning.scope(opus, "claude-opus-5").unwrap();
    assert_eq!(same.count("hi"), Some(3), "one generation, one count");
    let legacy = catalog.models.resolve("claude-opus-4-6").unwrap();
    assert_eq!(
        learning.scope(legacy, "claude-opus-4-6").unwrap().count("hi"),
        None
    );
    // Without measured frames the estimate keeps its own.
    assert_eq!(learning.tokenizer(claude, "claude-sonnet-5"), claude.tokenizer);
}
