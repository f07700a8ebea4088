//! TLS settings: certificates and keys loaded once into a rustls
//! `ServerConfig` that every connection of the worker shares.
//!
//! `TlsSettings` is built from the `--ssl-*` options, by the supervisor
//! before it forks (so a missing file or a key that does not match its
//! certificate is one clear start-up error) and again by each worker.
//! The connection side (reading and writing through a
//! `rustls::ServerConnection`) is `conn/tls.rs`.
//!
//! Choices:
//! * The `ring` provider rather than aws-lc-rs: it builds with nothing but a
//!   C compiler in seconds (aws-lc-sys adds minutes and CMake to every fresh
//!   build), and for TLS 1.3 with X25519 and ECDSA P-256 both are fast.
//! * TLS 1.3 and 1.2 only, rustls's default cipher suites (AEAD only, no
//!   CBC, no RSA key exchange).
//! * Keys in PKCS#8, PKCS#1 (RSA) and SEC1 (EC) PEM all load (rustls's PEM
//!   reader tells them apart). Encrypted keys are not supported yet.
//! * ALPN offers `http/1.1` (room for `h2` later).
//! * Session resumption: stateful (an in-memory cache per worker) and with
//!   tickets; ticket keys are per worker, so a client resumes only with the
//!   worker it first met.
//! * Client certificates with `--ssl-ca-certs`: `required` refuses a
//!   handshake without a valid one, `optional` accepts both.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

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
    #[new]
    #[pyo3(signature = (certfile, keyfile, *, ca_certs=None, cert_reqs="none"))]
    fn new(
        certfile: &str,
        keyfile: &str,
        ca_certs: Option<&str>,
        cert_reqs: &str,
    ) -> PyResult<Self> {
        let config =
            server_config(certfile, keyfile, ca_certs, cert_reqs).map_err(PyValueError::new_err)?;
        Ok(TlsSettings {
            config: Arc::new(config),
        })
    }
}

fn server_config(
    certfile: &str,
    keyfile: &str,
    ca_certs: Option<&str>,
    cert_reqs: &str,
) -> Result<ServerConfig, String> {
    let chain = CertificateDer::pem_file_iter(certfile)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .map_err(|error| format!("cannot read the certificate file {certfile}: {error}"))?;
    if chain.is_empty() {
        return Err(format!("no certificate in {certfile}"));
    }
    let key = PrivateKeyDer::from_pem_file(keyfile).map_err(|error| {
        format!("cannot read a private key (PKCS#8, PKCS#1 or SEC1 PEM) from {keyfile}: {error}")
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
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
    let mut config = builder.with_single_cert(chain, key).map_err(|error| {
        format!("the key in {keyfile} does not fit the certificate in {certfile}: {error}")
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.ticketer = rustls::crypto::ring::Ticketer::new()
        .map_err(|error| format!("cannot make session ticket keys: {error}"))?;
    Ok(config)
}
