//! Cache-busting detection: values in the static prefix that change from one
//! request to the next (timestamps, dates, UUIDs, long hex ids) change the
//! prefix hash and so defeat provider prompt caches. One linear pass over the
//! bytes, run only when a prefix is new (its findings are cached with its
//! token count).

/// A kind of volatile value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Volatile {
    /// A date with a time, a time with seconds, or a Unix timestamp.
    Timestamp,
    /// A calendar date (`2026-11-22`, `2026/11/22`).
    Date,
    /// A UUID (`8-4-4-4-12` hex digits).
    Uuid,
    /// A run of 16 or more hex digits mixing digits and letters.
    HexId,
}

impl Volatile {
    /// Every kind.
    pub const ALL: [Volatile; 4] = [
        Volatile::Timestamp,
        Volatile::Date,
        Volatile::Uuid,
        Volatile::HexId,
    ];

    /// A stable lower-case name, used as a bounded metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Volatile::Timestamp => "timestamp",
            Volatile::Date => "date",
            Volatile::Uuid => "uuid",
            Volatile::HexId => "hex_id",
        }
    }
}

fn digits(b: &[u8], at: usize, n: usize) -> Option<u32> {
    let s = b.get(at..at + n)?;
    s.iter().try_fold(0u32, |acc, &c| {
        c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
    })
}

fn hex_run(b: &[u8], at: usize, n: usize) -> bool {
    b.get(at..at + n)
        .is_some_and(|s| s.iter().all(u8::is_ascii_hexdigit))
}

const fn word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `HH:MM:SS` at `at`.
fn time_at(b: &[u8], at: usize) -> bool {
    matches!(digits(b, at, 2), Some(h) if h < 24)
        && b.get(at + 2) == Some(&b':')
        && matches!(digits(b, at + 3, 2), Some(m) if m < 60)
        && b.get(at + 5) == Some(&b':')
        && matches!(digits(b, at + 6, 2), Some(s) if s < 61)
}

/// The value starting at `at` (a word start), if volatile, and its length.
fn value_at(b: &[u8], at: usize) -> Option<(Volatile, usize)> {
    // UUID: 8-4-4-4-12.
    let uuid = [8usize, 4, 4, 4, 12];
    let mut pos = at;
    let mut ok = true;
    for (i, &n) in uuid.iter().enumerate() {
        if !hex_run(b, pos, n) {
            ok = false;
            break;
        }
        pos += n;
        if i < 4 {
            if b.get(pos) != Some(&b'-') {
                ok = false;
                break;
            }
            pos += 1;
        }
    }
    if ok && !b.get(pos).copied().is_some_and(word_char) {
        return Some((Volatile::Uuid, pos - at));
    }
    // Date: YYYY-MM-DD or YYYY/MM/DD, 1900-2099; with a time: a timestamp.
    if let (Some(y), Some(&sep)) = (digits(b, at, 4), b.get(at + 4))
        && (1900..2100).contains(&y)
        && (sep == b'-' || sep == b'/')
        && matches!(digits(b, at + 5, 2), Some(m) if (1..=12).contains(&m))
        && b.get(at + 7) == Some(&sep)
        && matches!(digits(b, at + 8, 2), Some(d) if (1..=31).contains(&d))
        && !b.get(at + 10).is_some_and(u8::is_ascii_digit)
    {
        let timed = matches!(b.get(at + 10), Some(b'T' | b' ')) && time_at(b, at + 11);
        return Some(if timed {
            (Volatile::Timestamp, 19)
        } else {
            (Volatile::Date, 10)
        });
    }
    if time_at(b, at) && !b.get(at + 8).is_some_and(u8::is_ascii_digit) {
        return Some((Volatile::Timestamp, 8));
    }
    // A run of word characters: Unix timestamps and hex ids.
    let run = b[at..].iter().take_while(|&&c| word_char(c)).count();
    let word = &b[at..at + run];
    if word.iter().all(u8::is_ascii_digit) && matches!(run, 10 | 13) && word[0] == b'1' {
        return Some((Volatile::Timestamp, run));
    }
    if run >= 16
        && word.iter().all(u8::is_ascii_hexdigit)
        && word.iter().any(u8::is_ascii_digit)
        && word.iter().any(u8::is_ascii_alphabetic)
    {
        return Some((Volatile::HexId, run));
    }
    None
}

/// A word character (ASCII letter, digit or `_`).
const WORD: u8 = 1;
/// An ASCII digit.
const DIGIT: u8 = 2;
/// A word character that is not a hex digit.
const NOT_HEX: u8 = 4;

/// Each byte's classes, for the scan's inner loops.
static CLASS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if word_char(c) {
            table[b] = WORD;
            if c.is_ascii_digit() {
                table[b] |= DIGIT;
            }
            if !c.is_ascii_hexdigit() {
                table[b] |= NOT_HEX;
            }
        }
        b += 1;
    }
    table
};

/// The volatile values in `text`: a bit per [`Volatile::ALL`] kind found,
/// and the first finding with its byte offset.
///
/// `value_at` is tried at every word start that may begin a value: a
/// word holding a digit (every kind but a UUID starts with a digit or holds
/// one in its first word), or 8 hex digits before a `-` (a UUID's first
/// group). Most words of prose are neither and cost one table lookup per
/// byte. A value found is skipped whole, and so is the rest of a word it
/// ends inside.
pub fn scan(text: &str) -> (u8, Option<(Volatile, usize)>) {
    let b = text.as_bytes();
    let class = |i: usize| CLASS[usize::from(b[i])];
    let (mut kinds, mut first) = (0u8, None);
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && class(i) & WORD == 0 {
            i += 1;
        }
        let start = i;
        let mut seen = 0u8;
        while i < b.len() && class(i) & WORD != 0 {
            seen |= class(i);
            i += 1;
        }
        if start == i {
            break;
        }
        let uuid_head = i - start == 8 && seen & NOT_HEX == 0 && b.get(i) == Some(&b'-');
        if (seen & DIGIT != 0 || uuid_head)
            && let Some((kind, len)) = value_at(b, start)
        {
            let bit = Volatile::ALL.iter().position(|&k| k == kind).unwrap_or(0);
            kinds |= 1 << bit;
            first.get_or_insert((kind, start));
            i = start + len;
            // A value that ends inside a word: the rest of it starts none.
            while i > 0 && i < b.len() && class(i) & WORD != 0 && class(i - 1) & WORD != 0 {
                i += 1;
            }
        }
    }
    (kinds, first)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn first(text: &str) -> Option<Volatile> {
        scan(text).1.map(|(k, _)| k)
    }

    #[test]
    fn finds_what_busts_caches() {
        assert_eq!(first("Today is 2026-11-22."), Some(Volatile::Date));
        assert_eq!(first("Now: 2026-11-22T03:05:43Z"), Some(Volatile::Timestamp));
        assert_eq!(first("Now: 2026-11-22 03:05:43"), Some(Volatile::Timestamp));
        assert_eq!(first("at 03:05:43 UTC"), Some(Volatile::Timestamp));
        assert_eq!(first("epoch 1795312543"), Some(Volatile::Timestamp));
        assert_eq!(first("epoch ms 1795312543123."), Some(Volatile::Timestamp));
        assert_eq!(
            first("request 9b2c4f1e-7a3d-4c2b-9f10-2e6d8a7b5c4d here"),
            Some(Volatile::Uuid)
        );
        assert_eq!(
            first("request deadbeef-7a3d-4c2b-9f10-2e6d8a7b5c4d here"),
            Some(Volatile::Uuid)
        );
        assert_eq!(
            first("trace=4bf92f3577b34da6a3ce929d0e0e4736"),
            Some(Volatile::HexId)
        );
        let (kinds, at) = scan("id 9b2c4f1e-7a3d-4c2b-9f10-2e6d8a7b5c4d on 2026/01/02");
        assert_eq!(kinds, 0b0110);
        assert_eq!(at, Some((Volatile::Uuid, 3)));
    }

    #[test]
    fn leaves_ordinary_text_alone() {
        for text in [
            "You are a careful assistant. Answer in at most 3 sentences.",
            "Version 2.0.1, section 12-34, phone 555-1234, ratio 3:45.",
            "Call 1234567890123456 digits, the year 2026, deadbeef, decaf-bad.",
            "Codes: ABCDEFABCDEFABCDEF (no digits), 1234567890123456789 (no letters).",
            "Dates out of range: 1800-01-01, 2026-13-01, 2026-11-32, 20261-11-22.",
            "Times out of range: 25:00:00 and 12:61:00; short time 10:30.",
            "Unicode: naïve café 東京 2026年.",
        ] {
            assert_eq!(scan(text), (0, None), "{text}");
        }
    }

    /// The scan before words that cannot start a value were skipped:
    /// [`value_at`] at every word start.
    fn scan_every_word(text: &str) -> (u8, Option<(Volatile, usize)>) {
        let b = text.as_bytes();
        let (mut kinds, mut first) = (0u8, None);
        let mut i = 0;
        while i < b.len() {
            if word_char(b[i]) && (i == 0 || !word_char(b[i - 1])) {
                if let Some((kind, len)) = value_at(b, i) {
                    let bit = Volatile::ALL.iter().position(|&k| k == kind).unwrap_or(0);
                    kinds |= 1 << bit;
                    first.get_or_insert((kind, i));
                    i += len;
                    continue;
                }
                while i < b.len() && word_char(b[i]) {
                    i += 1;
                }
                continue;
            }
            i += 1;
        }
        (kinds, first)
    }

    /// Pieces that make and almost make every kind, glued at random.
    fn near_values() -> impl Strategy<Value = String> {
        let atom = prop_oneof![
            Just("2026-11-22".to_owned()),
            Just("1999/01/31".to_owned()),
            Just("T03:05:43".to_owned()),
            Just(" 23:59:60".to_owned()),
            Just("1795312543".to_owned()),
            Just("1795312543123".to_owned()),
            Just("deadbeef-".to_owned()),
            Just("9b2c4f1e-7a3d-4c2b-9f10-2e6d8a7b5c4d".to_owned()),
            Just("4bf92f3577b34da6a3ce929d0e0e4736".to_owned()),
            "[a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            Just("abcdefabcdefabcdef".to_owned()),
            "[0-9a-fA-FT:/_ .-]{1,12}",
            "[a-z]{1,9}",
        ];
        proptest::collection::vec(atom, 0..12).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Skipping words that cannot start a value finds what looking at
        /// every word found (kinds, first kind and offset).
        #[test]
        fn skipping_words_finds_the_same_values(text in prop_oneof![near_values(), "\\PC{0,120}"]) {
            prop_assert_eq!(scan(&text), scan_every_word(&text), "{:?}", text);
        }

        /// Never panics, and finds nothing in text without digits.
        #[test]
        fn total_and_quiet_on_letters(text in "\\PC{0,200}", letters in "[a-zA-Z .,:/-]{0,200}") {
            let _ = scan(&text);
            prop_assert_eq!(scan(&letters), (0, None));
        }
    }
}
