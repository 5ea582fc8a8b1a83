//! `[auth]` through the real binary with mutual TLS: certificates made in
//! the test name the clients (a URI SAN and a DNS SAN); each RPC's claims
//! (principal scopes, subjects, ReportUsage) are checked against the entry
//! of the certificate that carried them; a certificate no entry names is
//! refused everything; denials are PERMISSION_DENIED naming the field and
//! counted by identity; SIGHUP swaps the rules without a restart.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{
    self, ChildServer,
    pki::{Pki, dns, uri},
};
use context_assembler::grpc::pb::{self, assembler_client::AssemblerClient};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic_types::StatusExt;

const SHOP: &str = "spiffe://cluster.local/ns/shop/sa/gateway";
const OPS: &str = "ops.example";

/// The CA and the server's certificate, and three clients': the shop
/// gateway (a URI SAN), ops (a DNS SAN) and a stranger the CA signed but
/// `[auth]` does not name.
struct Certs {
    pki: Pki,
    clients: Vec<(String, String)>,
}

impl Certs {
    fn new() -> Certs {
        let pki = Pki::new();
        let clients = vec![
            pki.client(vec![uri(SHOP)]),
            pki.client(vec![dns(OPS)]),
            pki.client(vec![dns("stranger.example")]),
        ];
        Certs { pki, clients }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.pki.path(name)
    }

    /// The configuration file: mutual TLS and `auth` (the `[[auth.clients]]`
    /// tables).
    fn write_config(&self, auth: &str) -> PathBuf {
        let path = self.path("auth.toml");
        let text = format!(
            "[server.tls]\ncert = {:?}\nkey = {:?}\nclient_ca = {:?}\n\n[memory]\nstore = \"off\"\n\n{auth}",
            self.path("server.pem"),
            self.path("server.key"),
            self.path("ca.pem"),
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    async fn client(&self, addr: std::net::SocketAddr, which: usize) -> AssemblerClient<Channel> {
        let (cert, key) = &self.clients[which];
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(self.pki.ca_pem()))
            .identity(Identity::from_pem(cert, key))
            .domain_name("localhost");
        let channel = Channel::from_shared(format!("https://{addr}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap();
        AssemblerClient::new(channel)
    }
}

const RULES: &str = r#"
[[auth.clients]]
identity = "spiffe://cluster.local/ns/shop/sa/gateway"
subject_prefixes = ["shop/"]
scopes = ["shop:*", "support"]

[[auth.clients]]
identity = "ops.example"
subject_prefixes = [""]
scopes = ["*"]
report_usage = true
"#;

fn request(scopes: &[&str], recall_subject: Option<&str>) -> pb::AssembleRequest {
    pb::AssembleRequest {
        request_id: "auth".to_owned(),
        model: "gpt-4o".to_owned(),
        query: "What is the refund window?".to_owned(),
        principal: Some(pb::Principal {
            id: "alice".to_owned(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        }),
        recall: recall_subject.map(|s| pb::Recall {
            subject: s.to_owned(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The field and claim of a PERMISSION_DENIED status.
fn denied(status: &tonic::Status) -> (String, String) {
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    let info = status.get_details_error_info().expect("an ErrorInfo");
    assert_eq!(info.reason, "CLAIM_DENIED");
    (info.metadata["field"].clone(), info.metadata["claim"].clone())
}

fn spawn(config: &Path) -> ChildServer {
    ChildServer::spawn(
        &["--config", config.to_str().unwrap(), "--log-format", "json"],
        &[],
    )
}

#[tokio::test]
async fn claims_are_bounded_by_the_client_certificate() {
    let pki = Certs::new();
    let config = pki.write_config(RULES);
    let sidecar = spawn(&config);
    let mut shop = pki.client(sidecar.grpc, 0).await;
    let mut ops = pki.client(sidecar.grpc, 1).await;
    let mut stranger = pki.client(sidecar.grpc, 2).await;

    // Within its entry: served (no memory store: no recall here).
    shop.assemble(request(&["shop:read", "support"], None))
        .await
        .unwrap();
    // A scope outside it, then a subject outside it.
    let err = shop
        .assemble(request(&["shop:read", "support", "admin"], None))
        .await
        .unwrap_err();
    assert_eq!(
        denied(&err),
        ("principal.scopes[2]".to_owned(), "scope".to_owned())
    );
    let err = shop
        .assemble(request(&["shop:read"], Some("bank/alice")))
        .await
        .unwrap_err();
    assert_eq!(denied(&err), ("recall.subject".to_owned(), "subject".to_owned()));
    // An allowed subject passes the claim check and meets the disabled store.
    let err = shop
        .assemble(request(&["shop:read"], Some("shop/alice")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    // The same claims from ops, whose entry allows everything.
    ops.assemble(request(&["shop:read", "admin"], None))
        .await
        .unwrap();

    // A batch: one member over the line refuses the batch, naming it.
    let batch = pb::AssembleBatchRequest {
        requests: vec![
            request(&["shop:x"], None),
            request(&["support"], None),
            request(&["finance"], None),
        ],
    };
    let err = shop.assemble_batch(batch.clone()).await.unwrap_err();
    assert_eq!(
        denied(&err),
        ("requests[2].principal.scopes[0]".to_owned(), "scope".to_owned())
    );
    assert_eq!(
        ops.assemble_batch(batch)
            .await
            .unwrap()
            .into_inner()
            .results
            .len(),
        3
    );

    // A stream: each message is checked on its own.
    let messages = vec![
        request(&["shop:a"], None),
        request(&["admin"], None),
        request(&["support"], None),
    ];
    let mut answers = shop
        .assemble_stream(tokio_stream::iter(messages))
        .await
        .unwrap()
        .into_inner();
    let mut outcomes = Vec::new();
    while let Some(answer) = answers.message().await.unwrap() {
        outcomes.push(match answer.result.unwrap().result.unwrap() {
            pb::assemble_result::Result::Response(_) => "ok".to_owned(),
            pb::assemble_result::Result::Error(e) => format!("code {}", e.code),
        });
    }
    let permission_denied = format!("code {}", tonic::Code::PermissionDenied as i32);
    assert_eq!(outcomes, ["ok".to_owned(), permission_denied, "ok".to_owned()]);

    // Memory RPCs name a subject; the store is off, so an allowed one meets
    // FAILED_PRECONDITION and a forbidden one PERMISSION_DENIED first.
    let retain = |subject: &str| pb::RetainRequest {
        idempotency_key: "k".to_owned(),
        subject: subject.to_owned(),
        model_output: "x".to_owned(),
        ..Default::default()
    };
    let err = shop.retain(retain("bank/alice")).await.unwrap_err();
    assert_eq!(denied(&err).0, "subject");
    let err = shop.retain(retain("shop/alice")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    let forget = pb::ForgetRequest {
        subject: "bank/alice".to_owned(),
        ids: vec!["0123456789abcdef0123456789abcdef".to_owned()],
        ..Default::default()
    };
    assert_eq!(denied(&shop.forget(forget).await.unwrap_err()).0, "subject");
    let list = pb::ListMemoriesRequest {
        subject: "bank/alice".to_owned(),
        ..Default::default()
    };
    assert_eq!(denied(&shop.list_memories(list).await.unwrap_err()).0, "subject");
    let list = pb::ListMemoriesRequest {
        subject: "shop/alice".to_owned(),
        principal: Some(pb::Principal {
            id: "alice".to_owned(),
            scopes: vec!["support".to_owned(), "finance".to_owned()],
        }),
        ..Default::default()
    };
    let err = shop.list_memories(list).await.unwrap_err();
    assert_eq!(
        denied(&err),
        ("principal.scopes[1]".to_owned(), "scope".to_owned())
    );

    // ReportUsage moves margins: only ops may send it.
    let usage = pb::ReportUsageRequest {
        request_id: "auth".to_owned(),
        provider: "openai".to_owned(),
        prompt_tokens: 100,
        ..Default::default()
    };
    let err = shop.report_usage(usage.clone()).await.unwrap_err();
    assert_eq!(
        denied(&err),
        ("report_usage".to_owned(), "report_usage".to_owned())
    );
    ops.report_usage(usage).await.unwrap();

    // A certificate of the CA that no entry names gets nothing at all.
    let err = stranger.list_models(pb::ListModelsRequest {}).await.unwrap_err();
    assert_eq!(denied(&err).1, "identity");
    let err = stranger.assemble(request(&[], None)).await.unwrap_err();
    assert_eq!(denied(&err).1, "identity");

    // Counted by identity and claim; the values never reach the logs.
    let page = sidecar.metrics_page().await;
    let count = |identity: &str, claim: &str| {
        common::metric(
            &page,
            "assembler_claims_denied_total",
            &[("identity", identity), ("claim", claim)],
        )
    };
    assert_eq!(count(SHOP, "scope"), Some(4.0), "{page}");
    assert_eq!(count(SHOP, "subject"), Some(4.0));
    assert_eq!(count(SHOP, "report_usage"), Some(1.0));
    assert_eq!(count("unlisted", "identity"), Some(2.0));
    assert_eq!(
        count(OPS, "scope"),
        Some(0.0),
        "every identity's series starts at zero"
    );
    let logs = sidecar.logs().join("\n");
    assert!(logs.contains("claim denied"), "denials are logged");
    assert!(
        !logs.contains("bank/alice") && !logs.contains("finance"),
        "no claimed value is logged"
    );
}

#[tokio::test]
async fn sighup_swaps_the_rules() {
    let pki = Certs::new();
    let config = pki.write_config(RULES);
    let sidecar = spawn(&config);
    let mut shop = pki.client(sidecar.grpc, 0).await;
    let err = shop.assemble(request(&["admin"], None)).await.unwrap_err();
    assert_eq!(denied(&err).1, "scope");

    pki.write_config(&RULES.replace(
        r#"scopes = ["shop:*", "support"]"#,
        r#"scopes = ["shop:*", "support", "admin"]"#,
    ));
    sidecar.signal("-HUP");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match shop.assemble(request(&["admin"], None)).await {
            Ok(_) => break,
            Err(e) => {
                assert_eq!(denied(&e).1, "scope");
                assert!(Instant::now() < deadline, "the reload never applied");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    // A reload that would drop mutual TLS's identities is refused whole:
    // the rules in force stay.
    std::fs::write(&config, format!("[memory]\nstore = \"off\"\n{RULES}")).unwrap();
    sidecar.signal("-HUP");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !sidecar
        .logs()
        .iter()
        .any(|l| l.contains("configuration reload refused"))
    {
        assert!(Instant::now() < deadline, "the bad reload was never refused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shop.assemble(request(&["admin"], None)).await.unwrap();
}
