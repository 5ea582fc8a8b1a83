//! Series started at zero from the catalog and the configuration, so that a
//! fresh sidecar's first scrape already has every series alerts and
//! dashboards read (`rate()` needs two samples). Up here, not in
//! `telemetry`, because the label values belong to the domain.

use crate::assemble::Catalog;
use crate::compact::CompactOutcome;
use crate::gateway::fit::Pass;
use crate::memory::model::SUMMARY_TYPE;
use crate::prompt::{BlockKind, Change};
use crate::prompt_cache::families::OTHER;
use crate::prompt_cache::feedback::{DIAGNOSTICS, PROVIDERS};
use crate::prompt_cache::volatile::Volatile;
use crate::telemetry::metrics;

/// Starts every series at zero: the fixed ones, then those of `catalog`
/// and of the configured memory `types`.
pub fn start(catalog: &Catalog, memory_types: &[String]) {
    let providers: Vec<&'static str> = PROVIDERS.into_iter().chain(["other"]).collect();
    metrics::initialize(&metrics::Labels {
        block_kinds: &BlockKind::ALL.map(BlockKind::as_str),
        providers: &providers,
        volatile_kinds: &Volatile::ALL.map(Volatile::as_str),
        compact_outcomes: &CompactOutcome::ALL.map(CompactOutcome::as_str),
        diagnostics: &DIAGNOSTICS.into_iter().chain(["other"]).collect::<Vec<_>>(),
    });
    metrics::memory_types_known(memory_types.iter().cloned().chain([SUMMARY_TYPE.to_owned()]));
    gateway_known();
    catalog_known(catalog);
}

/// Starts the gateway edge's series: each API's fitted and unchanged
/// requests, and each reason a request is passed on.
fn gateway_known() {
    for api in metrics::GATEWAY_APIS {
        metrics::gateway_known(api, "fitted", "none");
        metrics::gateway_known(api, "unchanged", "none");
        metrics::gateway_known(api, "refused", "context_length_exceeded");
        for pass in Pass::ALL {
            metrics::gateway_known(api, "passed", pass.as_str());
        }
    }
}

/// Starts the series of a catalog's models and families, and exports the
/// margins of its estimating models (at start and after each reload).
pub fn catalog_known(catalog: &Catalog) {
    metrics::models_known(catalog.models.entries().iter().map(|m| m.name.clone()));
    metrics::families_known(catalog.families.iter().cloned().chain([OTHER.to_owned()]));
    metrics::divergences_known(
        catalog
            .families
            .iter()
            .cloned()
            .chain([OTHER.to_owned(), metrics::FAMILY_NONE.to_owned()]),
        &Change::ALL.map(Change::as_str),
    );
    for e in catalog
        .models
        .entries()
        .iter()
        .filter(|e| !e.tokenizer.is_exact())
    {
        metrics::estimate_margin(e.name.clone(), e.tokenizer.margin_percent());
    }
}
