//! TLS for the tests of remote MCP servers: a test CA made in the test
//! (`rcgen`), server certificates it signs (for a name, expired, or by
//! another CA nobody trusts), a TLS-terminating front (`tokio-rustls`) that
//! puts https before a plain stand-in server on loopback, a listener that
//! accepts and never answers (a TLS handshake that hangs), and a CONNECT
//! proxy that records the hosts it was asked for.
//!
//! Everything runs in the test's runtime on port-0 listeners and stops when
//! its handle drops.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType,
    date_time_ymd,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_util::sync::CancellationToken;

/// A certificate authority of the test.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A server's certificate and key, for a [`TlsFront`].
pub struct ServerCert {
    cert: CertificateDer<'static>,
    key: Vec<u8>,
}

/// How a server certificate is made.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// Valid from 2020 to 2999.
    Current,
    /// Ended in 2001.
    Expired,
}

impl TestCa {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        Self {
            issuer: CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    /// The CA's certificate as PEM, written to `dir/NAME.pem`.
    pub fn write_pem(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.pem"));
        std::fs::write(&path, self.issuer.pem()).unwrap();
        path
    }

    /// A server certificate for `names` (DNS names, or IP addresses).
    pub fn server_cert(&self, names: &[&str], validity: Validity) -> ServerCert {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        for n in names {
            params.subject_alt_names.push(match n.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*n).try_into().unwrap()),
            });
        }
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("server"),
        );
        match validity {
            Validity::Current => {
                params.not_before = date_time_ymd(2020, 1, 1);
                params.not_after = date_time_ymd(2999, 1, 1);
            }
            Validity::Expired => {
                params.not_before = date_time_ymd(2000, 1, 1);
                params.not_after = date_time_ymd(2001, 1, 1);
            }
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        ServerCert {
            cert: cert.der().clone(),
            key: key.serialize_der(),
        }
    }
}

/// https on a port-0 listener of loopback, each connection's bytes passed
/// to and from the plain server at `backend`.
pub struct TlsFront {
    pub addr: SocketAddr,
    stop: CancellationToken,
}

impl TlsFront {
    pub async fn start(backend: SocketAddr, cert: ServerCert) -> Self {
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.cert],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key)),
            )
            .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = tokio::select! {
                    () = token.cancelled() => return,
                    a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
                };
                let acceptor = acceptor.clone();
                let token = token.clone();
                tokio::spawn(async move {
                    // A refused handshake (the client did not trust us)
                    // simply ends the connection.
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut plain) = TcpStream::connect(backend).await else {
                        return;
                    };
                    tokio::select! {
                        () = token.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut tls, &mut plain) => {}
                    }
                });
            }
        });
        Self { addr, stop }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A listener that accepts every connection and never sends a byte: a TLS
/// handshake (or an HTTP answer) that hangs. Counts the connections.
pub struct Silent {
    pub addr: SocketAddr,
    pub accepted: Arc<Mutex<usize>>,
    stop: CancellationToken,
}

impl Silent {
    pub async fn start() -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(Mutex::new(0));
        let stop = CancellationToken::new();
        let (count, token) = (accepted.clone(), stop.clone());
        tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                tokio::select! {
                    () = token.cancelled() => return,
                    a = listener.accept() => if let Ok((tcp, _)) = a {
                        *count.lock().unwrap() += 1;
                        held.push(tcp);
                    },
                }
            }
        });
        Self {
            addr,
            accepted,
            stop,
        }
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// An HTTP proxy that serves CONNECT only: every tunnel goes to `to` on
/// loopback whatever host it names, and each CONNECT's target
/// (`host:port`) is recorded. (Its test runs the sidecar as a child with
/// signals: Unix only.)
#[cfg_attr(not(unix), allow(dead_code))]
pub struct ConnectProxy {
    pub url: String,
    pub seen: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
}

#[cfg_attr(not(unix), allow(dead_code))]
impl ConnectProxy {
    pub async fn start(to: SocketAddr) -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let (log, token) = (seen.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let (tcp, _) = tokio::select! {
                    () = token.cancelled() => return,
                    a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
                };
                let (log, token) = (log.clone(), token.clone());
                tokio::spawn(async move {
                    let mut client = BufReader::new(tcp);
                    let mut line = String::new();
                    if client.read_line(&mut line).await.is_err() {
                        return;
                    }
                    let mut parts = line.split_whitespace();
                    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
                        return;
                    };
                    log.lock().unwrap().push(format!("{method} {target}"));
                    // The rest of the request's head.
                    loop {
                        let mut h = String::new();
                        match client.read_line(&mut h).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) if h == "\r\n" || h == "\n" => break,
                            Ok(_) => {}
                        }
                    }
                    let mut client = client.into_inner();
                    if method != "CONNECT" {
                        let _ = client
                            .write_all(
                                b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n",
                            )
                            .await;
                        return;
                    }
                    let Ok(mut upstream) = TcpStream::connect(to).await else {
                        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                        return;
                    };
                    if client
                        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                        .await
                        .is_err()
                    {
                        return;
                    }
                    tokio::select! {
                        () = token.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                    }
                });
            }
        });
        Self { url, seen, stop }
    }

    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
