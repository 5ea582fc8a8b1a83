//! The sample texts the priors are derived from, one generator for each
//! kind, the published ratios each generation's counts bear to cl100k's,
//! and the non-negative least squares fit that turns them into
//! coefficients.

use crate::tokens::estimate::{FEATURES, FLOOR, Features, Generation};
use crate::tokens::{Encoding, Tokenizer};
use crate::workload::{self, Rng};

/// A kind of sample text, with its own published ratios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    English,
    German,
    Code,
    Json,
    Data,
    Chinese,
    Russian,
    Whitespace,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::English,
        Kind::German,
        Kind::Code,
        Kind::Json,
        Kind::Data,
        Kind::Chinese,
        Kind::Russian,
        Kind::Whitespace,
    ];

    /// A text of this kind of about `bytes` bytes.
    pub fn sample(self, rng: &mut Rng, bytes: usize) -> String {
        match self {
            Kind::English => workload::prose(rng, bytes),
            Kind::German => words(rng, bytes, GERMAN, " ", ". "),
            Kind::Code => workload::code(rng, bytes),
            Kind::Json => json(rng, bytes),
            Kind::Data => data(rng, bytes),
            Kind::Chinese => words(rng, bytes, CHINESE, "", "。"),
            Kind::Russian => words(rng, bytes, RUSSIAN, " ", ". "),
            Kind::Whitespace => whitespace(rng, bytes),
        }
    }

    /// Tokens of `generation` per cl100k token on this kind of text, from
    /// the published measurements (see the priors' derivation in
    /// `estimate.rs`); [`Generation::Unknown`] has none of its own.
    pub fn ratio(self, generation: Generation) -> Option<f64> {
        // The old Claude tokenizer against cl100k, then the new against
        // the old.
        let (legacy, new_over_legacy) = match self {
            Kind::English => (1.15, 1.45),
            Kind::German => (1.82 / 1.45, 1.45),
            Kind::Code => (1.15, 1.175),
            Kind::Json | Kind::Data => (1.15, 1.1),
            Kind::Chinese => (0.88, 1.0),
            Kind::Russian => (1.0, 1.0),
            Kind::Whitespace => (1.15, 1.95),
        };
        match generation {
            Generation::ClaudeLegacy => Some(legacy),
            Generation::Claude2026 => Some(legacy * new_over_legacy),
            Generation::Gemini => Some(1.0),
            Generation::Unknown => None,
        }
    }
}

const GERMAN: &[&str] = &[
    "der",
    "die",
    "das",
    "und",
    "mit",
    "für",
    "über",
    "nach",
    "wurde",
    "Kunde",
    "Konto",
    "Rückerstattung",
    "innerhalb",
    "dreißig",
    "Tage",
    "Bestellung",
    "Versand",
    "Rechnung",
    "Unterstützung",
    "Zahlung",
    "fehlgeschlagen",
    "Verlängerung",
    "Abrechnungszeitraum",
    "Lieferung",
    "Datenbank",
    "Abfrage",
    "Veröffentlichung",
    "Änderungen",
    "beschreiben",
    "jedoch",
    "deshalb",
    "geöffnet",
    "Richtlinie",
    "Lagerhaus",
    "Verzögerung",
    "Schätzung",
];

const RUSSIAN: &[&str] = &[
    "клиент",
    "аккаунт",
    "возврат",
    "политика",
    "в течение",
    "тридцати",
    "дней",
    "заказ",
    "доставка",
    "счёт",
    "поддержка",
    "заявка",
    "была",
    "открыта",
    "после",
    "платёж",
    "не прошёл",
    "тариф",
    "обновление",
    "оплата",
    "продление",
    "скидка",
    "регион",
    "склад",
    "поэтому",
    "однако",
    "продукт",
    "версия",
    "изменения",
    "база данных",
    "запрос",
    "мы",
    "они",
    "это",
];

const CHINESE: &[&str] = &[
    "客户",
    "账户",
    "退款",
    "政策",
    "在三十天内",
    "订单",
    "发货",
    "发票",
    "技术支持",
    "工单",
    "已经打开",
    "付款失败之后",
    "套餐",
    "升级",
    "账单周期",
    "续订",
    "折扣",
    "地区",
    "仓库",
    "交付",
    "估计",
    "因为",
    "但是",
    "因此",
    "产品",
    "版本",
    "发布说明",
    "描述了变化",
    "数据库",
    "索引",
    "查询",
    "我们",
    "他们",
    "这个",
    "的",
    "了",
    "，",
];

/// Sentences of 6 to 19 words from `vocabulary`, the first capitalised.
fn words(rng: &mut Rng, bytes: usize, vocabulary: &[&str], gap: &str, stop: &str) -> String {
    let mut s = String::with_capacity(bytes + 64);
    while s.len() < bytes {
        let n = 6 + rng.below(14);
        for i in 0..n {
            let w = rng.pick(vocabulary);
            if i == 0 {
                let mut c = w.chars();
                s.extend(c.next().into_iter().flat_map(char::to_uppercase));
                s.push_str(c.as_str());
            } else {
                s.push_str(gap);
                s.push_str(w);
            }
        }
        s.push_str(stop);
    }
    s
}

/// Compact JSON records, as an API returns them.
fn json(rng: &mut Rng, bytes: usize) -> String {
    const PLANS: &[&str] = &["free", "pro", "team", "enterprise"];
    const TAGS: &[&str] = &["billing", "eu", "priority", "churn-risk", "beta"];
    let mut records = Vec::new();
    let mut len = 0;
    while len < bytes {
        let record = serde_json::json!({
            "id": rng.below(1_000_000),
            "email": format!("user{}@example.com", rng.below(10_000)),
            "plan": rng.pick(PLANS),
            "active": rng.below(2) == 0,
            "tags": [rng.pick(TAGS), rng.pick(TAGS)],
            "balance": rng.below(100_000) as f64 / 100.0,
            "created_at": format!("2025-{:02}-{:02}T10:{:02}:00Z", 1 + rng.below(12), 1 + rng.below(28), rng.below(60)),
        });
        len += record.to_string().len() + 1;
        records.push(record);
    }
    serde_json::Value::Array(records).to_string()
}

/// Numbers and hexadecimal ids in comma-separated rows: the sample where
/// digits dominate (no measurement of its own: JSON's ratios, as data).
fn data(rng: &mut Rng, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 64);
    while s.len() < bytes {
        let id = rng.next_u64();
        let (a, b) = (rng.below(100_000), rng.below(10_000));
        s.push_str(&format!(
            "{a},{}.{b:04},{},{id:x}\n",
            rng.below(100),
            rng.next_u64() % 10_000_000_000
        ));
    }
    s
}

/// Code indented deep, and tables padded into columns with spaces.
fn whitespace(rng: &mut Rng, bytes: usize) -> String {
    const CELLS: &[&str] = &[
        "id",
        "name",
        "status",
        "ok",
        "failed",
        "42",
        "3.14",
        "eu-west-1",
        "-",
    ];
    let mut s = String::with_capacity(bytes + 128);
    while s.len() < bytes {
        if rng.below(2) == 0 {
            let depth = 8 + 4 * rng.below(6);
            s.push_str(&" ".repeat(depth));
            s.push_str(workload::code(rng, 1).trim());
        } else {
            for _ in 0..4 {
                let cell = rng.pick(CELLS);
                s.push_str(cell);
                s.push_str(&" ".repeat(16 - cell.len()));
            }
        }
        s.push('\n');
        if rng.below(4) == 0 {
            s.push_str("\n\n");
        }
    }
    s
}

/// The samples the priors are fitted to: three of each kind, of 1.5, 3 and
/// 6 KB, with the cl100k count of each.
pub fn samples() -> Vec<(Kind, Features, f64)> {
    let cl100k = Tokenizer::exact(Encoding::Cl100kBase);
    let mut rng = Rng::new(2026);
    let mut out = Vec::new();
    for kind in Kind::ALL {
        for bytes in [1500, 3000, 6000] {
            let text = kind.sample(&mut rng, bytes);
            out.push((kind, Features::of(&text), f64::from(cl100k.count(&text))));
        }
    }
    out
}

/// The most a feature may cost in a prior, by index in [`FEATURE_NAMES`]:
/// an accented letter at most one token more than an ASCII one (a
/// two-byte character cut from its word). Unbounded, the fit makes
/// `latin_extended` stand for "German" (5 to 7 tokens an umlaut), which
/// would charge French or Spanish text double.
const MOST: [f64; FEATURES] = {
    let mut most = [f64::INFINITY; FEATURES];
    most[8] = 1.0;
    most
};

/// The coefficients that minimise the squared relative error of
/// `Σ c_i × features_i` against `ratio(kind) × cl100k` over the samples,
/// with every `FLOOR[i] <= c_i <= MOST[i]` (`None` for [`Generation::Unknown`]).
pub fn fit(generation: Generation) -> Option<[f64; FEATURES]> {
    let mut rows = Vec::new();
    for (kind, features, cl100k) in samples() {
        let target = kind.ratio(generation)? * cl100k;
        rows.push(features.values().map(|v| v / target));
    }
    Some(nnls(&rows))
}

/// Bounded least squares of `rows · c = 1` (`FLOOR[i] <= c_i <= MOST[i]`), by
/// cyclic coordinate descent on the normal equations (convex: it reaches
/// the minimum).
pub fn nnls(rows: &[[f64; FEATURES]]) -> [f64; FEATURES] {
    let mut g = [[0.0; FEATURES]; FEATURES];
    let mut h = [0.0; FEATURES];
    for r in rows {
        for i in 0..FEATURES {
            h[i] += r[i];
            for j in 0..FEATURES {
                g[i][j] += r[i] * r[j];
            }
        }
    }
    let mut c = FLOOR.0;
    for _ in 0..200_000 {
        let mut moved: f64 = 0.0;
        for i in 0..FEATURES {
            if g[i][i] <= 0.0 {
                continue;
            }
            let grad: f64 = (0..FEATURES).map(|j| g[i][j] * c[j]).sum::<f64>() - h[i];
            let next = (c[i] - grad / g[i][i]).clamp(FLOOR.0[i], MOST[i]);
            moved = moved.max((next - c[i]).abs());
            c[i] = next;
        }
        if moved < 1e-13 {
            break;
        }
    }
    c
}
