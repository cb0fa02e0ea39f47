//! Node addresses: a host (name, IPv4 or IPv6 literal) and a port.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Where a cluster node listens. The host is kept as the cluster reported it
/// (a name is not resolved here). One pointer wide (an `Arc` of host and
/// port): the same address is copied into every routing decision, every
/// request in flight and every slot-map snapshot. Compared and ordered by
/// host, then port; hashed by a digest of both made once, when the address
/// is (a connection pool looks its node up on every request).
#[derive(Clone, Eq, PartialEq, Hash, Ord, PartialOrd)]
pub struct NodeAddr(Arc<Parts>);

/// `digest` last: it follows from host and port, so it never decides an
/// order or an equality they left open.
#[derive(Eq, PartialEq, Ord, PartialOrd)]
struct Parts {
    host: Box<str>,
    port: u16,
    digest: u64,
}

/// Why a `host:port` string is not an address.
#[derive(thiserror::Error, Copy, Clone, Eq, PartialEq, Debug)]
pub enum AddrParseError {
    /// There is no `:` separating a port.
    #[error("address has no ':port' part")]
    MissingPort,
    /// Nothing before the port (or `[]`).
    #[error("address has an empty host")]
    EmptyHost,
    /// The port is not a decimal number in `1..=65535`.
    #[error("address has an invalid port (expected 1-65535)")]
    BadPort,
    /// The host has whitespace, control bytes, stray brackets or is not UTF-8.
    #[error("address has an invalid host")]
    BadHost,
}

// === impl NodeAddr ===

impl NodeAddr {
    /// No validation: use `str::parse` for input from outside.
    pub fn new(host: impl Into<Box<str>>, port: u16) -> Self {
        let host = host.into();
        let digest = digest(&host, port);
        NodeAddr(Arc::new(Parts { host, port, digest }))
    }

    /// The host without brackets (`::1`, not `[::1]`).
    pub fn host(&self) -> &str {
        &self.0.host
    }

    pub fn port(&self) -> u16 {
        self.0.port
    }

    /// Redis 7 may leave the host out of a redirect or a topology entry
    /// (`MOVED 3999 :6381`), meaning "the host you are talking to".
    pub fn has_host(&self) -> bool {
        !self.0.host.is_empty()
    }

    /// This address, or if its host is empty, `origin`'s host with this
    /// port: how an empty-host redirect is resolved against the node that
    /// sent it.
    pub fn or_host_of(&self, origin: &NodeAddr) -> NodeAddr {
        if self.has_host() {
            self.clone()
        } else {
            NodeAddr::new(origin.host(), self.port())
        }
    }

    /// Parses `host:port` from wire bytes. The last `:` splits, so bare IPv6
    /// (`::1:6379`) works as Redis itself prints it; `[::1]:6379` too.
    /// `allow_empty_host` admits Redis 7's `:6379` form.
    pub(crate) fn parse_bytes(
        s: &[u8],
        allow_empty_host: bool,
    ) -> Result<NodeAddr, AddrParseError> {
        let colon = s
            .iter()
            .rposition(|&b| b == b':')
            .ok_or(AddrParseError::MissingPort)?;
        let (host, port) = (
            s.get(..colon).unwrap_or_default(),
            s.get(colon + 1..).unwrap_or_default(),
        );
        let port = parse_port(port).ok_or(AddrParseError::BadPort)?;
        let host = match host {
            [b'[', inner @ .., b']'] => inner,
            other => other,
        };
        if host.is_empty() && !allow_empty_host {
            return Err(AddrParseError::EmptyHost);
        }
        if !host.iter().all(|&b| is_host_byte(b)) {
            return Err(AddrParseError::BadHost);
        }
        let host = std::str::from_utf8(host).map_err(|_| AddrParseError::BadHost)?;
        Ok(NodeAddr::new(host, port))
    }

    /// Validates a host and port that arrived as separate fields (topology
    /// replies), with the same rules as `parse_bytes`.
    pub(crate) fn from_parts(host: &[u8], port: u16) -> Result<NodeAddr, AddrParseError> {
        if port == 0 {
            return Err(AddrParseError::BadPort);
        }
        if host.is_empty() {
            return Err(AddrParseError::EmptyHost);
        }
        if !host.iter().all(|&b| is_host_byte(b)) {
            return Err(AddrParseError::BadHost);
        }
        let host = std::str::from_utf8(host).map_err(|_| AddrParseError::BadHost)?;
        Ok(NodeAddr::new(host, port))
    }
}

impl FromStr for NodeAddr {
    type Err = AddrParseError;

    /// `host:port`, `1.2.3.4:6379`, `[::1]:6379` or `::1:6379`.
    fn from_str(s: &str) -> Result<NodeAddr, AddrParseError> {
        NodeAddr::parse_bytes(s.as_bytes(), false)
    }
}

impl std::hash::Hash for Parts {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.digest);
    }
}

/// FNV-1a of the host's bytes and the port's: equal addresses, equal
/// digests (a map's hasher mixes it further).
fn digest(host: &str, port: u16) -> u64 {
    host.bytes()
        .chain(port.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

impl fmt::Debug for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeAddr")
            .field("host", &self.host())
            .field("port", &self.port())
            .finish()
    }
}

impl fmt::Display for NodeAddr {
    /// `host:port`, with an IPv6 host bracketed so the result parses back
    /// and can be handed to a socket address parser.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (host, port) = (self.host(), self.port());
        if host.contains(':') {
            write!(f, "[{host}]:{port}")
        } else {
            write!(f, "{host}:{port}")
        }
    }
}

/// Decimal digits only (`u16::from_str` would accept a `+`), at most five of
/// them, and not port 0, which no node can listen on.
fn parse_port(digits: &[u8]) -> Option<u16> {
    if digits.is_empty() || digits.len() > 5 {
        return None;
    }
    let mut port: u32 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        port = port * 10 + u32::from(b - b'0');
    }
    u16::try_from(port).ok().filter(|&p| p != 0)
}

/// Anything printable except brackets: names, IPv4, IPv6 (with `:` and `%`
/// zone ids), and non-ASCII UTF-8 names, which are checked as UTF-8 after.
fn is_host_byte(b: u8) -> bool {
    match b {
        b'[' | b']' => false,
        0x21..=0x7e => true,
        0x80..=0xff => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<NodeAddr, AddrParseError> {
        s.parse()
    }

    #[test]
    fn parses_common_forms() {
        assert_eq!(
            parse("127.0.0.1:6379"),
            Ok(NodeAddr::new("127.0.0.1", 6379))
        );
        assert_eq!(
            parse("redis-0.svc.local:7000"),
            Ok(NodeAddr::new("redis-0.svc.local", 7000))
        );
        assert_eq!(parse("[::1]:6379"), Ok(NodeAddr::new("::1", 6379)));
        assert_eq!(parse("::1:6379"), Ok(NodeAddr::new("::1", 6379)));
        assert_eq!(
            parse("fe80::1%eth0:6379"),
            Ok(NodeAddr::new("fe80::1%eth0", 6379))
        );
        assert_eq!(parse("h:65535"), Ok(NodeAddr::new("h", 65535)));
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(parse("localhost"), Err(AddrParseError::MissingPort));
        assert_eq!(parse(""), Err(AddrParseError::MissingPort));
        assert_eq!(parse(":6379"), Err(AddrParseError::EmptyHost));
        assert_eq!(parse("[]:6379"), Err(AddrParseError::EmptyHost));
        assert_eq!(parse("h:"), Err(AddrParseError::BadPort));
        assert_eq!(parse("h:0"), Err(AddrParseError::BadPort));
        assert_eq!(parse("h:65536"), Err(AddrParseError::BadPort));
        assert_eq!(parse("h:+80"), Err(AddrParseError::BadPort));
        assert_eq!(parse("h:123456"), Err(AddrParseError::BadPort));
        assert_eq!(parse("h: 80"), Err(AddrParseError::BadPort));
        assert_eq!(parse("a b:80"), Err(AddrParseError::BadHost));
        assert_eq!(parse("[::1:80"), Err(AddrParseError::BadHost));
        assert_eq!(parse("::1]:80"), Err(AddrParseError::BadHost));
        assert_eq!(parse("h\n:80"), Err(AddrParseError::BadHost));
        assert_eq!(
            NodeAddr::parse_bytes(b"\xff\xfe:80", false),
            Err(AddrParseError::BadHost)
        );
    }

    #[test]
    fn empty_host_form() {
        let addr = NodeAddr::parse_bytes(b":6381", true);
        assert_eq!(addr, Ok(NodeAddr::new("", 6381)));
        let origin = NodeAddr::new("10.0.0.5", 7000);
        let resolved = addr.map(|a| a.or_host_of(&origin));
        assert_eq!(resolved, Ok(NodeAddr::new("10.0.0.5", 6381)));
        let full = NodeAddr::new("10.0.0.9", 6379);
        assert_eq!(full.or_host_of(&origin), full);
    }

    #[test]
    fn displays_brackets_for_ipv6() {
        assert_eq!(NodeAddr::new("::1", 6379).to_string(), "[::1]:6379");
        assert_eq!(NodeAddr::new("10.1.2.3", 7001).to_string(), "10.1.2.3:7001");
        assert_eq!(NodeAddr::new("redis.local", 1).to_string(), "redis.local:1");
    }

    #[test]
    fn orders_by_host_then_port() {
        let mut addrs = vec![
            NodeAddr::new("b", 1),
            NodeAddr::new("a", 2),
            NodeAddr::new("a", 1),
        ];
        addrs.sort();
        assert_eq!(
            addrs,
            vec![
                NodeAddr::new("a", 1),
                NodeAddr::new("a", 2),
                NodeAddr::new("b", 1)
            ]
        );
    }

    #[test]
    fn addresses_made_apart_are_one_key() {
        use std::collections::HashMap;
        use std::hash::BuildHasher;
        let hasher = std::hash::RandomState::new();
        let a = NodeAddr::new("10.0.0.1", 7000);
        let b: NodeAddr = "10.0.0.1:7000".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(hasher.hash_one(&a), hasher.hash_one(&b));
        let mut map = HashMap::new();
        map.insert(a, 1);
        for (addr, n) in [
            (NodeAddr::new("10.0.0.1", 7001), 2),
            (NodeAddr::new("10.0.0.10", 7000), 3),
            (NodeAddr::new("10.0.0.1", 7000), 4),
        ] {
            map.insert(addr, n);
        }
        assert_eq!(map.len(), 3);
        assert_eq!(map.get(&b), Some(&4));
    }
}
