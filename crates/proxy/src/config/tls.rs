//! TLS settings, `[tls]` (clients) and `[backend.tls]` (nodes), and the
//! certificates and keys they name, read into rustls configurations. The
//! files are read at start-up and again on every SIGHUP: a file that
//! cannot be used is a configuration error naming the setting and the file.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::{Deserialize, Serialize};

use super::{Config, ConfigError, invalid};

/// `[tls]`: a TLS listener for clients, next to the plain one (as Redis's
/// `tls-port` next to `port`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// `ip:port` of the TLS listener. Default: none (no TLS for clients).
    /// Needs `cert_file` and `key_file`.
    pub listen: Option<String>,
    /// orthrus's certificate chain (PEM), leaf first. Reread on SIGHUP.
    pub cert_file: Option<String>,
    /// The private key of `cert_file` (PEM: PKCS#8, PKCS#1 or SEC1).
    /// Reread on SIGHUP.
    pub key_file: Option<String>,
    /// CA certificates (PEM) that client certificates are verified
    /// against. Reread on SIGHUP. Default: none.
    pub ca_cert_file: Option<String>,
    /// Whether clients must present a certificate signed by
    /// `ca_cert_file`: `yes`, `optional` (verified when presented) or `no`.
    /// Default `yes` with a `ca_cert_file`, `no` without one.
    pub auth_clients: Option<AuthClients>,
}

/// `tls.auth_clients`, as Redis's `tls-auth-clients`.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AuthClients {
    Yes,
    Optional,
    No,
}

/// `[backend.tls]`: TLS on every connection orthrus opens to a node.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackendTlsConfig {
    /// Speak TLS to the nodes (a cluster with `tls-cluster yes`). Default
    /// false.
    pub enabled: bool,
    /// CA certificates (PEM) that the nodes' certificates are verified
    /// against. Default: the system's trusted CAs.
    pub ca_cert_file: Option<String>,
    /// A client certificate (PEM) for nodes that require one
    /// (`tls-auth-clients yes`, Redis's default). Default: none.
    pub cert_file: Option<String>,
    /// The private key of `cert_file`.
    pub key_file: Option<String>,
    /// The name every node's certificate is verified against (and sent as
    /// SNI). Default: each node's host as the cluster announces it; an IP
    /// address is checked against the certificate's IP addresses.
    pub server_name: Option<String>,
}

/// The certificates and keys, loaded.
#[derive(Clone, Debug, Default)]
pub struct Tls {
    /// The TLS listener's address, if clients may connect over TLS.
    pub listen: Option<SocketAddr>,
    /// What the TLS listener accepts with.
    pub server: Option<Arc<rustls::ServerConfig>>,
    /// What node connections are made with, when the nodes speak TLS.
    pub backend: Option<BackendTls>,
    /// The same for each named upstream, in their order: their own
    /// `[upstreams.NAME.tls]`, or `backend`.
    pub named: Vec<Option<BackendTls>>,
}

/// How orthrus connects to nodes over TLS.
#[derive(Clone, Debug)]
pub struct BackendTls {
    pub config: Arc<rustls::ClientConfig>,
    /// Verify every node against this name instead of its own host.
    pub server_name: Option<ServerName<'static>>,
}

// === impl Tls ===

impl Tls {
    /// Reads every certificate and key the configuration names.
    pub(super) fn load(config: &Config) -> Result<Tls, ConfigError> {
        let listen = config
            .tls
            .listen
            .as_deref()
            .map(|a| {
                a.parse::<SocketAddr>()
                    .map_err(|e| invalid("tls.listen", format!("{a:?} is not an ip:port: {e}")))
            })
            .transpose()?;
        let server = match listen {
            Some(_) => Some(Arc::new(server_config(&config.tls)?)),
            None => None,
        };
        let backend = if config.backend.tls.enabled {
            Some(backend_tls(&config.backend.tls, "backend.tls")?)
        } else {
            None
        };
        let named = config
            .upstreams
            .iter()
            .map(|(name, upstream)| match &upstream.tls {
                None => Ok(backend.clone()),
                // Files without `enabled = true` would send the upstream's
                // passwords in clear: said, not guessed.
                Some(own) if !own.enabled && tls_files_named(own) => Err(invalid(
                    format!("upstreams.{name}.tls"),
                    "names certificate files or a server name but not enabled = true \
                     (add it; enabled = false alone turns TLS off for this upstream)"
                        .to_owned(),
                )),
                Some(own) if !own.enabled => Ok(None),
                Some(own) => backend_tls(own, &format!("upstreams.{name}.tls")).map(Some),
            })
            .collect::<Result<_, _>>()?;
        Ok(Tls {
            listen,
            server,
            backend,
            named,
        })
    }
}

/// The crypto provider: *ring* (builds with a C compiler alone).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(tls: &TlsConfig) -> Result<rustls::ServerConfig, ConfigError> {
    let (Some(cert_file), Some(key_file)) = (&tls.cert_file, &tls.key_file) else {
        return Err(invalid(
            "tls.listen",
            "needs tls.cert_file and tls.key_file (--tls-cert-file, --tls-key-file)".to_owned(),
        ));
    };
    let certs = certs("tls.cert_file", cert_file)?;
    let key = key("tls.key_file", key_file)?;
    let auth = match (tls.auth_clients, &tls.ca_cert_file) {
        (Some(AuthClients::No), _) | (None, None) => AuthClients::No,
        (Some(a @ (AuthClients::Yes | AuthClients::Optional)), None) => {
            return Err(invalid(
                "tls.auth_clients",
                format!(
                    "{} needs tls.ca_cert_file to verify client certificates with",
                    if a == AuthClients::Yes {
                        "yes"
                    } else {
                        "optional"
                    }
                ),
            ));
        }
        (Some(a), Some(_)) => a,
        (None, Some(_)) => AuthClients::Yes,
    };
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("tls", e.to_string()))?;
    let builder = match (auth, &tls.ca_cert_file) {
        (AuthClients::No, _) | (_, None) => builder.with_no_client_auth(),
        (auth, Some(ca)) => {
            let roots = Arc::new(roots("tls.ca_cert_file", ca)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider());
            let verifier = if auth == AuthClients::Optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| invalid("tls.ca_cert_file", format!("{ca}: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder
        .with_single_cert(certs, key)
        .map_err(|e| invalid("tls.key_file", format!("{key_file} with {cert_file}: {e}")))
}

/// Whether a TLS table names a file or a server name.
fn tls_files_named(tls: &BackendTlsConfig) -> bool {
    tls.ca_cert_file.is_some()
        || tls.cert_file.is_some()
        || tls.key_file.is_some()
        || tls.server_name.is_some()
}

/// The client side of TLS to nodes, as `[backend.tls]` (or an upstream's
/// own table, named `root`) says.
fn backend_tls(tls: &BackendTlsConfig, root: &str) -> Result<BackendTls, ConfigError> {
    let setting = |field: &str| format!("{root}.{field}");
    let roots = match &tls.ca_cert_file {
        Some(ca) => roots(setting("ca_cert_file"), ca)?,
        None => system_roots(setting("ca_cert_file"))?,
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(root.to_owned(), e.to_string()))?
        .with_root_certificates(roots);
    let config = match (&tls.cert_file, &tls.key_file) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert_file), Some(key_file)) => {
            let certs = certs(setting("cert_file"), cert_file)?;
            let key = key(setting("key_file"), key_file)?;
            builder.with_client_auth_cert(certs, key).map_err(|e| {
                invalid(
                    setting("key_file"),
                    format!("{key_file} with {cert_file}: {e}"),
                )
            })?
        }
        (Some(_), None) => {
            return Err(invalid(
                setting("cert_file"),
                format!("needs {} too", setting("key_file")),
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                setting("key_file"),
                format!("needs {} too", setting("cert_file")),
            ));
        }
    };
    let server_name = tls
        .server_name
        .as_deref()
        .map(|name| {
            ServerName::try_from(name.to_owned()).map_err(|e| {
                invalid(
                    setting("server_name"),
                    format!("{name:?} is neither a DNS name nor an IP address: {e}"),
                )
            })
        })
        .transpose()?;
    Ok(BackendTls {
        config: Arc::new(config),
        server_name,
    })
}

/// A setting's name, as errors give it.
type Setting = Cow<'static, str>;

/// Every certificate in a PEM file; at least one.
fn certs(
    setting: impl Into<Setting>,
    path: &str,
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let setting = setting.into();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| invalid(setting.clone(), format!("{path}: {}", pem_error(&e))))?;
    if certs.is_empty() {
        return Err(invalid(
            setting,
            format!("{path}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it"),
        ));
    }
    Ok(certs)
}

/// The first private key in a PEM file.
fn key(setting: impl Into<Setting>, path: &str) -> Result<PrivateKeyDer<'static>, ConfigError> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| invalid(setting, format!("{path}: {}", pem_error(&e))))
}

/// The CA certificates of a PEM file, as trust anchors.
fn roots(setting: impl Into<Setting>, path: &str) -> Result<RootCertStore, ConfigError> {
    let setting = setting.into();
    let mut store = RootCertStore::empty();
    for cert in certs(setting.clone(), path)? {
        store.add(cert).map_err(|e| {
            invalid(
                setting.clone(),
                format!("{path}: not a usable CA certificate: {e}"),
            )
        })?;
    }
    Ok(store)
}

/// The operating system's trusted CAs (with no `ca_cert_file`, the
/// setting named `setting`).
fn system_roots(setting: impl Into<Setting>) -> Result<RootCertStore, ConfigError> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    let (added, _) = store.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(invalid(
            setting,
            "not set, and no trusted CA certificate was found on this system".to_owned(),
        ));
    }
    Ok(store)
}

fn pem_error(e: &rustls_pki_types::pem::Error) -> String {
    match e {
        rustls_pki_types::pem::Error::Io(io) => io.to_string(),
        rustls_pki_types::pem::Error::NoItemsFound => "no PEM item of the expected kind".to_owned(),
        other => format!("not a valid PEM file ({other:?})"),
    }
}
