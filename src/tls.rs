//! Where the crate's HTTP clients are made, and the TLS that remote MCP
//! servers are reached with: rustls with ring as its crypto provider,
//! trusting what the machine trusts (the Windows and macOS stores, the
//! system bundle on Linux, through `rustls-platform-verifier`) and, for a
//! server with a `ca_file`, that file's certificates too (a webpki
//! verifier of its own, so the OS's verifier stays untouched and a
//! self-hosted CA never becomes trusted for any other server).
//!
//! A certificate that is refused is explained here, by the verifier that
//! refused it: which name was asked for, which certificate (its SHA-256),
//! why, and what to do. The explanation is kept for the session's error,
//! because reqwest's own error text says only "error sending request".
//!
//! Every `reqwest::Client` of the crate starts from a builder made here
//! (clippy.toml forbids the others): [`plain_http`] for the loopback
//! clients that never speak TLS, [`server_client`] for MCP servers (with
//! their proxy, timeouts and redirect rule).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientConfig, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error as TlsError, RootCertStore};
use sha2::{Digest, Sha256};

/// Makes ring the process's crypto provider, once. reqwest is built
/// without a provider of its own (`rustls-no-provider`), and panics when
/// it builds any client, TLS or not, before one is installed; so every
/// builder of the crate comes from here.
pub fn install_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err: another provider was installed first (a test's); fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A builder for the crate's clients that speak plain http on loopback
/// (main_server, the http handler, the admin API, tests): what each of
/// them did before TLS was in the build; they set their own proxy and
/// redirect rules.
#[allow(clippy::disallowed_methods)] // reason: the one place plain clients are made
pub fn plain_http() -> reqwest::ClientBuilder {
    install_provider();
    reqwest::Client::builder()
}

/// One MCP server's HTTP client, and where its verifier leaves the reason
/// of a refused certificate.
#[derive(Clone)]
pub(crate) struct ServerClient {
    pub http: reqwest::Client,
    pub refusal: Refusal,
}

impl ServerClient {
    /// The reason of the last refused certificate, taken (so that an old
    /// refusal never explains a later, different failure).
    pub(crate) fn take_refusal(&self) -> Option<String> {
        self.refusal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

/// The client of the MCP server at `url` with the settings of its table:
/// TLS trusting the OS's store and its `ca_file`, its proxy (never for
/// loopback), its connect and read timeouts, redirects within the URL's
/// origin only (a redirect elsewhere would carry the headers, an API key,
/// to a host nobody configured).
#[allow(clippy::disallowed_methods)] // reason: the one place MCP servers' clients are made
pub(crate) fn server_client(
    url: &url::Url,
    options: &crate::manifest::HttpOptions,
) -> Result<ServerClient, String> {
    use crate::manifest::ProxySetting;
    install_provider();
    let refusal = Refusal::default();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(options.connect_timeout)
        .read_timeout(options.read_timeout)
        .redirect(same_origin_redirects());
    if url.scheme() == "https" {
        let config = client_config(options.ca_file.as_deref(), refusal.clone())?;
        builder = builder.tls_backend_preconfigured(config);
    }
    builder = if crate::contract::url_host_is_loopback(url) {
        builder.no_proxy()
    } else {
        match &options.proxy {
            // reqwest reads HTTPS_PROXY/HTTP_PROXY/ALL_PROXY/NO_PROXY, and
            // with its "system-proxy" feature the Windows (registry) and
            // macOS (System Configuration) settings.
            ProxySetting::System => builder,
            ProxySetting::Off => builder.no_proxy(),
            ProxySetting::Url(p) => {
                let proxy = reqwest::Proxy::all(p.as_str()).map_err(|e| {
                    format!(
                        "the `proxy` {} is not usable: {e}",
                        crate::manifest::remote::redact_url(p)
                    )
                })?;
                builder.proxy(proxy)
            }
        }
    };
    let http = builder
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    Ok(ServerClient { http, refusal })
}

/// Follows a redirect only to the origin of the request (scheme, host and
/// port), at most 10 times.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let first = attempt.previous().first().map(|u| u.origin());
        if attempt.previous().len() > 10 {
            attempt.error("more than 10 redirects")
        } else if first.is_some_and(|o| o != attempt.url().origin()) {
            let to = attempt.url().origin().ascii_serialization();
            attempt.error(format!(
                "a redirect to another origin ({to}) was refused: the request's headers (an API key) would go to a server nobody configured; give the URL it redirects to"
            ))
        } else {
            attempt.follow()
        }
    })
}

/// Why the last certificate was refused, in words; shared by a client's
/// verifier and whoever explains that client's errors.
pub(crate) type Refusal = Arc<Mutex<Option<String>>>;

/// The TLS configuration of one MCP server's client: the OS's trust, plus
/// the certificates of `ca_file` when given; refusals go to `refusal`.
pub(crate) fn client_config(
    ca_file: Option<&Path>,
    refusal: Refusal,
) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let platform = rustls_platform_verifier::Verifier::new(provider.clone())
        .map_err(|e| format!("cannot use this machine's certificate store: {e}"))?;
    let extra = match ca_file {
        Some(path) => Some(ca_verifier(path, &provider)?),
        None => None,
    };
    let verifier = Verifier {
        platform: Arc::new(platform),
        extra,
        ca_file: ca_file.map(Path::to_path_buf),
        provider: provider.clone(),
        refusal,
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .dangerous() // reason: our verifier only widens trust by `ca_file`, never skips a check
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(config)
}

/// A webpki verifier trusting exactly the certificates of a PEM file.
fn ca_verifier(
    path: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, String> {
    let pem = std::fs::read(path)
        .map_err(|e| format!("cannot read the ca_file {}: {e}", path.display()))?;
    let mut roots = RootCertStore::empty();
    let mut found = 0;
    for cert in rustls_pemfile_certs(&pem) {
        let cert = cert.map_err(|e| format!("the ca_file {} is not PEM: {e}", path.display()))?;
        roots.add(cert).map_err(|e| {
            format!(
                "a certificate of the ca_file {} is not usable: {e}",
                path.display()
            )
        })?;
        found += 1;
    }
    if found == 0 {
        return Err(format!(
            "the ca_file {} holds no certificate (expected PEM blocks \"-----BEGIN CERTIFICATE-----\")",
            path.display()
        ));
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map(|v| v as Arc<dyn ServerCertVerifier>)
        .map_err(|e| format!("cannot use the ca_file {}: {e}", path.display()))
}

/// The certificates of a PEM text (rustls' own PEM reader, in pki-types).
fn rustls_pemfile_certs(
    pem: &[u8],
) -> impl Iterator<Item = Result<CertificateDer<'static>, rustls::pki_types::pem::Error>> + '_ {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem)
}

/// The `ca_file`'s verifier, then the OS's: a certificate either trusts is
/// accepted; a refusal is explained into `refusal`.
#[derive(Debug)]
struct Verifier {
    platform: Arc<dyn ServerCertVerifier>,
    extra: Option<Arc<dyn ServerCertVerifier>>,
    ca_file: Option<PathBuf>,
    provider: Arc<CryptoProvider>,
    refusal: Refusal,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        let os = || {
            self.platform.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            )
        };
        // The ca_file's verifier first: the OS's logs every certificate it
        // does not know as an ERROR, which a self-hosted server's
        // certificate, trusted through its ca_file, must not cause.
        let error = match &self.extra {
            Some(extra) => match extra.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Ok(v) => return Ok(v),
                // Not the ca_file's CA: perhaps one the OS trusts.
                Err(mine) if unknown_issuer(&mine) => match os() {
                    Ok(v) => return Ok(v),
                    Err(e) => e,
                },
                // The ca_file's CA signed it, and something else is wrong
                // (a name, a date).
                Err(mine) => mine,
            },
            None => match os() {
                Ok(v) => return Ok(v),
                Err(e) => e,
            },
        };
        let why = explain(&error, server_name, end_entity, self.ca_file.as_deref());
        *self.refusal.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        Err(error)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn unknown_issuer(e: &TlsError) -> bool {
    matches!(
        e,
        TlsError::InvalidCertificate(CertificateError::UnknownIssuer)
    )
}

/// A refused certificate in words: the name, the certificate, why, and
/// what to do.
fn explain(
    error: &TlsError,
    name: &ServerName<'_>,
    cert: &CertificateDer<'_>,
    ca_file: Option<&Path>,
) -> String {
    let sha: String = Sha256::digest(cert.as_ref())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let name = name.to_str();
    let which = format!("the certificate that {name} presented (SHA-256 {sha}…)");
    let untrusted_by = match ca_file {
        Some(p) => format!(
            "neither this machine's certificate store nor the ca_file {} trusts",
            p.display()
        ),
        None => "this machine's certificate store does not trust".to_string(),
    };
    let ca_hint = match ca_file {
        Some(_) => "check that the ca_file holds the CA that signed the server's certificate",
        None => {
            "for a self-hosted server, set `ca_file` in its [[mcp_server]] to its CA's certificate (PEM); if a company proxy or an antivirus inspects TLS, install its root certificate in the system's store"
        }
    };
    match error {
        TlsError::InvalidCertificate(CertificateError::UnknownIssuer) => {
            format!("{which} is not trusted: it is signed by a CA that {untrusted_by}; {ca_hint}")
        }
        TlsError::InvalidCertificate(
            e @ (CertificateError::Expired | CertificateError::ExpiredContext { .. }),
        ) => format!(
            "{which} has expired ({e}): the server's certificate must be renewed (or this machine's clock is wrong)"
        ),
        TlsError::InvalidCertificate(
            e @ (CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. }),
        ) => format!(
            "{which} is not valid yet ({e}): check this machine's clock, or the server's certificate"
        ),
        TlsError::InvalidCertificate(
            e @ (CertificateError::NotValidForName
            | CertificateError::NotValidForNameContext { .. }),
        ) => format!(
            "{which} is for another name ({e}): use a URL with a name the certificate is for, or have the server's certificate name {name}"
        ),
        // The OS's own verdict it did not put in rustls' words (Wine's
        // CryptoAPI answers a root it does not know with a failed
        // revocation check, 0x800B010E): most often a CA it does not
        // trust.
        TlsError::InvalidCertificate(e) => {
            format!("{which} was refused by this machine's certificate store ({e}); {ca_hint}")
        }
        e => format!("{which} was refused: {e}"),
    }
}
