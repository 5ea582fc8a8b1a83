use proptest::prelude::*;

use super::last_fitting;
use crate::tokens::{Encoding, Tokenizer};

/// Runs the search over `n` indices of which the first `fits` answer,
/// returning what it found and how many probes it made.
fn search(n: usize, fits: usize, guess: usize) -> (Option<usize>, usize) {
    let mut probes = 0;
    let found = last_fitting(n, guess, |i| {
        probes += 1;
        (i < fits).then_some(i * 10)
    });
    if let Some((i, answer)) = found {
        assert_eq!(answer, i * 10, "the answer is the probe's own");
    }
    (found.map(|(i, _)| i), probes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Whatever the guess, the last fitting index is found, within
    /// 2 log2(n) + 3 probes.
    #[test]
    fn finds_the_last_fitting_index_from_any_guess(
        n in 0usize..5_000,
        fits_frac in 0.0f64..=1.0,
        guess_frac in 0.0f64..=1.2,
    ) {
        let fits = (n as f64 * fits_frac) as usize;
        let guess = (n as f64 * guess_frac) as usize;
        let (found, probes) = search(n, fits, guess);
        prop_assert_eq!(found, fits.checked_sub(1));
        let bound = 2 * (usize::BITS - n.leading_zeros()) as usize + 3;
        prop_assert!(probes <= bound, "{probes} probes for n = {n} (bound {bound})");
    }
}

#[test]
fn a_right_guess_costs_two_probes_and_a_near_one_few() {
    assert_eq!(search(1_000, 400, 399), (Some(399), 2));
    assert_eq!(search(1_000, 1_000, 999), (Some(999), 1));
    let (found, probes) = search(1_000, 400, 402);
    assert_eq!(found, Some(399));
    assert!(probes <= 4, "{probes}");
    assert_eq!(search(1_000, 0, 0), (None, 1));
}

/// The estimate is where the exact search would end on ordinary prose, and
/// never far from it on hostile text.
#[test]
fn the_prefix_estimate_is_close_to_the_exact_count() {
    let texts = [
        "A first sentence stands here. Then, a second one follows!\nA line.\n".repeat(40),
        "fn main() {\n    let x = 1;\n}\n// done.\n".repeat(50),
        "数字 1234567 和标点。\n😀👍🏽 emoji.\n\n\n   spaced   out.  ".repeat(30),
    ];
    for encoding in Encoding::ALL {
        let tok = Tokenizer::exact(encoding);
        for text in &texts {
            let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i).collect();
            let counts: Vec<u32> = ends
                .iter()
                .map(|&e| tok.count(&format!("<wrapper>\n{}\n</wrapper>", &text[..e])))
                .collect();
            for limit in [0, 7, 50, 333, 1_000, 1_000_000] {
                let within = tok.prefixes_within(text, &ends, "<wrapper>\n\n</wrapper>", limit);
                let exact = counts.iter().take_while(|&&c| c <= limit).count();
                assert!(
                    within.abs_diff(exact) <= 2,
                    "{encoding:?} limit {limit}: estimate {within}, exact {exact}"
                );
            }
        }
    }
}
