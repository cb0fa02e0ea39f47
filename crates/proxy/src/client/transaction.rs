//! A client's transaction state: the commands queued since MULTI, and the
//! WATCH it holds. The commands themselves are run by `cmd::transaction`.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use orthrus_resp::Request;

use crate::node::dedicated::Lease;
use crate::route::prefix::Place;

/// A MULTI in progress.
#[derive(Default)]
pub struct Multi {
    /// Commands for the slot's master, sent inside MULTI ... EXEC.
    pub queued: Vec<Bytes>,
    /// Commands Redis allows inside MULTI that orthrus runs itself at EXEC
    /// (FLUSHALL and the other fan-outs, administrative commands under
    /// `admin.passthrough`), each with how many of `queued` come before it.
    pub side: Vec<(usize, Request)>,
    /// Where the queued commands go: the slot (and upstream) of the
    /// first keyed one, or of the WATCH.
    pub slot: Option<Place>,
    pub aborted: bool,
    /// A queued command may write (CLIENT PAUSE WRITE holds the EXEC).
    pub writes: bool,
    /// Bytes of the commands queued, bounded by
    /// `client.query_buffer_limit`.
    pub bytes: usize,
    /// The EVAL and EVALSHA commands among `queued`, by their place there
    /// (`cmd::script` sends kept bodies and notes them when they ran).
    pub scripts: Vec<(usize, Request)>,
}

/// A WATCH in progress: its slot and, once the WATCH reached the node, the
/// dedicated connection that carries it.
pub struct Watch {
    pub slot: Place,
    pub lease: Rc<RefCell<Option<Lease>>>,
}
