//! Certificates in QEMU's `tls-creds-x509` layout (`ca-cert.pem`, `server-cert.pem`,
//! `server-key.pem`, `client-cert.pem`, `client-key.pem` in one directory), read from
//! descriptors: `vbmq ctl` opens the files with the operator's rights and passes them, so a
//! confined vbmq opens no path. Everything is checked when the export or the mirror begins,
//! so a bad file is refused at the command, never at a client's connection.

use std::fs::File;
use std::io::{self, Read};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The file names of QEMU's layout, in the order `vbmq ctl` passes them.
pub const CA_CERT: &str = "ca-cert.pem";
/// The server's certificate (chain).
pub const SERVER_CERT: &str = "server-cert.pem";
/// The server's private key.
pub const SERVER_KEY: &str = "server-key.pem";
/// The client's certificate (optional: for servers that verify their peers).
pub const CLIENT_CERT: &str = "client-cert.pem";
/// The client's private key.
pub const CLIENT_KEY: &str = "client-key.pem";

/// A PEM file is small: a longer one is refused before it is parsed.
const MAX_PEM: u64 = 1 << 20;

/// The credential files of a server.
pub struct ServerFiles {
    /// `ca-cert.pem`: the authority client certificates must chain to (`verify_peer`).
    pub ca: File,
    /// `server-cert.pem`.
    pub cert: File,
    /// `server-key.pem`.
    pub key: File,
    /// Clients must present a certificate the CA signed (QEMU's `verify-peer=on`).
    pub verify_peer: bool,
}

/// The credential files of a client.
pub struct ClientFiles {
    /// `ca-cert.pem`: the authority the server's certificate must chain to.
    pub ca: File,
    /// `client-cert.pem` and `client-key.pem`, for a server that verifies its peers.
    pub cert_and_key: Option<(File, File)>,
}

fn invalid(what: &str, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{what}: {why}"))
}

/// The provider: ring's primitives, TLS 1.2 and 1.3 with their safe defaults.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_pem(file: &File, what: &str) -> io::Result<Vec<u8>> {
    let mut pem = Vec::new();
    file.take(MAX_PEM + 1).read_to_end(&mut pem)?;
    if pem.len() as u64 > MAX_PEM {
        return Err(invalid(what, "longer than 1 MiB"));
    }
    Ok(pem)
}

fn certificates(file: &File, what: &str) -> io::Result<Vec<CertificateDer<'static>>> {
    let pem = read_pem(file, what)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(what, e))?;
    if certs.is_empty() {
        return Err(invalid(what, "no PEM certificate in it"));
    }
    Ok(certs)
}

fn private_key(file: &File, what: &str) -> io::Result<PrivateKeyDer<'static>> {
    let pem = read_pem(file, what)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| invalid(what, e))
}

fn roots(file: &File) -> io::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(file, CA_CERT)? {
        roots.add(cert).map_err(|e| invalid(CA_CERT, e))?;
    }
    Ok(roots)
}

/// The server's TLS configuration from its files.
pub fn server_config(files: &ServerFiles) -> io::Result<Arc<ServerConfig>> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS", e))?;
    let builder = if files.verify_peer {
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots(&files.ca)?), provider())
                .build()
                .map_err(|e| invalid(CA_CERT, e))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let config = builder
        .with_single_cert(
            certificates(&files.cert, SERVER_CERT)?,
            private_key(&files.key, SERVER_KEY)?,
        )
        .map_err(|e| invalid(SERVER_KEY, e))?;
    Ok(Arc::new(config))
}

/// The client's TLS configuration from its files: the server is verified against the CA.
pub fn client_config(files: &ClientFiles) -> io::Result<Arc<ClientConfig>> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS", e))?
        .with_root_certificates(roots(&files.ca)?);
    let config = match &files.cert_and_key {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                certificates(cert, CLIENT_CERT)?,
                private_key(key, CLIENT_KEY)?,
            )
            .map_err(|e| invalid(CLIENT_KEY, e))?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}
