//! NBD_OPT_STARTTLS: a server with TLS configured requires it, serves over
//! it, and with a client CA admits only clients with a certificate from it.
//! Certificates are made by the test (rcgen); the client is tokio-rustls.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zftl_nbd::proto::*;
use zftl_nbd::{tls_server_config, Server, ServerConfig, TlsFiles};

/// A CA and certificates it signed, in PEM and DER.
struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

struct Issued {
    cert_pem: String,
    key_pem: String,
    cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Pki { ca }
    }

    fn issue(&self, names: &[&str]) -> Issued {
        let params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }

    fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    fn ca_der(&self) -> CertificateDer<'static> {
        self.ca.der().clone()
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

struct Setup {
    _dir: tempfile::TempDir,
    pki: Pki,
    files: TlsFiles,
}

/// A CA, a server certificate for localhost from it, and the files.
fn setup(client_ca: bool) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new("zftl test CA");
    let server = pki.issue(&["localhost", "127.0.0.1"]);
    let files = TlsFiles {
        cert: write(dir.path(), "server.pem", &server.cert_pem),
        key: write(dir.path(), "server.key", &server.key_pem),
        client_ca: client_ca.then(|| write(dir.path(), "ca.pem", &pki.ca_pem())),
    };
    Setup {
        _dir: dir,
        pki,
        files,
    }
}

async fn tls_server(files: &TlsFiles) -> Running {
    let vol = format_volume().await;
    let tls = tls_server_config(files).unwrap();
    start(Server::new(exports(&vol), ServerConfig::default()).with_tls(tls)).await
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn connector(ca: CertificateDer<'static>, client: Option<&Issued>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some(c) => builder
            .with_client_auth_cert(
                vec![c.cert_der.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(c.key_der.clone())),
            )
            .unwrap(),
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// Greets, sends STARTTLS, expects the ACK.
async fn starttls(addr: std::net::SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    greet(&mut s).await;
    send_option(&mut s, OPT_STARTTLS, &[]).await;
    assert_eq!(read_reply(&mut s).await, (OPT_STARTTLS, REP_ACK, vec![]));
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_then_go_and_io() {
    let st = setup(false);
    let server = tls_server(&st.files).await;
    let plain = starttls(server.addr).await;
    let mut s = connector(st.pki.ca_der(), None)
        .connect(ServerName::try_from("localhost").unwrap(), plain)
        .await
        .expect("TLS handshake");
    // Structured replies and a second STARTTLS over TLS: refused as invalid.
    send_option(&mut s, OPT_STARTTLS, &[]).await;
    assert_eq!(read_reply(&mut s).await.1, REP_ERR_INVALID);
    let size = go(&mut s, "zftl").await;
    assert!(size > 0);
    round_trip(&mut s, 1).await;
    // A second connection sees the data written by the first.
    let plain = starttls(server.addr).await;
    let mut t = connector(st.pki.ca_der(), None)
        .connect(ServerName::try_from("localhost").unwrap(), plain)
        .await
        .unwrap();
    go(&mut t, "").await;
    let (e, _) = request(&mut t, CMD_READ, 3 * BS as u64, BS as u32, &[], BS).await;
    assert_eq!(e, 0);
    drop(s);
    drop(t);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_before_starttls_get_tls_reqd() {
    let st = setup(false);
    let server = tls_server(&st.files).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    greet(&mut s).await;
    for (option, data) in [
        (OPT_LIST, vec![]),
        (OPT_STRUCTURED_REPLY, vec![]),
        (OPT_INFO, go_data("zftl")),
        (OPT_GO, go_data("zftl")),
        (99, vec![1, 2, 3]),
    ] {
        send_option(&mut s, option, &data).await;
        let (o, t, msg) = read_reply(&mut s).await;
        assert_eq!((o, t), (option, REP_ERR_TLS_REQD));
        assert!(String::from_utf8_lossy(&msg).contains("TLS"));
    }
    // STARTTLS with data is invalid; the connection stays usable.
    send_option(&mut s, OPT_STARTTLS, &[0]).await;
    assert_eq!(read_reply(&mut s).await.1, REP_ERR_INVALID);
    // ABORT is allowed in plain text.
    send_option(&mut s, OPT_ABORT, &[]).await;
    assert_eq!(read_reply(&mut s).await.1, REP_ACK);

    // EXPORT_NAME cannot be refused with an error: the server closes.
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    greet(&mut s).await;
    send_option(&mut s, OPT_EXPORT_NAME, b"zftl").await;
    let mut b = [0u8; 1];
    let r = tokio::time::timeout(Duration::from_secs(10), s.read(&mut b)).await;
    assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "closed: {r:?}");
    server.stop().await;
}

/// The server refused the client's TLS session: either the handshake
/// fails or the first read after it does.
async fn refused(
    connector: tokio_rustls::TlsConnector,
    addr: std::net::SocketAddr,
) -> Result<(), String> {
    let plain = starttls(addr).await;
    let mut s = match connector
        .connect(ServerName::try_from("localhost").unwrap(), plain)
        .await
    {
        Err(_) => return Ok(()),
        Ok(s) => s,
    };
    // TLS 1.3: the client finishes first; the server's verdict on its
    // certificate arrives as an alert on the next read.
    let mut b = Vec::new();
    b.extend_from_slice(&IHAVEOPT.to_be_bytes());
    b.extend_from_slice(&OPT_LIST.to_be_bytes());
    b.extend_from_slice(&0u32.to_be_bytes());
    let _ = s.write_all(&b).await;
    let _ = s.flush().await;
    let mut buf = [0u8; 8];
    match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Ok(()),
        other => Err(format!("server answered: {other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ca_admits_only_its_clients() {
    let st = setup(true);
    let server = tls_server(&st.files).await;
    let ca = st.pki.ca_der();
    // A client certificate from the CA: admitted.
    let good = st.pki.issue(&["client.example"]);
    let plain = starttls(server.addr).await;
    let mut s = connector(ca.clone(), Some(&good))
        .connect(ServerName::try_from("localhost").unwrap(), plain)
        .await
        .unwrap();
    go(&mut s, "zftl").await;
    round_trip(&mut s, 2).await;
    drop(s);
    // No client certificate: refused.
    refused(connector(ca.clone(), None), server.addr)
        .await
        .unwrap();
    // A certificate from another CA: refused.
    let other = Pki::new("another CA").issue(&["client.example"]);
    refused(connector(ca, Some(&other)), server.addr)
        .await
        .unwrap();
    server.stop().await;
}

#[test]
fn bad_tls_files_name_the_file() {
    let st = setup(false);
    let dir = tempfile::tempdir().unwrap();
    let other_key = write(
        dir.path(),
        "other.key",
        &KeyPair::generate().unwrap().serialize_pem(),
    );
    // A key that does not belong to the certificate.
    let e = tls_server_config(&TlsFiles {
        key: other_key,
        ..st.files.clone()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("other.key"), "{e}");
    // A key file with no key.
    let e = tls_server_config(&TlsFiles {
        key: st.files.cert.clone(),
        ..st.files.clone()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("server.pem") && e.contains("private key"), "{e}");
    // A CA bundle that does not exist.
    let e = tls_server_config(&TlsFiles {
        client_ca: Some(dir.path().join("nope-ca.pem")),
        ..st.files.clone()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("nope-ca.pem"), "{e}");
}
