//! What `CountTokens` answers: a text counted for a model as an assembly
//! for that model counts a message's text, and where its tokens came from.
//! For a model without a public tokenizer whose provider counts
//! (`[providers.NAME.counting]`), that is the provider's count once it has
//! counted the text; until then the estimate, the text handed to the
//! provider's counter off the request path as an assembled message's is. So
//! a text counts the same here and in a prompt, and a caller asking twice
//! sees it turn from estimated to the provider's. An encoding, an OpenAI
//! model or a model folder counts exactly.

use crate::assemble::{AssembleError, Assembler, CountTarget, TokenCount};
use crate::prompt::Sources;

/// `text` counted for `target`, and where its tokens came from (they add up
/// to the count; `exact` when none is estimated).
pub fn count(
    assembler: &Assembler,
    target: &CountTarget,
    text: &str,
) -> Result<(TokenCount, Sources), AssembleError> {
    let catalog = assembler.catalog();
    let resolved = match target {
        CountTarget::Model(m) => catalog.models.resolve(m).map(|spec| (spec, m)),
        CountTarget::Encoding(_) => None,
    };
    let Some((spec, model)) = resolved else {
        // An encoding, or an unknown model refused as the domain words it.
        let count = assembler.count_tokens(target, text)?;
        let sources = Sources::all(count.tokens, count.exact);
        return Ok((count, sources));
    };
    let learning = assembler.learning();
    let tokenizer = learning.tokenizer(spec, model);
    let (tokens, sources, exact) = match learning.scope(spec, model).and_then(|s| s.count(text)) {
        Some(n) => (
            n,
            Sources {
                provider: n,
                ..Sources::default()
            },
            true,
        ),
        None => {
            let n = tokenizer.count(text);
            (n, Sources::all(n, tokenizer.is_exact()), tokenizer.is_exact())
        }
    };
    let count = TokenCount {
        tokens,
        tokenizer: tokenizer.to_string(),
        exact,
    };
    Ok((count, sources))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assembler() -> Assembler {
        Assembler::new(crate::config::default_catalog(), 1 << 20)
    }

    #[test]
    fn a_public_tokenizer_counts_everything_exactly() {
        let a = assembler();
        let text = "How long do refunds take for an order placed last week?";
        for target in [
            CountTarget::Model("gpt-4o".to_owned()),
            CountTarget::Encoding("cl100k_base".to_owned()),
        ] {
            let (c, s) = count(&a, &target, text).unwrap();
            assert!(c.exact && c.tokens > 0, "{target:?}: {c:?}");
            assert_eq!(s, Sources::all(c.tokens, true), "{target:?}");
            // The same count the domain gives.
            assert_eq!(c, a.count_tokens(&target, text).unwrap());
        }
    }

    #[test]
    fn without_a_counter_an_estimating_model_is_all_estimated() {
        let a = assembler();
        let target = CountTarget::Model("claude-sonnet-5".to_owned());
        let (c, s) = count(&a, &target, "Tide tables for the harbour, briefly.").unwrap();
        assert!(!c.exact && c.tokens > 0, "{c:?}");
        assert_eq!(
            (s.exact, s.provider, s.estimated),
            (0, 0, c.tokens),
            "no provider counts without [providers.anthropic.counting]"
        );
        // Empty text is still an estimate's, not exact.
        let (c, _) = count(&a, &target, "").unwrap();
        assert!(!c.exact);
    }

    #[test]
    fn an_unknown_model_or_encoding_is_refused_as_the_domain_refuses_it() {
        let a = assembler();
        for target in [
            CountTarget::Model("no-such-model".to_owned()),
            CountTarget::Encoding("p50k".to_owned()),
        ] {
            assert_eq!(
                count(&a, &target, "x").unwrap_err(),
                a.count_tokens(&target, "x").unwrap_err()
            );
        }
    }
}
