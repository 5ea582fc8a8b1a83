//! SIGHUP and model folders: a reload that keeps a folder keeps the
//! tokenizer it loaded (no second copy of a vocabulary), one whose bytes
//! changed counts by its new file at once, and one no longer named leaves
//! the table.

use std::path::Path;

use crate::common::ChildServer;
use crate::common::hf_fixture::{CHATML, write_folder};

use context_assembler::grpc::pb::{self, assembler_client::AssemblerClient};
use tonic::transport::Channel;

/// Models `a` and `b` (when `with_b`), each counted with the folder of its
/// name beside the configuration file.
fn write_config(dir: &Path, with_b: bool) {
    let entry = |name: &str| {
        format!(
            "[[models]]\nname = \"{name}\"\ntokenizer_dir = \"{name}\"\ncontext_window = 8000\noutput_reserve = 100\n"
        )
    };
    let names: &[&str] = if with_b { &["a", "b"] } else { &["a"] };
    let text: String = names.iter().map(|n| entry(n)).collect();
    std::fs::write(dir.join("sidecar.toml"), text).unwrap();
}

async fn count(client: &mut AssemblerClient<Channel>, model: &str, text: &str) -> u32 {
    client
        .count_tokens(pb::CountTokensRequest {
            text: text.to_owned().into(),
            tokenizer: Some(pb::count_tokens_request::Tokenizer::Model(model.to_owned())),
        })
        .await
        .unwrap()
        .into_inner()
        .tokens
}

/// The folders of the log lines whose message is `message`.
fn logged_folders(sidecar: &ChildServer, message: &str) -> Vec<String> {
    sidecar
        .logs()
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["message"].as_str() == Some(message))
        .filter_map(|e| e["folder"].as_str().map(str::to_owned))
        .collect()
}

/// Waits until `n` reloads were applied and logged (the folders' lines
/// come before the reload's own, on the same stream).
async fn reloaded(sidecar: &ChildServer, n: usize) {
    sidecar
        .wait_for(
            "assembler_config_reloads_total",
            &[("result", "applied")],
            n as f64,
            "the reload was not applied",
        )
        .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let applied = |l: &&String| l.contains("configuration reloaded");
    while sidecar.logs().iter().filter(applied).count() < n {
        assert!(std::time::Instant::now() < deadline, "the reload was not logged");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn sighup_keeps_an_unchanged_folder_reloads_a_changed_one_and_drops_a_removed_one() {
    const KEPT: &str = "model folder unchanged: its loaded tokenizer is kept";
    const LOADED: &str = "model folder loaded";
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    write_folder(&a, Some(CHATML));
    write_folder(&b, Some(CHATML));
    write_config(dir.path(), true);
    let config = dir.path().join("sidecar.toml");
    let sidecar = ChildServer::spawn(
        &[
            "--log-format",
            "json",
            "--memory-store",
            "off",
            "--config",
            config.to_str().unwrap(),
        ],
        &[("RUST_LOG", "info")],
    );
    let mut client = AssemblerClient::new(sidecar.serving_channel().await);
    assert_eq!(count(&mut client, "a", "hello<|im_end|>").await, 2);
    assert_eq!(count(&mut client, "b", "hello<|im_end|>").await, 2);
    let (a, b) = (a.canonicalize().unwrap(), b.canonicalize().unwrap());
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    // Start-up's loads may precede the log's set-up: only reloads are counted.
    let at_start = logged_folders(&sidecar, LOADED);
    let loaded_since = || logged_folders(&sidecar, LOADED)[at_start.len()..].to_vec();

    // b's tokenizer.json respelled at the same size and modification time.
    let path = Path::new(b).join("tokenizer.json");
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, json.replace("<|im_end|>", "<|im_enx|>")).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    sidecar.signal("-HUP");
    reloaded(&sidecar, 1).await;
    assert_eq!(logged_folders(&sidecar, KEPT), [a]);
    assert_eq!(loaded_since(), [b]);
    assert_eq!(count(&mut client, "a", "hello<|im_end|>").await, 2);
    assert!(count(&mut client, "b", "hello<|im_end|>").await > 2);
    assert_eq!(count(&mut client, "b", "hello<|im_enx|>").await, 2);

    write_config(dir.path(), false);
    sidecar.signal("-HUP");
    reloaded(&sidecar, 2).await;
    assert_eq!(logged_folders(&sidecar, KEPT), [a, a]);
    assert_eq!(loaded_since(), [b]);
    let listed = client
        .list_models(pb::ListModelsRequest {})
        .await
        .unwrap()
        .into_inner()
        .models;
    assert_eq!(listed.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["a"]);
    assert_eq!(count(&mut client, "a", "hello<|im_end|>").await, 2);
}
