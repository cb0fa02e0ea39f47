//! The upstreams as the workers ask about them: each one's slot map, what
//! its nodes' connections take instead of `[backend]`, its deadlines and
//! reads, and the masters, latency and load of all of them.

use std::sync::Arc;
use std::time::Duration;

use orthrus_cluster::{NodeAddr, SlotMap};

use super::{Shared, Swapped};
use crate::config::{Mode, ReadFrom, UpstreamSettings};
use crate::observe::latency::Summary;
use crate::observe::load::MasterLoad;
use crate::route::prefix::{DEFAULT_UPSTREAM, Place, Upstream};

/// What a connection to one node is opened with.
pub struct NodeSettings {
    pub backend: crate::config::BackendConfig,
    pub tls: Option<crate::config::BackendTls>,
}

/// A named upstream: what it is and its current slot map.
pub struct NamedUpstream {
    pub settings: UpstreamSettings,
    pub slots: Swapped<SlotMap>,
}

impl Shared {
    /// Named upstream `upstream` (`None` for the default one, 0).
    #[inline]
    pub fn named(&self, upstream: Upstream) -> Option<&NamedUpstream> {
        self.upstreams.get(usize::from(upstream).checked_sub(1)?)
    }

    /// The slot map of `upstream` (the default one's for a number no
    /// upstream has).
    pub fn slots_of(&self, upstream: Upstream) -> &Swapped<SlotMap> {
        self.named(upstream).map_or(&self.slots, |u| &u.slots)
    }

    /// Points one slot at a new owner at once (after MOVED); the full
    /// refresh that follows confirms it.
    pub fn patch_slot(&self, place: Place, addr: &NodeAddr) {
        let slots = self.slots_of(place.upstream);
        if slots.load().master(place.slot) == Some(addr) {
            return;
        }
        // Cached replies came from the old owner's tracking.
        self.cache_all_stale();
        slots.rcu(|map| {
            let mut map = SlotMap::clone(map);
            map.set_master(place.slot, addr.clone());
            map
        });
    }

    /// What a connection to `addr` is opened with: the live `[backend]`
    /// settings and TLS, or, for a node (or seed) of a named upstream,
    /// with its own credentials, timeouts and TLS where it has them.
    pub fn node_settings(&self, addr: &NodeAddr) -> NodeSettings {
        let mut backend = self.live.load().backend.clone();
        let tls = self.tls.load();
        let Some((at, upstream)) = self.upstream_at(addr) else {
            return NodeSettings {
                backend,
                tls: tls.backend.clone(),
            };
        };
        upstream.settings.apply(&mut backend);
        NodeSettings {
            backend,
            tls: tls.named.get(at).cloned().flatten(),
        }
    }

    /// The named upstream `addr` is a node (or a seed) of, with its
    /// index; none for the default upstream's nodes.
    fn upstream_at(&self, addr: &NodeAddr) -> Option<(usize, &NamedUpstream)> {
        self.upstreams
            .iter()
            .enumerate()
            .find(|(_, u)| u.settings.seeds.contains(addr) || u.slots.load().node(addr).is_some())
    }

    /// A request's deadline in `upstream`: its own `request_timeout_ms`,
    /// or `backend.request_timeout_ms`.
    #[inline]
    pub fn request_timeout_of(&self, upstream: Upstream) -> Duration {
        match self
            .named(upstream)
            .and_then(|u| u.settings.request_timeout_ms)
        {
            Some(ms) => Duration::from_millis(ms),
            None => self.request_timeout(),
        }
    }

    /// [`Shared::request_timeout_of`] the upstream `addr` is a node of.
    pub fn request_timeout_at(&self, addr: &NodeAddr) -> Duration {
        self.request_timeout_of(self.upstream_number(addr))
    }

    /// The setting that gives `upstream`'s request timeout, as errors
    /// name it.
    pub fn request_timeout_setting(&self, upstream: Upstream) -> String {
        match self.named(upstream) {
            Some(u) if u.settings.request_timeout_ms.is_some() => {
                format!("upstreams.{}.request_timeout_ms", u.settings.name)
            }
            _ => "backend.request_timeout_ms".to_owned(),
        }
    }

    /// Where keyed reads of `upstream` go for a client that has not said
    /// (with READONLY or READWRITE).
    #[inline]
    pub fn read_from_of(&self, upstream: Upstream) -> ReadFrom {
        self.named(upstream)
            .map_or(self.settings.read_from, |u| u.settings.read_from)
    }

    /// Every upstream's name, mode and current slot map, the default one
    /// first (upstream `n` at `n`).
    pub fn upstream_maps(&self) -> Vec<(&str, Mode, Arc<SlotMap>)> {
        std::iter::once((
            crate::config::DEFAULT_NAME,
            self.settings.mode,
            self.slots.load_full(),
        ))
        .chain(self.upstreams.iter().map(|u| {
            (
                u.settings.name.as_str(),
                u.settings.mode,
                u.slots.load_full(),
            )
        }))
        .collect()
    }

    /// The number of the upstream called `name` (`default` included).
    pub fn upstream_named(&self, name: &str) -> Option<Upstream> {
        if name == crate::config::DEFAULT_NAME {
            return Some(DEFAULT_UPSTREAM);
        }
        let at = self
            .upstreams
            .iter()
            .position(|u| u.settings.name == name)?;
        Upstream::try_from(at.checked_add(1)?).ok()
    }

    /// The keyed load so far of every upstream's masters, each with its
    /// upstream's name, the default upstream's first.
    pub fn load_by_master(&self) -> Vec<(&str, MasterLoad)> {
        let maps = self.upstream_maps();
        let only: Vec<_> = maps.iter().map(|(_, _, map)| Arc::clone(map)).collect();
        self.load
            .by_master(&only)
            .into_iter()
            .map(|m| (maps.get(m.upstream).map_or("", |u| u.0), m))
            .collect()
    }

    /// Each upstream's round trips on the shared connections, in the
    /// order of [`Shared::upstream_maps`]: the histograms of its nodes,
    /// departed ones included, added up.
    pub fn latency_by_upstream(&self) -> Vec<Summary> {
        self.node_latency
            .by_upstream(self.upstreams.len().saturating_add(1))
    }

    /// The number of the upstream `addr` is a node (or a seed) of: 0 for
    /// the default one's.
    pub fn upstream_number(&self, addr: &NodeAddr) -> Upstream {
        self.upstream_at(addr)
            .and_then(|(at, _)| Upstream::try_from(at.saturating_add(1)).ok())
            .unwrap_or(DEFAULT_UPSTREAM)
    }

    /// Every master of every upstream that owns a slot, for commands sent
    /// to each (the default upstream's first, each upstream's sorted);
    /// none while an upstream's topology is not known.
    pub fn masters(&self) -> Vec<NodeAddr> {
        let mut masters = self.slots.load().masters();
        if masters.is_empty() {
            return masters;
        }
        for upstream in self.upstreams.iter() {
            let theirs = upstream.slots.load().masters();
            if theirs.is_empty() {
                return Vec::new();
            }
            for addr in theirs {
                if !masters.contains(&addr) {
                    masters.push(addr);
                }
            }
        }
        masters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn a_named_upstreams_nodes_take_its_own_settings_and_the_rest_the_defaults() {
        let text = r#"
            seeds = ["127.0.0.1:1"]
            [backend]
            password = "a-secret"
            [upstreams.b]
            seeds = ["127.0.0.1:2"]
            password = "b-secret"
            connect_timeout_ms = 200
            request_timeout_ms = 300
            read_from = "replica"
            [upstreams.c]
            seeds = ["127.0.0.1:3"]
        "#;
        let config: Config = toml::from_str(text).expect("parse");
        let shared = Shared::new(config.validate().expect("valid"));
        let at = |port: u16| shared.node_settings(&NodeAddr::new("127.0.0.1", port));
        let (a, b, c) = (at(1), at(2), at(3));
        assert_eq!(a.backend.password.as_deref(), Some("a-secret"));
        assert_eq!(b.backend.password.as_deref(), Some("b-secret"));
        assert_eq!(c.backend.password.as_deref(), Some("a-secret"));
        assert_eq!(
            [
                a.backend.connect_timeout_ms,
                b.backend.connect_timeout_ms,
                c.backend.connect_timeout_ms
            ],
            [1000, 200, 1000]
        );
        assert_eq!(
            [1, 2, 3].map(|port| shared.request_timeout_at(&NodeAddr::new("127.0.0.1", port))),
            [5000, 300, 5000].map(Duration::from_millis)
        );
        assert_eq!(
            [0, 1, 2].map(|n| shared.request_timeout_of(n)),
            [5000, 300, 5000].map(Duration::from_millis)
        );
        assert_eq!(
            shared.request_timeout_setting(1),
            "upstreams.b.request_timeout_ms"
        );
        assert_eq!(
            shared.request_timeout_setting(2),
            "backend.request_timeout_ms"
        );
        assert_eq!(
            [0, 1, 2].map(|n| shared.read_from_of(n)),
            [ReadFrom::Master, ReadFrom::Replica, ReadFrom::Master]
        );
    }
}
