//! A client's state: what the commands can change on its connection
//! (protocol, name, authentication, CLIENT REPLY), its per-feature parts
//! (transaction, subscriptions, key tracking, push queue), and the entry of its reply
//! queue. The session owns it; the command handlers read and change it.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use orthrus_resp::Protocol;

use crate::config::ReadFrom;
use crate::node::Done;
use crate::node::client::Dialect;
use crate::node::forward::Remote;
use crate::observe::clients::{ClientAddr, ClientEntry, Closer, Identity, Names, Signal};

pub mod invalidation;
pub mod monitor;
pub mod push;
pub mod subscriptions;
pub mod tracking;
pub mod transaction;

pub use push::PushSink;
use subscriptions::PubSub;
use transaction::{Multi, Watch};

/// The reply to one request, in request order.
pub enum Pending {
    /// Known already (local commands, errors).
    Ready(Bytes),
    /// Known already; the connection closes after it (QUIT, protocol error).
    Last(Bytes),
    /// Coming from the cluster. Not boxed: an entry is moved into the
    /// client's queue once and out once, and a box cost an allocation per
    /// request.
    Remote(Remote),
    /// Coming from several requests, or needing more than one step; its
    /// requests were sent when it was read.
    Future(Pin<Box<dyn Future<Output = Done>>>),
    /// A command that starts only when every earlier reply is written
    /// (it needs a connection of its own, or a state that earlier commands
    /// change): the requests after it wait until it is done, so that a
    /// client's commands still take effect in order.
    Deferred(Pin<Box<dyn Future<Output = Done>>>),
}

impl Pending {
    pub fn deferred(future: Pin<Box<dyn Future<Output = Done>>>) -> Pending {
        Pending::Deferred(future)
    }
}

/// Per-connection state the commands can change.
pub struct Client {
    /// Its addresses, when it connected, and the signal that wakes its
    /// task when orthrus closes it or shuts down; shared with its entry in
    /// the client registry.
    pub identity: Arc<Identity>,
    pub proto: Protocol,
    /// The database it selected (SELECT), 0 until then and after RESET.
    pub db: u32,
    /// CLIENT SETNAME and SETINFO; `None` until the client names itself.
    pub names: Option<Box<Names>>,
    /// Between MULTI and EXEC.
    pub multi: Option<Box<Multi>>,
    /// After WATCH, until EXEC, DISCARD, UNWATCH or RESET.
    pub watch: Option<Box<Watch>>,
    /// MONITOR streams (with `admin.passthrough`).
    pub monitor: Option<Box<monitor::Monitor>>,
    /// Subscriptions, from the first (S|P)SUBSCRIBE on.
    pub pubsub: Option<PubSub>,
    /// CLIENT TRACKING ON, until OFF or RESET.
    pub tracking: Option<Box<tracking::Tracking>>,
    /// False until AUTH succeeds when a client password is configured.
    pub authenticated: bool,
    /// CLIENT REPLY.
    pub reply: ReplyMode,
    /// Where its keyed reads go once it sent READONLY (replicas) or
    /// READWRITE (the master); until then (`None`), where the `read_from`
    /// of each key's upstream says.
    pub read_from: Option<ReadFrom>,
    /// Its writes sent and not yet answered, while the reply cache is on
    /// (`cache::serve`): until they are, its reads go to the nodes, after
    /// its writes, never to an entry another client's fill may have read
    /// before them.
    pub writes_unanswered: u32,
}

/// CLIENT REPLY ON|OFF|SKIP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// The next command's reply is not sent.
    SkipNext,
}

// === impl Client ===

impl Client {
    pub fn names_mut(&mut self) -> &mut Names {
        self.names.get_or_insert_with(Box::default)
    }

    /// How its requests' connections to the nodes are set up: its
    /// protocol and its database.
    #[inline]
    pub fn dialect(&self) -> Dialect {
        Dialect {
            proto: self.proto,
            db: self.db,
        }
    }

    /// What closes this client from anywhere.
    pub fn closer(&self) -> Closer {
        Closer {
            identity: self.identity.clone(),
        }
    }

    /// The client's id (CLIENT ID).
    pub fn id(&self) -> u64 {
        self.identity.id
    }

    pub fn signal(&self) -> &Signal {
        &self.identity.signal
    }

    pub fn peer(&self) -> &ClientAddr {
        &self.identity.peer
    }

    /// orthrus's own address on the connection, for TCP.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.identity.local
    }

    /// What CLIENT LIST shows of this client now.
    pub fn entry(&self, worker: usize) -> ClientEntry {
        ClientEntry {
            identity: self.identity.clone(),
            names: self.names.clone(),
            proto: self.proto,
            db: self.db,
            subscribed: self.pubsub.as_ref().is_some_and(PubSub::active),
            worker: u32::try_from(worker).unwrap_or(u32::MAX),
        }
    }
}
