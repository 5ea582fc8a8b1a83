//! TLS and mutual TLS through the real server, with a CA, server and client
//! certificates generated inside the test.

use std::path::Path;

use crate::common::{
    TestServer, heavy_request,
    pki::{Pki, dns},
};
use context_assembler::config::ServeArgs;
use context_assembler::grpc::pb::assembler_client::AssemblerClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// The server's arguments for `pki`'s certificate; mutual TLS against
/// `pki`'s CA when `mutual`.
fn serve_args(pki: &Pki, mutual: bool) -> ServeArgs {
    ServeArgs {
        tls_cert: Some(pki.path("server.pem")),
        tls_key: Some(pki.path("server.key")),
        tls_client_ca: mutual.then(|| pki.path("ca.pem")),
        ..TestServer::args()
    }
}

/// A client trusting `ca` (PEM), presenting `identity` (certificate and
/// key) when given.
async fn tls_channel(
    addr: std::net::SocketAddr,
    ca: &str,
    identity: Option<&(String, String)>,
) -> Result<Channel, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| e.to_string())
}

async fn assemble(channel: Channel) -> Result<(), tonic::Status> {
    AssemblerClient::new(channel)
        .assemble(heavy_request(1, 2, 200))
        .await
        .map(|_| ())
}

/// The whole error chain of a failed call, after checking that the call
/// failed in the transport (the connection), not with a status the server
/// sent.
fn transport_failure(result: Result<(), tonic::Status>) -> String {
    let status = result.expect_err("the call was served");
    let mut chain = format!("{status}");
    let mut cause = std::error::Error::source(&status);
    assert!(
        cause.is_some_and(|c| c.is::<tonic::transport::Error>()),
        "refused by a status, not by the connection: {status:?}"
    );
    while let Some(c) = cause {
        chain.push_str(&format!(": {c}"));
        cause = c.source();
    }
    chain
}

/// Why a connection (or its first call) failed, as the error chain.
async fn refusal(connected: Result<Channel, String>) -> String {
    match connected {
        Err(connect) => connect,
        Ok(channel) => transport_failure(assemble(channel).await),
    }
}

/// A refusal by the server's TLS handshake: a fatal alert it sent.
fn assert_alert(chain: &str, alerts: &[&str]) {
    assert!(
        alerts
            .iter()
            .any(|a| chain.contains(&format!("received fatal alert: {a}"))),
        "not refused by the TLS handshake with one of {alerts:?}: {chain}"
    );
}

async fn start(mut args: ServeArgs) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    // TLS is under test, not memory: no store file shared between tests.
    args.memory_store = Some("off".to_owned());
    let bound = context_assembler::server::Bound::bind(args.validate().unwrap())
        .await
        .unwrap();
    let addr = bound.grpc_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(bound.serve(async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

#[tokio::test]
async fn server_tls_serves_tls_clients_only() {
    let pki = Pki::new();
    let (addr, stop) = start(serve_args(&pki, false)).await;
    let channel = tls_channel(addr, &pki.ca_pem(), None).await.unwrap();
    // Readiness is a latch: the first call may arrive before SERVING, but
    // Assemble itself works as soon as the listener accepts.
    assemble(channel).await.unwrap();

    // A plaintext client gets no answer from a TLS listener.
    let plain = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await;
    if let Ok(plain) = plain {
        transport_failure(assemble(plain).await);
    }
    let _ = stop.send(());
}

#[tokio::test]
async fn mutual_tls_requires_a_client_certificate_from_the_ca() {
    let pki = Pki::new();
    let (addr, stop) = start(serve_args(&pki, true)).await;
    let ca = pki.ca_pem();
    let gateway = pki.client(vec![dns("gateway")]);
    let with_cert = tls_channel(addr, &ca, Some(&gateway)).await.unwrap();
    assemble(with_cert).await.unwrap();

    let chain = refusal(tls_channel(addr, &ca, None).await).await;
    assert_alert(&chain, &["CertificateRequired"]);

    // A certificate from another CA is refused too.
    let stranger = Pki::new().client(vec![dns("gateway")]);
    // The other CA has the same name: its signature does not verify.
    let chain = refusal(tls_channel(addr, &ca, Some(&stranger)).await).await;
    assert_alert(
        &chain,
        &[
            "DecryptError",
            "BadCertificate",
            "UnknownCA",
            "CertificateUnknown",
        ],
    );
    let _ = stop.send(());
}

#[test]
fn bad_tls_files_fail_validation_naming_the_key() {
    let pki = Pki::new();
    let mut args = serve_args(&pki, false);
    args.tls_key = Some(pki.path("ca.pem"));
    let err = args.validate().unwrap_err();
    assert!(err.key.starts_with("--tls-key"), "{err}");
    let mut args = serve_args(&pki, true);
    args.tls_client_ca = Some(Path::new("/nonexistent/ca.pem").to_owned());
    let err = args.validate().unwrap_err();
    assert!(err.key.starts_with("--tls-client-ca"), "{err}");
}
