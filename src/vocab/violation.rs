//! A request field that is wrong, named by its proto path.

/// A field of the request that is wrong, named by its proto path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    /// Proto path, e.g. `blocks[2].min_tokens`.
    pub field: String,
    /// What is wrong with it.
    pub description: String,
}

impl FieldViolation {
    /// A violation of `field`.
    pub fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        FieldViolation {
            field: field.into(),
            description: description.into(),
        }
    }
}

/// `field: description` of each violation, joined by `; ` (an error's text).
pub fn describe(violations: &[FieldViolation]) -> String {
    violations
        .iter()
        .map(|v| format!("{}: {}", v.field, v.description))
        .collect::<Vec<_>>()
        .join("; ")
}
