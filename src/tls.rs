//! TLS settings: certificates and keys loaded once into a rustls
//! `ServerConfig` that every connection of the worker shares.
//!
//! `TlsSettings` is built from the `--ssl-*` options, by the supervisor
//! before it forks (so a missing file or a key that does not match its
//! certificate is one clear start-up error) and again by each worker.
//! The connection side (reading and writing through a
//! `rustls::ServerConnection`) is `conn/tls_stream.rs`.
//!
//! Choices:
//! * The `ring` provider rather than aws-lc-rs: it builds with nothing but a
//!   C compiler in seconds (aws-lc-sys adds minutes and CMake to every fresh
//!   build), and for TLS 1.3 with X25519 and ECDSA P-256 both are fast.
//! * TLS 1.3 and 1.2 only, rustls's default cipher suites (AEAD only, no
//!   CBC, no RSA key exchange).
//! * Keys in PKCS#8, PKCS#1 (RSA) and SEC1 (EC) PEM all load (rustls's PEM
//!   reader tells them apart). An encrypted key arrives already decrypted,
//!   as PKCS#8 DER: python/rush/tls.py decrypts it with `cryptography`,
//!   which reads both encrypted PKCS#8 and OpenSSL's legacy PEM encryption.
//! * ALPN offers `http/1.1` (room for `h2` later).
//! * Several certificate/key pairs may be given: the client's SNI name
//!   picks the first certificate valid for it, else the first pair serves.
//! * Session resumption: stateful (an in-memory cache per worker) and with
//!   tickets sealed by keys all workers share (`tls_tickets.rs`), so a client
//!   resumes with whichever worker the kernel hands its connection to.
//! * Client certificates with `--ssl-ca-certs`: `required` refuses a
//!   handshake without a valid one, `optional` accepts both.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};

use crate::conn::TlsInfo;
use crate::tls_tickets::TicketKeys;

/// Where a certificate's private key comes from: its PEM file, or (for a
/// key that was encrypted) the file's name and the decrypted PKCS#8 DER.
#[derive(FromPyObject)]
enum KeySource {
    File(String),
    Decrypted(String, PyBackedBytes),
}

/// The TLS side of a listener (see the module).
#[pyclass(module = "rush._rush", frozen)]
pub struct TlsSettings {
    pub config: Arc<ServerConfig>,
}

#[pymethods]
impl TlsSettings {
    /// Loads `certfile` (the certificate chain, leaf first) and `keyfile`;
    /// with `ca_certs`, asks clients for certificates (`cert_reqs`:
    /// "none", "optional" or "required"). Raises ValueError with a message
    /// for the operator.
    /// Several pairs: the certificate is chosen by the name the client asks
    /// for (SNI); the first pair serves clients that ask for none or for a
    /// name no certificate covers.
    /// `tickets`: session-ticket keys shared by all workers (made by the
    /// supervisor before it forks); without them this process has its own.
    #[new]
    #[pyo3(signature = (certfiles, keyfiles, *, ca_certs=None, cert_reqs="none", ciphers=None, tickets=None))]
    fn new(
        certfiles: Vec<String>,
        keyfiles: Vec<KeySource>,
        ca_certs: Option<&str>,
        cert_reqs: &str,
        ciphers: Option<&str>,
        tickets: Option<PyRef<'_, TicketKeys>>,
    ) -> PyResult<Self> {
        if certfiles.is_empty() || certfiles.len() != keyfiles.len() {
            return Err(PyValueError::new_err(format!(
                "every --ssl-certfile needs its --ssl-keyfile (got {} and {})",
                certfiles.len(),
                keyfiles.len()
            )));
        }
        let mut config = server_config(&certfiles, &keyfiles, ca_certs, cert_reqs, ciphers)
            .map_err(PyValueError::new_err)?;
        if let Some(tickets) = tickets {
            config.ticketer = tickets.ticketer();
        }
        Ok(TlsSettings {
            config: Arc::new(config),
        })
    }
}

/// A certificate chain and its key, checked to belong together.
fn certified_key(
    certfile: &str,
    key: &KeySource,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, String> {
    let chain = CertificateDer::pem_file_iter(certfile)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .map_err(|error| format!("cannot read the certificate file {certfile}: {error}"))?;
    if chain.is_empty() {
        return Err(format!("no certificate in {certfile}"));
    }
    let (keyfile, key) = match key {
        KeySource::File(keyfile) => (
            keyfile,
            PrivateKeyDer::from_pem_file(keyfile).map_err(|error| {
                format!(
                    "cannot read a private key (PKCS#8, PKCS#1 or SEC1 PEM) from {keyfile}: {error}"
                )
            })?,
        ),
        KeySource::Decrypted(keyfile, der) => (
            keyfile,
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(der.to_vec())),
        ),
    };
    let certified = CertifiedKey::from_der(chain, key, provider).map_err(|error| {
        format!("the key in {keyfile} does not fit the certificate in {certfile}: {error}")
    })?;
    Ok(Arc::new(certified))
}

/// Picks the certificate for the name a client asks for (SNI): the first
/// one valid for it, else the first one.
#[derive(Debug)]
struct ChooseByName {
    certificates: Vec<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for ChooseByName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let asked = hello
            .server_name()
            .and_then(|name| ServerName::try_from(name).ok());
        if let (Some(asked), true) = (asked, self.certificates.len() > 1) {
            // webpki's own name check (wildcards, IP addresses): parsing a
            // leaf costs microseconds, next to a handshake's ~100.
            let fits = |certified: &&Arc<CertifiedKey>| {
                certified.cert.first().is_some_and(|leaf| {
                    webpki::EndEntityCert::try_from(leaf)
                        .is_ok_and(|cert| cert.verify_is_valid_for_subject_name(&asked).is_ok())
                })
            };
            if let Some(found) = self.certificates.iter().find(fits) {
                return Some(found.clone());
            }
        }
        self.certificates.first().cloned()
    }
}

/// ring's provider, its cipher suites limited to `ciphers` (rustls names,
/// comma-separated, e.g. `TLS13_AES_256_GCM_SHA384`) when given.
fn provider_with_ciphers(ciphers: Option<&str>) -> Result<CryptoProvider, String> {
    let mut provider = rustls::crypto::ring::default_provider();
    let Some(ciphers) = ciphers else {
        return Ok(provider);
    };
    let name = |suite: &rustls::SupportedCipherSuite| suite.suite().as_str().unwrap_or("");
    let mut chosen = Vec::new();
    for wanted in ciphers
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
    {
        match provider
            .cipher_suites
            .iter()
            .find(|suite| name(suite) == wanted)
        {
            Some(suite) => chosen.push(*suite),
            None => {
                let known: Vec<&str> = provider.cipher_suites.iter().map(name).collect();
                return Err(format!(
                    "unknown cipher suite {wanted:?} (rustls names: {})",
                    known.join(", ")
                ));
            }
        }
    }
    if chosen.is_empty() {
        return Err("--ssl-ciphers names no cipher suite".into());
    }
    provider.cipher_suites = chosen;
    Ok(provider)
}

fn server_config(
    certfiles: &[String],
    keyfiles: &[KeySource],
    ca_certs: Option<&str>,
    cert_reqs: &str,
    ciphers: Option<&str>,
) -> Result<ServerConfig, String> {
    let provider = Arc::new(provider_with_ciphers(ciphers)?);
    let certificates = certfiles
        .iter()
        .zip(keyfiles)
        .map(|(certfile, keyfile)| certified_key(certfile, keyfile, &provider))
        .collect::<Result<Vec<_>, _>>()?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|error| format!("TLS setup failed: {error}"))?;
    let builder = match (ca_certs, cert_reqs) {
        (_, "none") => builder.with_no_client_auth(),
        (None, other) => {
            return Err(format!(
                "--ssl-cert-reqs {other} needs --ssl-ca-certs (the CAs client certificates must chain to)"
            ))
        }
        (Some(ca_certs), reqs @ ("optional" | "required")) => {
            let mut roots = RootCertStore::empty();
            let certificates = CertificateDer::pem_file_iter(ca_certs)
                .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
                .map_err(|error| format!("cannot read the CA file {ca_certs}: {error}"))?;
            for certificate in certificates {
                roots
                    .add(certificate)
                    .map_err(|error| format!("a certificate in {ca_certs} is unusable: {error}"))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if reqs == "optional" {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|error| format!("cannot use {ca_certs} for client certificates: {error}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        (_, other) => {
            return Err(format!(
                "--ssl-cert-reqs takes none, optional or required (got {other:?})"
            ))
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(ChooseByName { certificates }));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.ticketer = rustls::crypto::ring::Ticketer::new()
        .map_err(|error| format!("cannot make session ticket keys: {error}"))?;
    Ok(config)
}

/// ASGI's TLS extension (`scope["extensions"]["tls"]`): the client's
/// verified certificate chain, the TLS version and the cipher suite.
pub fn add_asgi_extension(
    py: Python<'_>,
    scope: &Bound<'_, pyo3::types::PyDict>,
    tls: &TlsInfo,
) -> PyResult<()> {
    let extension = pyo3::types::PyDict::new(py);
    extension.set_item("server_cert", py.None())?;
    extension.set_item("client_cert_chain", &tls.client_chain_pem)?;
    extension.set_item("client_cert_name", py.None())?;
    extension.set_item("client_cert_error", py.None())?;
    extension.set_item("tls_version", tls.version_code)?;
    extension.set_item("cipher_suite", tls.cipher_code)?;
    let extensions = match scope.get_item("extensions")? {
        Some(existing) => existing.cast_into::<pyo3::types::PyDict>()?,
        None => {
            let created = pyo3::types::PyDict::new(py);
            scope.set_item("extensions", &created)?;
            created
        }
    };
    extensions.set_item("tls", extension)
}

/// The `SSL_*` variables WSGI apps know from Apache's mod_ssl.
pub fn add_wsgi_variables(environ: &Bound<'_, pyo3::types::PyDict>, tls: &TlsInfo) -> PyResult<()> {
    environ.set_item("SSL_PROTOCOL", tls.version_name)?;
    environ.set_item("SSL_CIPHER", tls.cipher_name)?;
    match tls.client_chain_pem.first() {
        Some(leaf) => {
            environ.set_item("SSL_CLIENT_CERT", leaf)?;
            environ.set_item("SSL_CLIENT_VERIFY", "SUCCESS")?;
        }
        None => environ.set_item("SSL_CLIENT_VERIFY", "NONE")?,
    }
    Ok(())
}
