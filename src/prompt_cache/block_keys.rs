//! Engine block keys in llm-d's precise-prefix-cache scheme (its router's
//! `kvblock` token processor, `cbor-fnv`, hash seed ""): the keys a router
//! looks a prompt's KV-cache blocks up by, computed from the token ids so
//! that neither the router nor the engine tokenizes again.
//!
//! Each key is FNV-1a 64 over the canonical CBOR of `[parent, tokens,
//! extra]`: the root's parent is the hash of the seed, its tokens null and
//! its extra the model name; each full block of `block_tokens` ids chains
//! from the key before it, with a null extra, except that a `cache_salt`
//! goes into the first block's extra as `[{"Hash": salt}]`. A trailing
//! partial block has no key.

/// FNV-1a 64's offset basis: the hash of the empty seed.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64's prime.
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// The key of every full block of `tokens` for `model`, in order.
pub fn block_keys(model: &str, tokens: &[u32], block_tokens: usize, cache_salt: &str) -> Vec<u64> {
    if block_tokens == 0 {
        return Vec::new();
    }
    let mut cbor = Vec::with_capacity(16 + block_tokens * 5);
    let mut hash = |parent: u64, tokens: Option<&[u32]>, extra: Extra<'_>| {
        cbor.clear();
        head(&mut cbor, 4, 3);
        head(&mut cbor, 0, parent);
        match tokens {
            None => cbor.push(NULL),
            Some(ids) => {
                head(&mut cbor, 4, ids.len() as u64);
                for &id in ids {
                    head(&mut cbor, 0, u64::from(id));
                }
            }
        }
        match extra {
            Extra::None => cbor.push(NULL),
            Extra::Model(name) => text(&mut cbor, name),
            Extra::Salt(salt) => {
                head(&mut cbor, 4, 1);
                head(&mut cbor, 5, 1);
                text(&mut cbor, "Hash");
                text(&mut cbor, salt);
            }
        }
        fnv1a(&cbor)
    };
    let mut parent = hash(FNV_OFFSET, None, Extra::Model(model));
    tokens
        .chunks_exact(block_tokens)
        .enumerate()
        .map(|(i, block)| {
            let extra = if i == 0 && !cache_salt.is_empty() {
                Extra::Salt(cache_salt)
            } else {
                Extra::None
            };
            parent = hash(parent, Some(block), extra);
            parent
        })
        .collect()
}

/// A block's extra keys.
#[derive(Clone, Copy)]
enum Extra<'a> {
    None,
    Model(&'a str),
    Salt(&'a str),
}

/// CBOR's `null`.
const NULL: u8 = 0xf6;

/// A CBOR head of major type `major` and argument `n`, shortest form.
fn head(out: &mut Vec<u8>, major: u8, n: u64) {
    let m = major << 5;
    match n {
        0..=23 => out.push(m | n as u8),
        24..=0xff => out.extend_from_slice(&[m | 24, n as u8]),
        0x100..=0xffff => {
            out.push(m | 25);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(m | 26);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        _ => {
            out.push(m | 27);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// A CBOR text string.
fn text(out: &mut Vec<u8>, s: &str) {
    head(out, 3, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(FNV_OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// One key per full block, and a prompt that extends another by
        /// whole blocks keeps every key of the shorter one: what a router's
        /// prefix lookup relies on.
        #[test]
        fn keys_are_per_full_block_and_prefix_stable(
            ids in prop::collection::vec(any::<u32>(), 0..200),
            cut in 0usize..200,
            bs in 1usize..40,
            salt in "[a-z]{0,4}",
        ) {
            let keys = block_keys("m", &ids, bs, &salt);
            prop_assert_eq!(keys.len(), ids.len() / bs);
            let short = &ids[..cut.min(ids.len())];
            let prefix = block_keys("m", short, bs, &salt);
            prop_assert_eq!(&keys[..prefix.len()], &prefix[..]);
        }
    }

    /// llm-d's own end-to-end vector (`llm-d-kv-cache`,
    /// `tests/e2e/uds_tokenizer`): granite's ids of "What is the capital of
    /// France?", blocks of 4.
    #[test]
    fn the_routers_own_vector() {
        let ids = [8197, 438, 322, 18926, 432, 45600, 49];
        assert_eq!(
            block_keys("ibm-granite/granite-3.1-8b-instruct", &ids, 4, ""),
            [1_334_984_470_577_408_192]
        );
    }

    /// Vectors computed by hand from the router's code (an independent
    /// re-implementation that reproduces the vector above): blocks of 16,
    /// with and without a salt.
    #[test]
    fn chained_and_salted_blocks() {
        let ids: Vec<u32> = (1..=32).collect();
        assert_eq!(
            block_keys("test-model", &ids, 16, ""),
            [9_540_012_594_951_042_066, 16_921_089_685_996_993_662]
        );
        assert_eq!(
            block_keys("test-model", &ids, 16, "salt-abc"),
            [2_871_680_878_844_735_011, 636_644_247_250_875_875]
        );
        // The root alone, through its CBOR bytes.
        let mut cbor = Vec::new();
        head(&mut cbor, 4, 3);
        head(&mut cbor, 0, FNV_OFFSET);
        cbor.push(NULL);
        text(&mut cbor, "test-model");
        assert_eq!(
            cbor,
            [
                0x83, 0x1b, 0xcb, 0xf2, 0x9c, 0xe4, 0x84, 0x22, 0x23, 0x25, 0xf6, 0x6a, b't', b'e', b's',
                b't', b'-', b'm', b'o', b'd', b'e', b'l'
            ]
        );
        assert_eq!(fnv1a(&cbor), 17_515_353_698_173_365_712);
    }

    #[test]
    fn a_partial_block_has_no_key_and_keys_chain() {
        let ids: Vec<u32> = (0..40).collect();
        let keys = block_keys("m", &ids, 16, "");
        assert_eq!(keys.len(), 2);
        // A block's key depends on every block before it.
        let mut other = ids.clone();
        other[0] = 99;
        let changed = block_keys("m", &other, 16, "");
        assert_ne!(changed[1], keys[1]);
        assert_eq!(block_keys("m", &ids[..15], 16, ""), Vec::<u64>::new());
        assert_eq!(block_keys("m", &ids, 0, ""), Vec::<u64>::new());
        // Another model, another chain.
        assert_ne!(block_keys("n", &ids, 16, "")[0], keys[0]);
    }
}
