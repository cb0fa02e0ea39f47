//! Throw-away certificates made with the `openssl` binary (the same
//! commands as the README's TLS section), and a blocking TLS client.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use orthrus_devcluster::TlsFiles;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// Whether the nodes' server was built with TLS. A test of TLS to the
/// nodes cannot hold on one built without (Valkey from its Python wheel):
/// it says so on stderr and stops there.
pub fn nodes_have_tls(test: &str) -> bool {
    let tls = orthrus_devcluster::server_kind().tls;
    if !tls {
        eprintln!("SKIPPED {test}: the nodes' server was built without TLS");
    }
    tls
}

/// A directory of CAs and certificates, removed on drop.
pub struct Pki {
    dir: tempfile::TempDir,
}

/// A certificate and its key.
#[derive(Clone, Debug)]
pub struct Cert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A blocking TLS connection to orthrus.
pub type TlsConn = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

impl Pki {
    pub fn new() -> Pki {
        Pki {
            dir: tempfile::Builder::new()
                .prefix("orthrus-pki-")
                .tempdir()
                .expect("temp dir"),
        }
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// A self-signed CA `name`: `name.crt`, `name.key`.
    pub fn ca(&self, name: &str) -> PathBuf {
        openssl(
            self.dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
            ],
        );
        self.path(&format!("{name}.crt"))
    }

    /// A certificate `name` signed by CA `ca`, for 127.0.0.1 and localhost,
    /// usable by servers and clients.
    pub fn cert(&self, ca: &str, name: &str) -> Cert {
        let dir = self.dir.path();
        std::fs::write(
            dir.join(format!("{name}.ext")),
            "subjectAltName = IP:127.0.0.1, DNS:localhost\n\
             basicConstraints = CA:FALSE\n\
             keyUsage = digitalSignature\n\
             extendedKeyUsage = serverAuth, clientAuth\n",
        )
        .expect("write extensions");
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                &format!("{ca}.crt"),
                "-CAkey",
                &format!("{ca}.key"),
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.crt"),
            ],
        );
        Cert {
            cert: self.path(&format!("{name}.crt")),
            key: self.path(&format!("{name}.key")),
        }
    }

    /// What a TLS-only devcluster node needs: a certificate signed by `ca`.
    pub fn node_files(&self, ca: &str, name: &str) -> TlsFiles {
        let cert = self.cert(ca, name);
        TlsFiles {
            cert: cert.cert,
            key: cert.key,
            ca: self.path(&format!("{ca}.crt")),
        }
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (is it installed?)");
    assert!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Connects over TLS, trusting `ca`, presenting `client` if given, and
/// finishes the handshake.
pub fn connect(addr: SocketAddr, ca: &Path, client: Option<&Cert>) -> io::Result<TlsConn> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(io::Error::other)? {
        roots
            .add(cert.map_err(io::Error::other)?)
            .map_err(io::Error::other)?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some(c) => {
            let certs = CertificateDer::pem_file_iter(&c.cert)
                .map_err(io::Error::other)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(io::Error::other)?;
            let key = PrivateKeyDer::from_pem_file(&c.key).map_err(io::Error::other)?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(io::Error::other)?
        }
    };
    let name = ServerName::try_from("127.0.0.1").map_err(io::Error::other)?;
    let conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(io::Error::other)?;
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}

/// Sends one command and reads its reply as text; an error if the
/// connection fails (a refused certificate shows up here with TLS 1.3).
pub fn try_send(s: &mut (impl Read + Write), args: &[&str]) -> io::Result<String> {
    s.write_all(&super::encode(args))?;
    s.flush()?;
    Ok(String::from_utf8_lossy(&super::read_reply(s)?).into_owned())
}
