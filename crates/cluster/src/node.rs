//! What the proxy knows about one cluster node.

use std::sync::Arc;

use crate::NodeAddr;

/// A node's replication role.
#[derive(Copy, Clone, Eq, PartialEq, Debug)]
pub enum Role {
    Master,
    Replica,
}

/// A node's state as the answering node saw it (CLUSTER SHARDS `health`).
/// CLUSTER SLOTS does not say, so nodes learned from it are `Unknown`.
#[derive(Copy, Clone, Eq, PartialEq, Debug)]
pub enum Health {
    Online,
    /// Flagged as failing by the cluster (`fail`, documented as `failed`).
    Failed,
    /// Still loading its data set (a replica after a full sync, or a restart).
    Loading,
    Unknown,
}

/// One known node.
#[derive(Clone, Debug)]
pub struct Node {
    /// The 40-character cluster node id, when the reply carried it.
    pub id: Option<Arc<str>>,
    pub addr: NodeAddr,
    pub role: Role,
    pub health: Health,
    /// The availability zone it announces (Valkey's `availability-zone`,
    /// in CLUSTER SHARDS), if any.
    pub zone: Option<Arc<str>>,
}

// === impl Health ===

impl Health {
    pub const ALL: [Health; 4] = [
        Health::Online,
        Health::Failed,
        Health::Loading,
        Health::Unknown,
    ];

    /// The name shown to operators (CLUSTER SHARDS's, lower case).
    pub fn name(self) -> &'static str {
        match self {
            Health::Online => "online",
            Health::Failed => "failed",
            Health::Loading => "loading",
            Health::Unknown => "unknown",
        }
    }

    /// Whether a request may be sent to a node in this state. Unknown counts
    /// as usable: a node is not shunned on missing information.
    pub fn is_usable(self) -> bool {
        matches!(self, Health::Online | Health::Unknown)
    }

    /// The CLUSTER SHARDS spelling. Redis 7.0 writes `fail` where its
    /// documentation says `failed`; both are accepted. Anything else is
    /// `Unknown` rather than an error, so a future state does not break
    /// discovery.
    pub(crate) fn from_wire(s: &[u8]) -> Health {
        match s {
            b"online" => Health::Online,
            b"failed" | b"fail" => Health::Failed,
            b"loading" => Health::Loading,
            _ => Health::Unknown,
        }
    }
}

// === impl Role ===

impl Role {
    pub const ALL: [Role; 2] = [Role::Master, Role::Replica];

    /// The name shown to operators.
    pub fn name(self) -> &'static str {
        match self {
            Role::Master => "master",
            Role::Replica => "replica",
        }
    }

    /// The CLUSTER SHARDS spelling (`slave` accepted for older forks).
    pub(crate) fn from_wire(s: &[u8]) -> Option<Role> {
        match s {
            b"master" | b"primary" => Some(Role::Master),
            b"replica" | b"slave" => Some(Role::Replica),
            _ => None,
        }
    }
}
