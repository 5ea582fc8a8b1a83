//! A lower bound without counting: the runs of non-whitespace in a text,
//! eight bytes at a time ([`super::Tokenizer::surely_over`] says why each
//! run is at least one token of cl100k and o200k).

/// Whether `bytes` holds more than `limit` runs of non-whitespace (ASCII
/// whitespace separates them), eight bytes at a time: each byte's top bit
/// says whether it is not whitespace, computed for the eight at once
/// without carries between them, and a run starts at a set bit of an ASCII
/// byte whose byte before (the word before's last byte carried in) is
/// clear (see [`super::Tokenizer::surely_over`] for why ASCII). Stops in
/// the word where the count passes the limit.
pub(super) fn runs_past(bytes: &[u8], limit: u32) -> bool {
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    const TOP: u64 = 0x8080_8080_8080_8080;
    const fn splat(b: u8) -> u64 {
        u64::from_le_bytes([b; 8])
    }
    /// The top bit of each byte that is not ASCII whitespace.
    fn not_space(word: u64) -> u64 {
        // Bytes of 0x80 and more are not whitespace; below it, adding to
        // the low seven bits never carries out of a byte.
        let low = word & LOW7;
        let at_least_tab = low + splat(0x80 - b'\t');
        let past_cr = low + splat(0x80 - (b'\r' + 1));
        let control = at_least_tab & !past_cr;
        let blank = !((low ^ splat(b' ')) + LOW7);
        let space = (control | blank) & !word & TOP;
        !space & TOP
    }
    let mut runs = 0u64;
    // The top bit of the byte before the word, when it is not whitespace.
    let mut carry = 0u64;
    let mut words = bytes.chunks_exact(8);
    for chunk in words.by_ref() {
        let mut le = [0u8; 8];
        le.copy_from_slice(chunk);
        let word = u64::from_le_bytes(le);
        let flags = not_space(word);
        // A start: an ASCII byte that is not whitespace after whitespace.
        let starts = flags & !word & !((flags << 8) | carry);
        runs += u64::from(starts.count_ones());
        if runs > u64::from(limit) {
            return true;
        }
        carry = flags >> 56;
    }
    let mut in_run = carry != 0;
    for &b in words.remainder() {
        let space = b == b' ' || b.wrapping_sub(b'\t') < 5;
        runs += u64::from(b.is_ascii() && !space && !in_run);
        in_run = !space;
    }
    runs > u64::from(limit)
}
