//! Protobuf wire bytes written by hand, for messages no generated type would
//! encode (millions of empty sub-messages, fields out of place).

/// A protobuf varint.
pub fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Field `number` holding `body`, length-delimited.
pub fn field(number: u64, body: &[u8], out: &mut Vec<u8>) {
    varint((number << 3) | 2, out);
    varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

/// `n` empty occurrences of length-delimited field `number`: 2 bytes each on
/// the wire (for numbers below 16), a whole struct or string each once
/// decoded.
pub fn empties(number: u64, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 * n);
    for _ in 0..n {
        field(number, &[], &mut out);
    }
    out
}

/// An AssembleRequest with one block of `n` empty items.
pub fn empty_items(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    field(2, b"gpt-4o", &mut out);
    field(6, &empties(7, n), &mut out);
    out
}
