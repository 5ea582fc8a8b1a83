//! Batch grouping: which assembled requests share a cacheable prefix, which
//! to send first, and an order for dispatch that keeps requests sharing
//! longer prefixes adjacent.

use std::collections::HashMap;

/// One group of requests sharing a cacheable prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The model table entry.
    pub model: String,
    /// The tokenizer id.
    pub tokenizer: String,
    /// The members' `cache_salt`.
    pub cache_salt: String,
    /// The shared prefix hash.
    pub prefix_hash: String,
    /// Indexes into the batch, ascending.
    pub members: Vec<usize>,
    /// The member to send first.
    pub warmup: usize,
    /// Tokens of the shared static prefix.
    pub shared_prefix_tokens: u32,
    /// Prefix tokens a prefix cache saves if the warm-up primes it:
    /// `shared_prefix_tokens x (members - 1)`.
    pub tokens_saved: u64,
}

/// What grouping needs of one successful result of a batch.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    /// The model table entry.
    pub model: &'a str,
    /// The tokenizer id.
    pub tokenizer: &'a str,
    /// The request's `cache_salt`.
    pub cache_salt: &'a str,
    /// The static prefix hash.
    pub prefix_hash: &'a str,
    /// Tokens of the static prefix.
    pub prefix_tokens: u32,
    /// The request's static segments as interned ids, in order (its path in
    /// the tree of segments).
    pub path: &'a [u32],
}

/// Groups the successful results of a batch (`None` for a failed one) by
/// (model, tokenizer, `cache_salt`, prefix hash), and orders them for
/// dispatch: each group contiguous, groups depth-first over the tree of
/// their static segments. Linear in the batch, plus a sort of the groups.
pub fn group(members: &[Option<Member<'_>>]) -> (Vec<Group>, Vec<usize>) {
    let mut groups: Vec<Group> = Vec::new();
    let mut group_path: Vec<&[u32]> = Vec::new();
    let mut group_of: HashMap<(&str, &str, &str, &str), usize> = HashMap::new();
    for (i, result) in members.iter().enumerate() {
        let Some(m) = result else { continue };
        let key = (m.model, m.tokenizer, m.cache_salt, m.prefix_hash);
        match group_of.get(&key) {
            Some(&g) => {
                let g = &mut groups[g];
                g.members.push(i);
                g.tokens_saved += u64::from(g.shared_prefix_tokens);
            }
            None => {
                group_of.insert(key, groups.len());
                groups.push(Group {
                    model: m.model.to_owned(),
                    tokenizer: m.tokenizer.to_owned(),
                    cache_salt: m.cache_salt.to_owned(),
                    prefix_hash: m.prefix_hash.to_owned(),
                    members: vec![i],
                    warmup: i,
                    shared_prefix_tokens: m.prefix_tokens,
                    tokens_saved: 0,
                });
                group_path.push(m.path);
            }
        }
    }
    // Depth-first over the segment tree = lexicographic order of the paths
    // (a parent's path is a prefix of its children's, so it comes first);
    // ties keep first appearance.
    let mut by_tree: Vec<usize> = (0..groups.len()).collect();
    by_tree.sort_by(|&a, &b| group_path[a].cmp(group_path[b]).then(a.cmp(&b)));
    let order = by_tree
        .iter()
        .flat_map(|&g| groups[g].members.iter().copied())
        .collect();
    let groups = by_tree.into_iter().map(|g| groups[g].clone()).collect();
    (groups, order)
}
