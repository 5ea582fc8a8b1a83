use proptest::prelude::*;

use super::*;
use crate::config::auth::AuthClient;

fn client(identity: &str, subjects: &[&str], scopes: &[&str], report_usage: bool) -> AuthClient {
    AuthClient {
        identity: identity.to_owned(),
        subject_prefixes: subjects.iter().map(|s| (*s).to_owned()).collect(),
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        report_usage,
    }
}

fn rules(clients: Vec<AuthClient>) -> Rules {
    Rules::new(&AuthSettings { clients })
}

fn id(names: &[&str]) -> ClientIdentity {
    ClientIdentity::with_names(names.iter().map(|s| (*s).to_owned()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The ordered-set lookup agrees with trying every prefix.
    #[test]
    fn prefixes_agree_with_trying_each(
        patterns in prop::collection::vec("[ab]{0,4}", 0..8),
        name in "[ab]{0,6}",
    ) {
        let set = Prefixes::new(patterns.iter().map(String::as_str));
        let naive = patterns.iter().any(|p| name.starts_with(p.as_str()));
        prop_assert_eq!(set.starts(&name), naive, "{:?} {:?}", patterns, name);
    }

    /// A scope passes iff it equals an exact pattern or starts with the
    /// prefix of a `*` pattern.
    #[test]
    fn scopes_agree_with_trying_each(
        patterns in prop::collection::vec("[ab:]{0,3}\\*?", 1..6),
        scope in "[ab:]{0,5}",
    ) {
        let patterns: Vec<String> = patterns.into_iter().filter(|p| !p.is_empty()).collect();
        let refs: Vec<&str> = patterns.iter().map(String::as_str).collect();
        let r = rules(vec![client("c", &[""], &refs, false)]);
        let grant = r.grant(Some(&id(&["c"]))).unwrap().unwrap();
        let naive = patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => scope.starts_with(prefix),
            None => *p == scope,
        });
        prop_assert_eq!(grant.scopes(std::slice::from_ref(&scope), "s").is_ok(), naive);
    }
}

#[test]
fn nothing_is_enforced_without_clients() {
    let r = rules(vec![]);
    assert!(!r.enforced());
    assert!(r.grant(None).unwrap().is_none());
    assert!(r.grant(Some(&id(&["anyone"]))).unwrap().is_none());
}

#[test]
fn an_unlisted_or_missing_certificate_is_denied() {
    let r = rules(vec![client("spiffe://shop/gw", &["shop/"], &["read"], false)]);
    for identity in [
        None,
        Some(id(&[])),
        Some(id(&["spiffe://other", "other.example"])),
    ] {
        let d = r.grant(identity.as_ref()).unwrap_err();
        assert_eq!(d.claim, CLAIM_IDENTITY);
        assert_eq!(d.identity, metrics::IDENTITY_UNLISTED);
    }
}

#[test]
fn the_first_entry_any_name_matches_applies() {
    let r = rules(vec![
        client("spiffe://a", &["a/"], &[], false),
        client("b.example", &["b/"], &[], true),
    ]);
    let g = r.grant(Some(&id(&["b.example", "spiffe://a"]))).unwrap().unwrap();
    assert_eq!(g.identity, "spiffe://a");
    let g = r.grant(Some(&id(&["b.example"]))).unwrap().unwrap();
    assert_eq!(g.identity, "b.example");
    assert!(g.report_usage().is_ok());
}

#[test]
fn subjects_and_scopes_are_checked_field_by_field() {
    let r = rules(vec![client(
        "gw",
        &["shop/", "support/"],
        &["shop:*", "billing"],
        false,
    )]);
    let g = r.grant(Some(&id(&["gw"]))).unwrap().unwrap();
    assert!(g.subject("shop/alice", || "subject".into()).is_ok());
    assert!(g.subject("support/", || "subject".into()).is_ok());
    let d = g.subject("shopping/x", || "subject".into()).unwrap_err();
    assert_eq!((d.claim, d.field.as_str()), (CLAIM_SUBJECT, "subject"));
    assert!(
        g.subject("", || "subject".into()).is_err(),
        "an empty subject starts no prefix"
    );

    let held = |s: &[&str]| s.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    assert!(
        g.scopes(&held(&["shop:read", "shop:", "billing"]), "principal.scopes")
            .is_ok()
    );
    let d = g
        .scopes(
            &held(&["shop:read", "billing:admin", "admin"]),
            "principal.scopes",
        )
        .unwrap_err();
    assert_eq!((d.claim, d.field.as_str()), (CLAIM_SCOPE, "principal.scopes[1]"));
    assert_eq!(g.report_usage().unwrap_err().claim, CLAIM_REPORT_USAGE);
}

#[test]
fn assemble_names_the_field_of_a_batch_member() {
    let r = rules(vec![client("gw", &["shop/"], &["read"], false)]);
    let g = r.grant(Some(&id(&["gw"]))).unwrap().unwrap();
    let mut req = pb::AssembleRequest {
        principal: Some(pb::Principal {
            id: "u".into(),
            scopes: vec!["read".into()],
        }),
        recall: Some(pb::Recall {
            subject: "shop/alice".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert!(g.assemble(&req, "requests[3].").is_ok());
    if let Some(recall) = req.recall.as_mut() {
        recall.subject = "bank/alice".into();
    }
    let d = g.assemble(&req, "requests[3].").unwrap_err();
    assert_eq!(d.field, "requests[3].recall.subject");
    req.principal = Some(pb::Principal {
        id: "u".into(),
        scopes: vec!["read".into(), "write".into()],
    });
    assert_eq!(g.assemble(&req, "").unwrap_err().field, "principal.scopes[1]");
}

#[test]
fn names_come_from_the_certificate_sans() {
    let mut params = rcgen::CertificateParams::new(vec!["gw.shop.svc".to_owned()]).unwrap();
    params.subject_alt_names.push(rcgen::SanType::URI(
        rcgen::string::Ia5String::try_from("spiffe://cluster.local/ns/shop/sa/gw").unwrap(),
    ));
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let identity = ClientIdentity::from_certificate(cert.der());
    assert_eq!(
        identity.names(),
        ["spiffe://cluster.local/ns/shop/sa/gw", "gw.shop.svc"]
    );
    assert!(
        ClientIdentity::from_certificate(&CertificateDer::from(vec![1, 2, 3]))
            .names()
            .is_empty()
    );
}
