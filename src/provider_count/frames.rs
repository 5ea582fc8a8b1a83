//! A model's frames, measured with three calls, and a piece's content tokens
//! from its count.
//!
//! The one assumption: the single ASCII letter `"a"` is one token in every
//! model counted here (true of every BPE vocabulary with byte fallback that
//! these providers publish counts for). From the counts of three requests,
//!
//! - `base`  = count([user "a"]),
//! - `three` = count([user "a", assistant "a", user "a"]),
//! - `sys`   = count(system "a" with [user "a"]),
//!
//! the frames are `one_message = base - 1`,
//! `further_message = (three - base - 2) / 2` and `system = sys - base - 1`.
//! A piece is sent the same way with its text in place of one `"a"`, so its
//! content tokens are: Turn, `count([user TEXT]) - one_message`; System,
//! `count(system TEXT with [user "a"]) - base` (the system prompt's whole
//! cost, its frame included); Tools, `count(tools with [user "a"]) - base`
//! (the whole tool set's cost). Every subtraction saturates at 0: a provider
//! that answers less than the frame does not make a piece cost billions.

use super::{Frames, PieceKind};

/// The text of the probes: one token, by the assumption above.
pub const PROBE: &str = "a";

/// The counts of the three probe requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probes {
    /// count([user "a"]).
    pub base: u32,
    /// count([user "a", assistant "a", user "a"]).
    pub three: u32,
    /// count(system "a" with [user "a"]).
    pub system: u32,
}

/// A model's frames and the count of its one-message probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measured {
    /// The frames.
    pub frames: Frames,
    /// count([user "a"]), what a system prompt or a tool set is added to.
    pub base: u32,
}

impl From<Probes> for Measured {
    fn from(p: Probes) -> Measured {
        Measured {
            frames: Frames {
                one_message: p.base.saturating_sub(1),
                further_message: p.three.saturating_sub(p.base).saturating_sub(2) / 2,
                system: p.system.saturating_sub(p.base).saturating_sub(1),
            },
            base: p.base,
        }
    }
}

impl Measured {
    /// The content tokens of a piece of `kind` whose request counted `count`.
    pub fn content(&self, kind: PieceKind, count: u32) -> u32 {
        match kind {
            PieceKind::Turn => count.saturating_sub(self.frames.one_message),
            PieceKind::System | PieceKind::Tools => count.saturating_sub(self.base),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_contents_follow_the_documented_formulas() {
        // A provider with frames 7, 4 and 5.
        let m = Measured::from(Probes {
            base: 8,
            three: 7 + 4 * 2 + 3,
            system: 7 + 5 + 1 + 1,
        });
        let want = Frames {
            one_message: 7,
            further_message: 4,
            system: 5,
        };
        assert_eq!(m.frames, want);
        assert_eq!(m.content(PieceKind::Turn, 7 + 12), 12);
        assert_eq!(m.content(PieceKind::System, 8 + 5 + 12), 5 + 12);
        assert_eq!(m.content(PieceKind::Tools, 8 + 40), 40);
    }

    #[test]
    fn answers_below_the_frames_saturate_at_zero() {
        let m = Measured::from(Probes {
            base: 0,
            three: 0,
            system: 0,
        });
        assert_eq!(
            m.frames,
            Frames {
                one_message: 0,
                further_message: 0,
                system: 0
            }
        );
        let m = Measured::from(Probes {
            base: 8,
            three: 9,
            system: 8,
        });
        assert_eq!((m.frames.further_message, m.frames.system), (0, 0));
        assert_eq!(m.content(PieceKind::Turn, 3), 0);
        assert_eq!(m.content(PieceKind::System, 3), 0);
        assert_eq!(m.content(PieceKind::Tools, u32::MAX), u32::MAX - 8);
    }
}
