//! The report as JSON: the text's figures, rounded, `null` for n/a. Scripts
//! in `.ci/` and `benches/` read it: its keys are a contract.

use serde_json::{Value, json};

use super::{QUANTILES, Report, Server, Warmup, ms};
use crate::drive::Rpc;
use crate::hist::Histogram;
use crate::kept::KeptShare;
use crate::sessions::SessionFigures;

impl Report<'_> {
    /// The report as JSON (`null` for n/a).
    pub fn json(&self) -> Value {
        let (i, s) = (&self.i, self.i.stats);
        json!({
            "workload": i.workload,
            "sessions": i.sessions.as_ref().map(sessions),
            "kept": i.kept.as_ref().map(kept),
            "target": i.target,
            "spawned": i.spawned,
            "connections": i.connections,
            "rpc": i.plan.rpc.method(),
            "batch_size": (i.plan.rpc == Rpc::Batch).then_some(i.plan.batch_size),
            "concurrency": i.plan.concurrency,
            "rate": i.plan.rate,
            "cold": i.plan.cold,
            "warmup": warmup(&i.warmup),
            "duration_seconds": round(Some(i.elapsed.as_secs_f64()), 4),
            "interrupted": i.interrupted,
            "requests": {
                "sent": i.sent,
                "ok": s.ok,
                "errors": s.errors(),
                "by_code": std::iter::once(("OK", s.ok))
                    .chain(s.codes.iter().map(|(c, n)| (*c, *n)))
                    .collect::<std::collections::BTreeMap<_, _>>(),
                "malformed": s.malformed,
                "first_message": s.messages,
                "calls": s.calls,
            },
            "throughput": {
                "requests_per_second": round(Some(self.throughput()), 2),
                "calls_per_second": round(Some(self.calls_per_second()), 2),
            },
            "latency_ms": {
                "per_call": latency(&s.per_call),
                "per_request": (i.plan.rpc == Rpc::Batch).then(|| latency(&s.per_request)),
            },
            "server": server(&self.server),
        })
    }
}

/// Latency quantiles, max and mean in ms, and the count.
fn latency(h: &Histogram) -> Value {
    let mut o = serde_json::Map::new();
    for (label, q) in QUANTILES {
        o.insert(label.to_owned(), json!(round(ms(h.quantile(q)), 4)));
    }
    o.insert("max".to_owned(), json!(round(ms(h.max()), 4)));
    o.insert("mean".to_owned(), json!(round(ms(h.mean()), 4)));
    o.insert("count".to_owned(), json!(h.count()));
    Value::Object(o)
}

/// What the warm-up did.
fn warmup(w: &Warmup) -> Value {
    match w {
        Warmup::Off => json!({"done": false}),
        Warmup::SkippedCold => json!({"done": false, "skipped": "cold"}),
        Warmup::Done {
            requests,
            ok,
            errors,
            elapsed,
        } => json!({"done": true, "requests": requests, "ok": ok, "errors": errors,
                    "seconds": round(Some(elapsed.as_secs_f64()), 4)}),
    }
}

/// A session workload's prefix shares and budget use.
fn sessions(f: &SessionFigures) -> Value {
    json!({
        "sessions": f.sessions,
        "compared": f.compared,
        "furthest_position": f.furthest,
        "prefix_share": round(Some(f.share), 4),
        "prefix_share_p10": round(Some(f.share_p10), 4),
        "prefix_share_median": round(Some(f.share_median), 4),
        "cut": f.cut,
        "utilization": round(f.utilization, 4),
        "utilization_p10": round(f.utilization_p10, 4),
    })
}

/// The fresh workload's kept share.
fn kept(k: &KeptShare) -> Value {
    json!({
        "answers": k.answers,
        "offered_tokens": k.offered,
        "kept_tokens": k.kept,
        "share": round(k.share(), 4),
        "least_share": round(k.least, 4),
        "offered_over_budget": round(k.offered_over_budget(), 4),
    })
}

/// The server's figures over the run.
fn server(v: &Server) -> Value {
    json!({
        "cpu_cores": round(v.cpu_cores, 3),
        "cpu_us_per_request": round(v.cpu_us_per_request, 2),
        "rss_bytes": {"start": v.rss_start, "max": v.rss_max, "end": v.rss_end},
        "open_fds": v.open_fds,
        "alive_tasks": v.alive_tasks,
        "in_flight": v.in_flight,
        "phase_us": v.phases.iter().map(|(p, mean, per_request)| {
            (p.clone(), json!({"mean": round(*mean, 2), "per_request": round(Some(*per_request), 2)}))
        }).collect::<serde_json::Map<_, _>>(),
        "call_mean_ms": v.rpcs.iter().map(|(rpc, mean, calls)| {
            (rpc.clone(), json!({"mean": round(Some(*mean), 4), "calls": calls}))
        }).collect::<serde_json::Map<_, _>>(),
        "segment_cache_hit_rate": round(v.segment_hit_rate, 5),
        "prefix_cache_hit_rate": round(v.prefix_hit_rate, 5),
    })
}

/// Rounds for JSON, where 2.4561040000000003 is noise.
fn round(v: Option<f64>, decimals: i32) -> Option<f64> {
    let scale = 10f64.powi(decimals);
    v.map(|v| (v * scale).round() / scale)
}
