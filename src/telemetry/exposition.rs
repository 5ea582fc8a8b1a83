//! Reads the Prometheus text exposition format back: the metrics page as
//! series of name, labels and value, for the load generator's report and the
//! integration tests. Lenient by design: a line it cannot read is skipped,
//! never an error, since a reader of a scrape wants the series it can use.

/// One series of one page: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name, with any `_bucket`/`_sum`/`_count` suffix.
    pub name: String,
    /// The labels in page order, values unescaped.
    pub labels: Vec<(String, String)>,
    /// The value (`+Inf`, `-Inf` and `NaN` included); a timestamp after it
    /// is ignored.
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, if the series has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether this series is named `name` and its labels include every
    /// `labels` pair (it may have others).
    pub fn matches(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.name == name && labels.iter().all(|(k, v)| self.label(k) == Some(*v))
    }
}

/// Every series of `page` in page order; comments, `# HELP`/`# TYPE` lines,
/// blank lines and lines it cannot read are skipped.
pub fn parse(page: &str) -> Vec<Sample> {
    page.lines().filter_map(parse_line).collect()
}

/// The value of the first series of `page`, in page order, named `name`
/// whose labels include every `labels` pair; `None` when none does.
pub fn value(page: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    page.lines()
        .filter_map(parse_line)
        .find(|s| s.matches(name, labels))
        .map(|s| s.value)
}

/// The sum of every series of `samples` named `name` whose labels include
/// every `labels` pair; `None` when none does.
pub fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut matched = samples
        .iter()
        .filter(|s| s.matches(name, labels))
        .map(|s| s.value)
        .peekable();
    matched.peek()?;
    Some(matched.sum())
}

/// One line as a series, or `None` for a comment, a blank or an unreadable
/// line.
fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(inner)?;
        labels = parsed;
        rest = after;
    }
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Reads `k="v",...}` and returns the labels and what follows the brace.
fn parse_labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start_matches([' ', ',']);
        if let Some(after) = s.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_owned();
        s = s[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        };
        labels.push((key, value));
        s = &s[end + 1..];
    }
}

/// A sample value, with the format's spellings of the infinities and NaN.
fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        s => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"# HELP process_cpu_seconds_total user and system CPU time
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
# a plain comment 99
assembler_segment_cache_lookups_total{result="hit"} 90
assembler_segment_cache_lookups_total{result="miss"} 10

assembler_phase_duration_seconds_sum{phase="decode"} 0.25
assembler_phase_duration_seconds_sum{phase="tokenize"} 1.5 1700000000000
assembler_phase_duration_seconds_bucket{phase="decode",le="+Inf"} 7
odd_label{a="x\"y, z}",b="2"} -Inf
newline{a="one\ntwo\\three"} 1
up_inf +Inf
not_a_number NaN
broken{a="unterminated} 3
no_value{a="b"}
bad_value{a="b"} seven
"#;

    #[test]
    fn comments_help_type_and_blank_lines_are_skipped() {
        let names: Vec<String> = parse(PAGE).into_iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "process_cpu_seconds_total",
                "assembler_segment_cache_lookups_total",
                "assembler_segment_cache_lookups_total",
                "assembler_phase_duration_seconds_sum",
                "assembler_phase_duration_seconds_sum",
                "assembler_phase_duration_seconds_bucket",
                "odd_label",
                "newline",
                "up_inf",
                "not_a_number",
            ]
        );
    }

    #[test]
    fn labels_with_escaped_quotes_commas_and_braces() {
        let odd = parse(PAGE).into_iter().find(|s| s.name == "odd_label");
        assert_eq!(
            odd,
            Some(Sample {
                name: "odd_label".to_owned(),
                labels: vec![
                    ("a".to_owned(), "x\"y, z}".to_owned()),
                    ("b".to_owned(), "2".to_owned()),
                ],
                value: f64::NEG_INFINITY,
            })
        );
        assert_eq!(
            value(PAGE, "odd_label", &[("a", "x\"y, z}"), ("b", "2")]),
            Some(f64::NEG_INFINITY)
        );
        assert_eq!(value(PAGE, "newline", &[("a", "one\ntwo\\three")]), Some(1.0));
        assert_eq!(
            value(PAGE, "assembler_phase_duration_seconds_bucket", &[("le", "+Inf")]),
            Some(7.0)
        );
    }

    #[test]
    fn infinities_nan_and_timestamps() {
        assert_eq!(value(PAGE, "up_inf", &[]), Some(f64::INFINITY));
        assert!(value(PAGE, "not_a_number", &[]).is_some_and(f64::is_nan));
        assert_eq!(
            value(
                PAGE,
                "assembler_phase_duration_seconds_sum",
                &[("phase", "tokenize")]
            ),
            Some(1.5)
        );
    }

    #[test]
    fn malformed_lines_are_skipped_and_the_next_line_is_read() {
        assert_eq!(value(PAGE, "broken", &[]), None);
        assert_eq!(value(PAGE, "no_value", &[]), None);
        assert_eq!(value(PAGE, "bad_value", &[]), None);
        assert_eq!(parse("broken{a=\"x} 3\nafter 4"), parse("after 4"));
    }

    #[test]
    fn value_is_the_first_match_and_sum_adds_every_match() {
        assert_eq!(value(PAGE, "process_cpu_seconds_total", &[]), Some(12.5));
        assert_eq!(
            value(PAGE, "assembler_segment_cache_lookups_total", &[]),
            Some(90.0)
        );
        assert_eq!(
            value(
                PAGE,
                "assembler_segment_cache_lookups_total",
                &[("result", "miss")]
            ),
            Some(10.0)
        );
        let samples = parse(PAGE);
        assert_eq!(
            sum(&samples, "assembler_segment_cache_lookups_total", &[]),
            Some(100.0)
        );
        assert_eq!(
            sum(
                &samples,
                "assembler_segment_cache_lookups_total",
                &[("result", "hit")]
            ),
            Some(90.0)
        );
        assert_eq!(value(PAGE, "missing", &[]), None);
        assert_eq!(sum(&samples, "missing", &[]), None);
        assert_eq!(
            value(
                PAGE,
                "assembler_segment_cache_lookups_total",
                &[("result", "other")]
            ),
            None
        );
        // A prefix of a name is not the name.
        assert_eq!(value(PAGE, "process_cpu_seconds", &[]), None);
    }
}
