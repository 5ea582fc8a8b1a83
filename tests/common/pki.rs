//! Certificates made in the test: a throwaway CA in a temporary folder, the
//! server's certificate for localhost and 127.0.0.1 beside it, and client
//! certificates it signs on demand.

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
};

/// A CA and the folder that holds `ca.pem`, `server.pem` and `server.key`.
pub struct Pki {
    dir: tempfile::TempDir,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    pub fn new() -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let pki = Pki {
            dir: tempfile::tempdir().unwrap(),
            ca,
        };
        let (cert, key) = pki.leaf(
            vec![dns("localhost"), SanType::IpAddress([127, 0, 0, 1].into())],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        std::fs::write(pki.path("ca.pem"), pki.ca_pem()).unwrap();
        std::fs::write(pki.path("server.pem"), cert).unwrap();
        std::fs::write(pki.path("server.key"), key).unwrap();
        pki
    }

    /// A file in the folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The CA's certificate (PEM).
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// A client certificate for `names` and its key (PEM), signed by the CA.
    pub fn client(&self, names: Vec<SanType>) -> (String, String) {
        self.leaf(names, ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn leaf(&self, names: Vec<SanType>, usage: ExtendedKeyUsagePurpose) -> (String, String) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = names;
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A DNS name for a certificate.
pub fn dns(name: &str) -> SanType {
    SanType::DnsName(name.try_into().unwrap())
}

/// A URI (a SPIFFE id) for a certificate.
pub fn uri(name: &str) -> SanType {
    SanType::URI(name.try_into().unwrap())
}
