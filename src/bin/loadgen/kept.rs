//! The fresh workload's kept share: what part of the content tokens the
//! requests offer the answers kept, so that "most of it is kept" is
//! measured, not assumed. Each distinct request's offer is counted once,
//! before the run, with the workload's model's tokenizer
//! (`workload::fresh::Offer`: static segments and query, and each item by
//! id); each OK answer then adds its request's offer and what its decision
//! report says was kept. A cold run's nonce is part of what is offered: its
//! tokens count with every text it precedes (a nonce counted alone, so a
//! token more or less per text where it joins the text's first word).

use context_assembler::grpc::pb;
use context_assembler::tokens::{Encoding, Tokenizer};
use context_assembler::workload::fresh::Offer;

/// The offers of a workload's distinct requests, in workload order.
pub struct Offers {
    offers: Vec<Offer>,
    tok: Tokenizer,
}

impl Offers {
    /// Counts the offer of every request of `requests` with `encoding`.
    pub fn count(requests: &[context_assembler::prompt::AssembleRequest], encoding: Encoding) -> Offers {
        let tok = Tokenizer::exact(encoding);
        let offers = requests.iter().map(|r| Offer::of(r, |t| tok.count(t))).collect();
        Offers { offers, tok }
    }

    /// The offered and the kept tokens of `resp`, the answer to distinct
    /// request `index` sent with `nonce` before each of its texts.
    pub fn measure(
        &self,
        index: usize,
        resp: &pb::AssembleResponse,
        nonce: Option<&str>,
    ) -> Option<(u64, u64)> {
        let offer = self.offers.get(index)?;
        let prefix = nonce.map_or(0, |n| self.tok.count(n.trim_end()));
        Some(
            offer.measure(
                resp.decisions
                    .iter()
                    .flat_map(|d| d.kept_item_ids.iter().map(String::as_str)),
                prefix,
            ),
        )
    }
}

/// What the answers kept of what their requests offered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptShare {
    /// Answers measured.
    pub answers: u64,
    /// Content tokens their requests offered.
    pub offered: u64,
    /// Content tokens they kept.
    pub kept: u64,
    /// The least share one answer kept.
    pub least: Option<f64>,
    /// Sum of offered over budget, per answer (for the mean ratio).
    offered_over_budget: f64,
}

impl KeptShare {
    /// Adds one answer that kept `kept` of `offered` tokens under `budget`.
    pub fn add(&mut self, offered: u64, kept: u64, budget: u32) {
        let share = kept as f64 / offered.max(1) as f64;
        self.answers += 1;
        self.offered += offered;
        self.kept += kept;
        self.least = Some(self.least.map_or(share, |l| l.min(share)));
        self.offered_over_budget += offered as f64 / f64::from(budget.max(1));
    }

    /// Kept tokens over offered tokens, over every answer.
    pub fn share(&self) -> Option<f64> {
        (self.offered > 0).then(|| self.kept as f64 / self.offered as f64)
    }

    /// The mean of each request's offer over its budget.
    pub fn offered_over_budget(&self) -> Option<f64> {
        (self.answers > 0).then(|| self.offered_over_budget / self.answers as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_over_tokens_and_the_least_is_per_answer() {
        let mut k = KeptShare::default();
        assert_eq!((k.share(), k.offered_over_budget()), (None, None));
        k.add(1_200, 1_000, 1_000);
        k.add(800, 400, 1_000);
        assert_eq!((k.answers, k.offered, k.kept), (2, 2_000, 1_400));
        assert_eq!(k.share(), Some(0.7));
        assert_eq!(k.least, Some(0.5));
        assert!((k.offered_over_budget().unwrap() - 1.0).abs() < 1e-12);
    }
}
