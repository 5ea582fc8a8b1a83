use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::config::ServeArgs;
use crate::tokens::hf::fixture::{CHATML, write_folder};

/// Two models, `a` and `b`, each counted with its own folder beside the
/// configuration file; `b` only when `with_b`.
fn write_config(dir: &Path, with_b: bool) {
    let entry = |name: &str| {
        format!(
            "[[models]]\nname = \"{name}\"\ntokenizer_dir = \"{name}\"\ncontext_window = 8000\noutput_reserve = 100\n"
        )
    };
    let mut text = entry("a");
    if with_b {
        text.push_str(&entry("b"));
    }
    std::fs::write(dir.join("sidecar.toml"), text).unwrap();
}

fn model(catalog: &crate::assemble::Catalog, name: &str) -> Arc<HfModel> {
    let spec = catalog.models.resolve(name).unwrap();
    spec.tokenizer.hf_model().unwrap().clone()
}

/// The fixture's `tokenizer.json` with `<|im_end|>` spelled `<|im_enx|>`:
/// the same length, and that text no longer one token.
fn respell_im_end(folder: &Path) {
    let path = folder.join("tokenizer.json");
    let json = std::fs::read_to_string(&path).unwrap();
    assert!(json.contains("<|im_end|>"));
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    std::fs::write(&path, json.replace("<|im_end|>", "<|im_enx|>")).unwrap();
    // Same size, same modification time: only the bytes tell.
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(mtime).unwrap();
}

/// The recipe here and the loader's digest agree, for a folder with a
/// template in its config, one without a config, and one with a
/// `chat_template.jinja` (else a kept folder would never be shared).
#[test]
fn the_digest_is_the_loaders() {
    let dir = tempfile::tempdir().unwrap();
    let (templated, plain, jinja) = (dir.path().join("t"), dir.path().join("p"), dir.path().join("j"));
    write_folder(&templated, Some(CHATML));
    write_folder(&plain, None);
    write_folder(&jinja, Some(CHATML));
    std::fs::write(
        jinja.join("chat_template.jinja"),
        CHATML.replace("assistant", "bot"),
    )
    .unwrap();
    for folder in [&templated, &plain, &jinja] {
        let loaded = HfModel::load(folder).unwrap();
        assert_eq!(digest(folder).unwrap(), *loaded.digest(), "{}", folder.display());
    }
    assert_ne!(digest(&templated).unwrap(), digest(&plain).unwrap());
    assert_ne!(digest(&templated).unwrap(), digest(&jinja).unwrap());
}

/// A reload that keeps a folder takes the very tokenizer the running
/// catalog holds (not parsed again); one whose bytes changed, even at the
/// same size and modification time, is loaded again and counts by its new
/// file, while the running catalog keeps counting by the old one.
#[test]
fn a_reload_shares_a_kept_folder_and_loads_a_changed_one() {
    let dir = tempfile::tempdir().unwrap();
    write_folder(&dir.path().join("a"), Some(CHATML));
    write_folder(&dir.path().join("b"), Some(CHATML));
    write_config(dir.path(), true);
    let cfg = ServeArgs {
        config: Some(dir.path().join("sidecar.toml")),
        ..ServeArgs::default()
    }
    .validate()
    .unwrap();
    let running = cfg.catalog.clone();

    let kept = cfg.reload_catalog().unwrap().unwrap();
    assert!(Arc::ptr_eq(&model(&running, "a"), &model(&kept, "a")));
    assert!(Arc::ptr_eq(&model(&running, "b"), &model(&kept, "b")));

    respell_im_end(&dir.path().join("b"));
    let changed = cfg.reload_catalog().unwrap().unwrap();
    assert!(Arc::ptr_eq(&model(&running, "a"), &model(&changed, "a")));
    assert!(!Arc::ptr_eq(&model(&running, "b"), &model(&changed, "b")));
    assert_eq!(model(&running, "b").count("hello<|im_end|>"), 2);
    assert!(model(&changed, "b").count("hello<|im_end|>") > 2);
    assert_eq!(model(&changed, "b").count("hello<|im_enx|>"), 2);
}

/// A refused reload leaves the running models as they were, whether their
/// folder broke or another setting did after the folder changed (the new
/// bytes were loaded, then dropped); once the bytes are back, the next
/// reload shares the model the running catalog holds.
#[test]
fn a_refused_reload_keeps_the_running_models() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("a");
    write_folder(&folder, Some(CHATML));
    write_config(dir.path(), false);
    let config = dir.path().join("sidecar.toml");
    let cfg = ServeArgs {
        config: Some(config.clone()),
        ..ServeArgs::default()
    }
    .validate()
    .unwrap();
    let running = model(&cfg.catalog, "a");
    let good = std::fs::read(folder.join("tokenizer.json")).unwrap();
    std::fs::write(
        folder.join("tokenizer.json"),
        "{\"model\": {\"type\": \"WordPiece\"}}",
    )
    .unwrap();
    let err = cfg.reload_catalog().unwrap().unwrap_err();
    assert_eq!(err.key, "models[0].tokenizer_dir");

    std::fs::write(folder.join("tokenizer.json"), &good).unwrap();
    respell_im_end(&folder);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("[policies.x]\ncontext_role = \"robot\"\n");
    std::fs::write(&config, text).unwrap();
    let err = cfg.reload_catalog().unwrap().unwrap_err();
    assert_eq!(err.key, "policies.x.context_role");
    assert_eq!(running.count("hello<|im_end|>"), 2);

    write_config(dir.path(), false);
    std::fs::write(folder.join("tokenizer.json"), &good).unwrap();
    let back = cfg.reload_catalog().unwrap().unwrap();
    assert!(Arc::ptr_eq(&running, &model(&back, "a")));
}

/// A folder the reloaded configuration no longer names is freed with the
/// last catalog that held it: the registry keeps no strong reference, and
/// drops its entry at the next load.
#[test]
fn a_folder_no_longer_configured_is_released() {
    let dir = tempfile::tempdir().unwrap();
    write_folder(&dir.path().join("a"), Some(CHATML));
    write_folder(&dir.path().join("b"), None);
    write_config(dir.path(), true);
    let cfg = ServeArgs {
        config: Some(dir.path().join("sidecar.toml")),
        ..ServeArgs::default()
    }
    .validate()
    .unwrap();
    let b = Arc::downgrade(&model(&cfg.catalog, "b"));
    let key_b = dir.path().join("b").canonicalize().unwrap();
    assert!(registry().contains_key(&key_b));

    write_config(dir.path(), false);
    let reloaded = cfg.reload_catalog().unwrap().unwrap();
    assert!(reloaded.models.resolve("b").is_none());
    assert!(b.upgrade().is_some(), "the running catalog still holds b");
    let a = model(&cfg.catalog, "a");
    drop(cfg);
    assert!(b.upgrade().is_none(), "b outlived the last catalog naming it");
    assert!(Arc::ptr_eq(&a, &model(&reloaded, "a")));

    write_folder(&dir.path().join("c"), None);
    load(&dir.path().join("c")).unwrap();
    assert!(!registry().contains_key(&key_b));
}
