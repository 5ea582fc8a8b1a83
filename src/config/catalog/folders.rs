//! Model folders shared by every catalog the process builds: a reload that
//! keeps a folder (the same canonical path, files of the same bytes) takes
//! the tokenizer the running catalog already holds instead of parsing it
//! again, so a SIGHUP does not hold two copies of a large vocabulary
//! (parsing Gemma 3's again raised the peak RSS by about 490 MiB, and took
//! 5 s; `benches/reload_rss.sh` measures both).
//!
//! Sameness is decided by content, never by metadata: the same size and
//! modification time do not prove the same bytes (a rewrite within the
//! clock's granularity, a copy that keeps times). The files a load reads are
//! hashed with [`HfModel::digest`]'s recipe, streamed (Gemma 3's 33 MB in
//! about 60 ms, against seconds of parsing), and only when a live
//! catalog holds a model of that folder: a first load hashes nothing more.
//! Should the recipe and [`HfModel::load`] drift apart, folders are loaded
//! again on each reload, never shared wrongly; the test
//! `the_digest_is_the_loaders` catches the drift.
//!
//! The registry holds weak references: a folder the new catalog no longer
//! names is freed with the last catalog (or request) that held it.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;

use tracing::info;

use crate::tokens::hf::{HfModel, LoadError};

/// The models loaded and perhaps still held somewhere, by their folder's
/// canonical path: after a reload that loaded a changed folder and was
/// refused, the running catalog holds one version and nothing the other.
static LIVE: Mutex<BTreeMap<PathBuf, Vec<Weak<HfModel>>>> = Mutex::new(BTreeMap::new());

/// The model folder `dir`: a model a live catalog already holds when it was
/// loaded from the bytes the folder's files have now, else loaded afresh.
pub(super) fn load(dir: &Path) -> Result<Arc<HfModel>, LoadError> {
    let started = Instant::now();
    // The canonical path: the same folder however the file names it, and a
    // moved symbolic link is another folder (the model's name follows it).
    let key = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    let held: Vec<Arc<HfModel>> = registry()
        .get(&key)
        .map(|v| v.iter().filter_map(Weak::upgrade).collect())
        .unwrap_or_default();
    let now = if held.is_empty() { None } else { digest(&key).ok() };
    if let Some(model) = held.into_iter().find(|m| Some(*m.digest()) == now) {
        info!(
            folder = %key.display(),
            ms = millis_since(started),
            "model folder unchanged: its loaded tokenizer is kept"
        );
        return Ok(model);
    }
    let model = Arc::new(HfModel::load(dir)?);
    let mut live = registry();
    live.retain(|_, v| {
        v.retain(|m| m.strong_count() > 0);
        !v.is_empty()
    });
    live.entry(key.clone()).or_default().push(Arc::downgrade(&model));
    drop(live);
    info!(
        folder = %key.display(),
        ms = millis_since(started),
        template = template_renderer(&model),
        "model folder loaded"
    );
    Ok(model)
}

/// How the folder's chat template renders, for its startup line: `native`
/// (a known template program written out in Rust), `engine`, or `none`.
fn template_renderer(model: &HfModel) -> &'static str {
    match model.template() {
        Some(t) if t.renders_natively() => "native",
        Some(_) => "engine",
        None => "none",
    }
}

fn millis_since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn registry() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, Vec<Weak<HfModel>>>> {
    // The map stays whole whatever a panicking holder did: each step is
    // one push or one retain.
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// [`HfModel::digest`] of the files in `dir`, without parsing them: the
/// same domain tag, then each file's length and bytes in the loader's
/// order (`tokenizer.json`; `tokenizer_config.json`, or `u64::MAX` when
/// absent; `chat_template.jinja` when present).
fn digest(dir: &Path) -> io::Result<[u8; 32]> {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"hf-folder/v1\0");
    hash_file(&mut hasher, &dir.join("tokenizer.json"))?;
    let config = dir.join("tokenizer_config.json");
    if config.exists() {
        hash_file(&mut hasher, &config)?;
    } else {
        hasher.update(&u64::MAX.to_le_bytes());
    }
    let jinja = dir.join("chat_template.jinja");
    if jinja.exists() {
        hash_file(&mut hasher, &jinja)?;
    }
    Ok(*hasher.finalize().as_bytes())
}

/// Hashes `path`'s length, then streams its bytes; a file that changes
/// length while read is an error (it is not the file the length named).
fn hash_file(hasher: &mut blake3::Hasher, path: &Path) -> io::Result<()> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    hasher.update(&len.to_le_bytes());
    let read = io::copy(&mut io::Read::take(&mut file, len.saturating_add(1)), hasher)?;
    if read == len {
        Ok(())
    } else {
        Err(io::Error::other("the file changed while it was read"))
    }
}

#[cfg(test)]
mod tests;
