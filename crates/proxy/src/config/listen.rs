//! Where clients connect: a TCP address, a Unix socket, or nowhere (TLS
//! only).

use std::net::SocketAddr;
use std::path::PathBuf;

use super::{ConfigError, invalid};

/// Where clients connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    /// A Unix socket at this path, with these permissions (`None`: the
    /// umask's).
    Unix {
        path: PathBuf,
        perm: Option<u32>,
    },
    /// No plain listener (`none`): clients connect over TLS only.
    None,
}

// === impl Listen ===

impl Listen {
    pub(super) fn parse(listen: &str, perm: Option<&str>) -> Result<Listen, ConfigError> {
        let perm = perm
            .map(|p| {
                u32::from_str_radix(p, 8)
                    .ok()
                    .filter(|&m| m <= 0o777)
                    .ok_or_else(|| {
                        invalid(
                            "unix_socket_perm",
                            format!("{p:?} is not an octal mode such as 770"),
                        )
                    })
            })
            .transpose()?;
        if listen == "none" && perm.is_none() {
            return Ok(Listen::None);
        }
        if let Some(path) = listen.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(invalid("listen", "unix: needs a path".to_owned()));
            }
            return Ok(Listen::Unix {
                path: PathBuf::from(path),
                perm,
            });
        }
        if perm.is_some() {
            return Err(invalid(
                "unix_socket_perm",
                "applies only with listen = \"unix:/path\"".to_owned(),
            ));
        }
        listen.parse::<SocketAddr>().map(Listen::Tcp).map_err(|e| {
            invalid(
                "listen",
                format!("{listen:?} is neither an ip:port nor unix:/path nor none ({e})"),
            )
        })
    }

    /// The TCP address, if clients connect over TCP.
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            Listen::Tcp(addr) => Some(*addr),
            Listen::Unix { .. } | Listen::None => None,
        }
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(addr) => addr.fmt(f),
            Listen::Unix { path, .. } => write!(f, "unix:{}", path.display()),
            Listen::None => f.write_str("none"),
        }
    }
}
