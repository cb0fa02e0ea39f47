//! A client's transaction state: the commands queued since MULTI, and the
//! WATCH it holds. The commands themselves are run by `cmd::transaction`.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use bytes::Bytes;
use orthrus_resp::Request;

use crate::node::conn::ReplyRx;
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
    /// Once a keyed command named the transaction's node: how its queued
    /// commands are checked there (`cmd::transaction::probe`).
    pub probe: Option<Probe>,
}

/// A WATCH in progress: its slot and, once the WATCH reached the node, the
/// dedicated connection that carries it.
pub struct Watch {
    pub slot: Place,
    pub lease: Rc<RefCell<Option<Lease>>>,
}

/// A key of the transaction's slot, whether the node refused one of its
/// commands at queue time (set when a probe's answer is read, after the
/// command was queued), and the probe last sent.
pub struct Probe {
    pub key: Bytes,
    pub refused: Rc<Cell<bool>>,
    /// The commands queued until its answer is read (a pipelined burst)
    /// share it.
    pub last: Option<Rc<ProbeSent>>,
}

/// A probe on its way: its reply slot, then, once read, the node's answer
/// (empty when none came).
pub struct ProbeSent {
    pub rx: RefCell<Option<ReplyRx>>,
    pub answer: RefCell<Option<Bytes>>,
}
