//! The shared vocabulary, the bottom layer with [`crate::telemetry`]: words
//! every room uses and none owns. It imports nothing from the crate.
//!
//! - [`Role`]: whose message a text is.
//! - [`Warning`] and its stable [`codes`]: what a response says besides its
//!   answer (ids and counts, never content).
//! - [`FieldViolation`]: a request field that is wrong, by its proto path.
//! - [`Cancel`], [`Meter`], [`Cancelled`]: how long loops stop once a
//!   request's deadline passes or its caller goes away.
//! - [`escape`]: how text is kept from closing or forging our wrappers.
//! - [`date`]: calendar dates from day counts.

pub mod cancel;
pub mod date;
pub mod escape;
mod role;
pub mod violation;
mod warning;

pub use cancel::{Cancel, Cancelled, Meter};
pub use role::Role;
pub use violation::FieldViolation;
pub use warning::{Warning, WarningRef, codes};

/// `n` as a `u32`, saturating at `u32::MAX` (counts and indexes reported on
/// the wire are `u32`; a request cannot hold more, but the type says `usize`).
pub fn saturating_u32<T: TryInto<u32>>(n: T) -> u32 {
    n.try_into().unwrap_or(u32::MAX)
}
