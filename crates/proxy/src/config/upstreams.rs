//! `[upstreams.NAME]` and `[[routes]]`: clusters (or standalone servers)
//! besides the default one, and which keys go to them by prefix.

use std::collections::BTreeMap;

use orthrus_cluster::NodeAddr;
use serde::{Deserialize, Serialize};

use super::{BackendConfig, BackendTlsConfig, ConfigError, Mode, ReadFrom, invalid, seed_list};
use crate::route::prefix::{DEFAULT_UPSTREAM, Mirror, Prefixes, RouteRule, Upstream};

/// The name the top-level `seeds` go by in routes.
pub const DEFAULT_NAME: &str = "default";

/// `[upstreams.NAME]`: one more cluster, or one standalone redis-server.
/// What it does not set it takes from the default upstream: credentials
/// and timeouts from `[backend]`, TLS from `[backend.tls]`, where reads
/// go from `cluster.read_from`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// Nodes to discover it from, `host:port` each.
    pub seeds: Vec<String>,
    /// `cluster` or `standalone`, as `cluster.mode` for the default one.
    pub mode: String,
    /// Its nodes' user and password, instead of `backend.username` and
    /// `backend.password`.
    pub username: Option<String>,
    pub password: Option<String>,
    /// Where its keyed reads go, `master` or `replica`, instead of
    /// `cluster.read_from` (a client's READONLY or READWRITE still wins).
    pub read_from: Option<String>,
    /// Instead of `backend.connect_timeout_ms`, for its nodes.
    pub connect_timeout_ms: Option<u64>,
    /// Instead of `backend.request_timeout_ms`, for requests to it and
    /// its nodes' connections.
    pub request_timeout_ms: Option<u64>,
    /// `[upstreams.NAME.tls]`: TLS to its nodes, with the fields of
    /// `[backend.tls]`, instead of `[backend.tls]` (whole: a field it
    /// leaves out takes its default, not `[backend.tls]`'s).
    pub tls: Option<BackendTlsConfig>,
}

/// `[[routes]]`: the keys starting with `prefix` go to `upstream`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouteConfig {
    pub prefix: String,
    /// An upstream's name, or `default`.
    pub upstream: String,
    /// Keys go to the upstream without the prefix.
    pub remove_prefix: bool,
    /// Upstreams that get a copy of this route's requests, fire and
    /// forget (their replies and errors are counted, never returned).
    pub mirror: Vec<String>,
    /// Copy only the commands that may write.
    pub mirror_writes_only: bool,
    /// The share of requests copied, 0.0 to 1.0; all when unset.
    pub mirror_fraction: Option<f64>,
}

/// A named upstream, checked.
#[derive(Clone, Debug)]
pub struct UpstreamSettings {
    pub name: String,
    pub seeds: Vec<NodeAddr>,
    pub mode: Mode,
    /// Its own credentials, `(username, password)`, if it has them.
    pub credentials: Option<(Option<String>, String)>,
    /// Where its keyed reads go (its own, or `cluster.read_from`).
    pub read_from: ReadFrom,
    /// Its own `connect_timeout_ms` and `request_timeout_ms`, if set.
    pub connect_timeout_ms: Option<u64>,
    pub request_timeout_ms: Option<u64>,
}

impl UpstreamSettings {
    /// `[backend]` as this upstream's nodes take it: with its own
    /// credentials and timeouts where it has them.
    pub fn apply(&self, backend: &mut BackendConfig) {
        if let Some((username, password)) = &self.credentials {
            backend.username.clone_from(username);
            backend.password = Some(password.clone());
        }
        if let Some(ms) = self.connect_timeout_ms {
            backend.connect_timeout_ms = ms;
        }
        if let Some(ms) = self.request_timeout_ms {
            backend.request_timeout_ms = ms;
        }
    }
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            seeds: Vec::new(),
            mode: "cluster".to_owned(),
            username: None,
            password: None,
            read_from: None,
            connect_timeout_ms: None,
            request_timeout_ms: None,
            tls: None,
        }
    }
}

/// Checks the named upstreams and the routes: the upstreams in name
/// order (numbered from 1, reads going where `read_from` says unless they
/// say otherwise), and the routes by prefix.
pub(super) fn validate(
    upstreams: &BTreeMap<String, UpstreamConfig>,
    routes: &[RouteConfig],
    (default_seeds, read_from): (&[NodeAddr], ReadFrom),
) -> Result<(Vec<UpstreamSettings>, Prefixes), ConfigError> {
    if upstreams.len() >= usize::from(Upstream::MAX) {
        return Err(invalid(
            "upstreams",
            format!("at most {} named upstreams", Upstream::MAX - 1),
        ));
    }
    let mut named = Vec::with_capacity(upstreams.len());
    for (name, upstream) in upstreams {
        if name == DEFAULT_NAME {
            return Err(invalid(
                "upstreams",
                "\"default\" is the top-level seeds: give the upstream another name".to_owned(),
            ));
        }
        let seeds = seed_list("upstreams", &format!("{name}: seed "), &upstream.seeds)?;
        if seeds.is_empty() {
            return Err(invalid("upstreams", format!("{name}: no seeds")));
        }
        let mode = Mode::parse(&upstream.mode).map_err(|_| {
            invalid(
                "upstreams",
                format!(
                    "{name}: mode {:?} is not one of cluster, standalone",
                    upstream.mode
                ),
            )
        })?;
        if mode == Mode::Standalone && seeds.len() > 1 {
            return Err(invalid(
                "upstreams",
                format!("{name}: standalone takes one seed, not {}", seeds.len()),
            ));
        }
        let credentials = match (&upstream.username, &upstream.password) {
            (None, None) => None,
            (username, Some(password)) => Some((username.clone(), password.clone())),
            (Some(_), None) => {
                return Err(invalid(
                    "upstreams",
                    format!("{name}: username needs password too"),
                ));
            }
        };
        for (field, ms) in [
            ("connect_timeout_ms", upstream.connect_timeout_ms),
            ("request_timeout_ms", upstream.request_timeout_ms),
        ] {
            if ms == Some(0) {
                return Err(invalid(
                    format!("upstreams.{name}.{field}"),
                    "must be greater than 0".to_owned(),
                ));
            }
        }
        // A node is told apart by its address alone: in two upstreams it
        // would take one's credentials, TLS and counts for both.
        let taken = std::iter::once((DEFAULT_NAME, default_seeds)).chain(
            named
                .iter()
                .map(|u: &UpstreamSettings| (u.name.as_str(), &u.seeds[..])),
        );
        for (other, their) in taken {
            if let Some(seed) = seeds.iter().find(|s| their.contains(s)) {
                return Err(invalid(
                    "upstreams",
                    format!(
                        "{name}: seed {seed} is also a seed of {other:?}: an upstream is a cluster of its own"
                    ),
                ));
            }
        }
        let read_from = match &upstream.read_from {
            Some(value) => ReadFrom::parse_as(format!("upstreams.{name}.read_from"), value)?,
            None => read_from,
        };
        named.push(UpstreamSettings {
            name: name.clone(),
            seeds,
            mode,
            credentials,
            read_from,
            connect_timeout_ms: upstream.connect_timeout_ms,
            request_timeout_ms: upstream.request_timeout_ms,
        });
    }
    let number = |name: &str| -> Option<Upstream> {
        if name == DEFAULT_NAME {
            return Some(DEFAULT_UPSTREAM);
        }
        let at = named.iter().position(|u| u.name == name)?;
        Upstream::try_from(at.checked_add(1)?).ok()
    };
    let mut seen = std::collections::HashSet::new();
    let mut prefixes = Vec::with_capacity(routes.len());
    for route in routes {
        let prefix = &route.prefix;
        if prefix.is_empty() {
            return Err(invalid(
                "routes",
                "a route needs a prefix (keys no route takes go to the default upstream)"
                    .to_owned(),
            ));
        }
        if !seen.insert(prefix.as_str()) {
            return Err(invalid(
                "routes",
                format!("prefix {prefix:?} is routed twice"),
            ));
        }
        let Some(upstream) = number(&route.upstream) else {
            return Err(invalid(
                "routes",
                format!(
                    "prefix {prefix:?}: no upstream named {:?} (define [upstreams.{}] or use \"default\")",
                    route.upstream, route.upstream
                ),
            ));
        };
        let mirror = mirror(route, upstream, &number)?;
        prefixes.push(RouteRule {
            prefix: prefix.as_bytes().to_vec(),
            upstream,
            mirror,
            strip: route.remove_prefix,
        });
    }
    Ok((named, Prefixes::with_rules(prefixes)))
}

/// A route's mirroring, checked: known upstreams, none its primary, a
/// fraction from 0 to 1.
fn mirror(
    route: &RouteConfig,
    primary: Upstream,
    number: &dyn Fn(&str) -> Option<Upstream>,
) -> Result<Option<Mirror>, ConfigError> {
    let prefix = &route.prefix;
    if route.mirror.is_empty() {
        if route.mirror_writes_only || route.mirror_fraction.is_some() {
            return Err(invalid(
                "routes",
                format!("prefix {prefix:?}: mirror_writes_only and mirror_fraction need mirror"),
            ));
        }
        return Ok(None);
    }
    let mut to = Vec::with_capacity(route.mirror.len());
    for name in &route.mirror {
        let Some(upstream) = number(name) else {
            return Err(invalid(
                "routes",
                format!("prefix {prefix:?}: no upstream named {name:?} to mirror to"),
            ));
        };
        if upstream == primary {
            return Err(invalid(
                "routes",
                format!("prefix {prefix:?}: mirror {name:?} is the route's own upstream"),
            ));
        }
        if to.contains(&upstream) {
            return Err(invalid(
                "routes",
                format!("prefix {prefix:?}: mirror {name:?} is named twice"),
            ));
        }
        to.push(upstream);
    }
    let fraction = route.mirror_fraction.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&fraction) {
        return Err(invalid(
            "routes",
            format!("prefix {prefix:?}: mirror_fraction {fraction} is not between 0 and 1"),
        ));
    }
    // Out of 2^32: a fraction of 1 copies every request.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "the fraction is within 0..=1, so the product is within 0..=2^32"
    )]
    let share = (fraction * 4_294_967_296.0) as u64;
    Ok(Some(Mirror {
        to,
        writes_only: route.mirror_writes_only,
        share,
    }))
}
