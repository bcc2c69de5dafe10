//! The TLS client of an https module: rustls on aws-lc-rs, the platform's roots (or only
//! the module's own CA, `ca_file`), and a client certificate when the module asks for one
//! (mTLS). Built once per module, from PEM files, with errors that name the file and what
//! is wrong with it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::client::WebPkiServerVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use rustls_platform_verifier::BuilderVerifierExt;

/// How a module's server is trusted and how the gateway proves itself to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA (PEM, one or more certificates) that alone vouches for the module's
    /// certificate; `None`: the platform's roots.
    pub ca_file: Option<PathBuf>,
    /// The gateway's client certificate chain for this module (PEM), with `client_key`.
    pub client_cert: Option<PathBuf>,
    /// The private key of `client_cert` (PEM: PKCS#8, PKCS#1 or SEC1).
    pub client_key: Option<PathBuf>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn certificates(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let read = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    let certificates: Vec<CertificateDer<'static>> = read
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!(
            "{what} {} holds no PEM certificate",
            path.display()
        ));
    }
    Ok(certificates)
}

/// The module's TLS client configuration, or why it cannot be made. Without files it is
/// the platform's roots, read once per process (every http module, and every per-caller
/// instance of one, shares it).
pub fn client_config(files: &TlsFiles) -> Result<Arc<ClientConfig>, String> {
    static PLATFORM: std::sync::OnceLock<Result<Arc<ClientConfig>, String>> =
        std::sync::OnceLock::new();
    if *files == TlsFiles::default() {
        return PLATFORM.get_or_init(|| build(files)).clone();
    }
    build(files)
}

fn build(files: &TlsFiles) -> Result<Arc<ClientConfig>, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &files.ca_file {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for certificate in certificates("ca_file", path)? {
                roots
                    .add(certificate)
                    .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
            }
            let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
            builder.with_webpki_verifier(verifier)
        }
        None => builder
            .with_platform_verifier()
            .map_err(|e| format!("the platform's certificate roots: {e}"))?,
    };
    // ALPN is the connector's to set (HTTP/1.1).
    let config = match (&files.client_cert, &files.client_key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain = certificates("client_cert", cert)?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("client_key {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client_cert and client_key: {e}"))?
        }
        _ => return Err("client_cert and client_key go together".into()),
    };
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_that_are_missing_or_not_pem_are_named() {
        let dir = std::env::temp_dir().join(format!("mcp-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let missing = dir.join("missing.pem");
        for (files, expected) in [
            (
                TlsFiles {
                    ca_file: Some(missing.clone()),
                    ..TlsFiles::default()
                },
                "ca_file",
            ),
            (
                TlsFiles {
                    ca_file: Some(junk.clone()),
                    ..TlsFiles::default()
                },
                "holds no PEM certificate",
            ),
            (
                TlsFiles {
                    client_cert: Some(junk.clone()),
                    ..TlsFiles::default()
                },
                "go together",
            ),
        ] {
            let error = client_config(&files).unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let good = dir.join("ca.pem");
        std::fs::write(&good, ca.cert.pem()).unwrap();
        let key = dir.join("key.pem");
        std::fs::write(&key, ca.signing_key.serialize_pem()).unwrap();
        let files = TlsFiles {
            ca_file: Some(good.clone()),
            client_cert: Some(good.clone()),
            client_key: Some(key),
        };
        assert!(client_config(&files).is_ok());
        let files = TlsFiles {
            client_cert: Some(good),
            client_key: Some(junk),
            ..TlsFiles::default()
        };
        assert!(client_config(&files).unwrap_err().contains("client_key"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
