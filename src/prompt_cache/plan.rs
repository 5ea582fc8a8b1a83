//! The cache plan: where a prompt's cache markers go in its provider's own
//! terms, and whether each takes effect.
