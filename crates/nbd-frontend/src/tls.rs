//! TLS for `NBD_OPT_STARTTLS`: the server's certificate chain and key from
//! PEM files, and optionally a CA bundle that client certificates must chain
//! to (client-certificate authentication).
//!
//! A server with TLS configured runs in the protocol's "TLS required" mode:
//! before `NBD_OPT_STARTTLS` succeeds every option but `NBD_OPT_ABORT` is
//! refused with `NBD_REP_ERR_TLS_REQD` (and `NBD_OPT_EXPORT_NAME`, which
//! cannot be answered with an error, closes the connection).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

/// Where the TLS material lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate chain (PEM; leaf first).
    pub cert: PathBuf,
    /// The server's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates (PEM) client certificates must be signed by; `None`:
    /// clients are not asked for a certificate.
    pub client_ca: Option<PathBuf>,
}

/// Why the TLS configuration cannot be built. Every variant names the file.
#[derive(Debug)]
pub enum TlsError {
    /// The file cannot be read.
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The file holds no usable PEM item of the expected kind, or bad PEM.
    Pem { path: PathBuf, reason: String },
    /// rustls refused the certificate/key pair or the CA bundle.
    Rejected { path: PathBuf, reason: String },
}

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TlsError::Read { path, error } => {
                write!(f, "cannot read TLS file {}: {error}", path.display())
            }
            TlsError::Pem { path, reason } | TlsError::Rejected { path, reason } => {
                write!(f, "TLS file {}: {reason}", path.display())
            }
        }
    }
}

impl std::error::Error for TlsError {}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        path: path.to_path_buf(),
        error,
    })
}

fn pem_error(path: &Path, reason: impl Into<String>) -> TlsError {
    TlsError::Pem {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Every certificate in a PEM file (at least one).
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let text = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(pem_error(path, "no CERTIFICATE found in the PEM file"));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let text = read(path)?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|e| {
        pem_error(
            path,
            format!("no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"),
        )
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads the files and builds the rustls server configuration.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certificates(&files.cert)?;
    let key = private_key(&files.key)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rejected {
            path: files.cert.clone(),
            reason: e.to_string(),
        })?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca)? {
                roots.add(cert).map_err(|e| TlsError::Rejected {
                    path: ca.clone(),
                    reason: format!("not a usable CA certificate: {e}"),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| TlsError::Rejected {
                    path: ca.clone(),
                    reason: format!("cannot build the client verifier: {e}"),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Rejected {
            path: files.key.clone(),
            reason: format!(
                "the key does not fit the certificate {} or is unsupported: {e}",
                files.cert.display()
            ),
        })?;
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_garbage_files_name_the_file() {
        let dir = std::env::temp_dir().join(format!("zftl-nbd-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a pem file\n").unwrap();
        let missing = dir.join("missing.pem");
        let e = server_config(&TlsFiles {
            cert: missing.clone(),
            key: junk.clone(),
            client_ca: None,
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("missing.pem"), "{e}");
        let e = server_config(&TlsFiles {
            cert: junk.clone(),
            key: junk.clone(),
            client_ca: None,
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("junk.pem") && e.contains("CERTIFICATE"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
