//! The cache plan and the divergence report on the wire.

use super::pb;
use crate::prompt::{
    CachePlan, Change, Divergence, Ineffective, Marker, MarkerTarget, PartKind, ProviderField,
};

/// A plan on the wire.
pub(super) fn plan_to_wire(p: CachePlan) -> pb::CachePlan {
    pb::CachePlan {
        provider: p.provider.to_owned(),
        markers: p.markers.into_iter().map(marker_to_wire).collect(),
        request_fields: p.request_fields.into_iter().map(field_to_wire).collect(),
        cacheable_tokens: p.cacheable_tokens,
    }
}

fn field_to_wire(f: ProviderField) -> pb::ProviderField {
    pb::ProviderField {
        name: f.name,
        json: f.json,
    }
}

/// A lifetime in the providers' notation: whole hours as `1h`, else whole
/// minutes as `5m`, else seconds.
pub(crate) fn ttl_text(seconds: u32) -> String {
    if seconds > 0 && seconds.is_multiple_of(3600) {
        format!("{}h", seconds / 3600)
    } else if seconds > 0 && seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

fn marker_to_wire(m: Marker) -> pb::CacheMarker {
    use pb::cache_marker::Target;
    pb::CacheMarker {
        target: Some(match m.target {
            MarkerTarget::Tool(i) => Target::ToolIndex(i),
            MarkerTarget::Message(i) => Target::MessageIndex(i),
        }),
        field: Some(field_to_wire(m.field)),
        ttl: m.ttl_seconds.map(ttl_text).unwrap_or_default(),
        prefix_tokens: m.prefix_tokens,
        effective: m.effective,
        reason: m
            .reason
            .map_or(pb::MarkerIneffective::Unspecified, ineffective_to_wire)
            .into(),
        kind: super::breakpoint_kind_to_wire(m.kind).into(),
    }
}

fn ineffective_to_wire(i: Ineffective) -> pb::MarkerIneffective {
    match i {
        Ineffective::BelowMinimum => pb::MarkerIneffective::BelowMinimum,
        Ineffective::OverBreakpointLimit => pb::MarkerIneffective::OverBreakpointLimit,
        Ineffective::TtlOrder => pb::MarkerIneffective::TtlOrder,
        Ineffective::VolatileBefore => pb::MarkerIneffective::VolatileBefore,
        Ineffective::LookbackExceeded => pb::MarkerIneffective::LookbackExceeded,
    }
}

/// A divergence on the wire.
pub(super) fn divergence_to_wire(d: Divergence) -> pb::Divergence {
    pb::Divergence {
        change: change_to_wire(d.change).into(),
        part: d.kind.map_or(pb::PromptPart::Unspecified, part_to_wire).into(),
        id: d.id,
        message_index: d.message_index,
        token_offset: d.token_offset,
        servable_tokens: d.servable_tokens,
    }
}

fn change_to_wire(c: Change) -> pb::CacheChange {
    match c {
        Change::None => pb::CacheChange::None,
        Change::Appended => pb::CacheChange::Appended,
        Change::ModelChanged => pb::CacheChange::ModelChanged,
        Change::ToolsChanged => pb::CacheChange::ToolsChanged,
        Change::SystemChanged => pb::CacheChange::SystemChanged,
        Change::VolatileValue => pb::CacheChange::VolatileValue,
        Change::WindowStep => pb::CacheChange::WindowStep,
        Change::SummaryChanged => pb::CacheChange::SummaryChanged,
        Change::TurnChanged => pb::CacheChange::TurnChanged,
        Change::ItemReordered => pb::CacheChange::ItemReordered,
        Change::ItemRemoved => pb::CacheChange::ItemRemoved,
        Change::ItemAdded => pb::CacheChange::ItemAdded,
        Change::QueryChanged => pb::CacheChange::QueryChanged,
    }
}

fn part_to_wire(k: PartKind) -> pb::PromptPart {
    match k {
        PartKind::Tools => pb::PromptPart::Tools,
        PartKind::System => pb::PromptPart::System,
        PartKind::Examples => pb::PromptPart::Examples,
        PartKind::Summary => pb::PromptPart::Summary,
        PartKind::Turn => pb::PromptPart::Turn,
        PartKind::Evidence => pb::PromptPart::Evidence,
        PartKind::Memory => pb::PromptPart::Memory,
        PartKind::State => pb::PromptPart::State,
        PartKind::Query => pb::PromptPart::Query,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_read_as_the_providers_write_them() {
        assert_eq!(ttl_text(300), "5m");
        assert_eq!(ttl_text(3600), "1h");
        assert_eq!(ttl_text(1800), "30m");
        assert_eq!(ttl_text(86_400), "24h");
        assert_eq!(ttl_text(45), "45s");
    }

    #[test]
    fn every_change_and_part_has_its_own_wire_value() {
        let changes: std::collections::HashSet<i32> =
            Change::ALL.iter().map(|&c| change_to_wire(c) as i32).collect();
        assert_eq!(changes.len(), Change::ALL.len());
        assert!(!changes.contains(&0));
        let parts: std::collections::HashSet<i32> =
            PartKind::ALL.iter().map(|&k| part_to_wire(k) as i32).collect();
        assert_eq!(parts.len(), PartKind::ALL.len());
        assert!(!parts.contains(&0));
    }
}
