//! The registry of orthrus's own clients, over every worker, for CLIENT
//! LIST, CLIENT INFO and CLIENT KILL. A client's entry is written when it
//! connects, when a local command changes what it looks like (SETNAME,
//! HELLO, SETINFO, RESET) and removed when it leaves: never per request.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dashmap::DashMap;
use orthrus_resp::Protocol;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::task::Waker;

/// What never changes about a client, the signal that closes it and the
/// count of its dedicated connections: made
/// once when it connects, one allocation shared by its task, its registry
/// entry and whoever may close it (its push queue).
#[derive(Debug)]
pub struct Identity {
    pub id: u64,
    pub peer: ClientAddr,
    pub local: Option<SocketAddr>,
    pub created: Instant,
    pub signal: Signal,
    /// Dedicated connections the client holds (a WATCH, a blocking
    /// command), within `client.max_dedicated`; kept here rather than in
    /// the session task, whose size every idle connection pays.
    pub dedicated: AtomicUsize,
}

/// What CLIENT LIST shows of one client, and how to close it. Small: every
/// connection has one in the registry's table.
#[derive(Clone, Debug)]
pub struct ClientEntry {
    pub identity: Arc<Identity>,
    /// `None` until the client names itself (most never do).
    pub names: Option<Box<Names>>,
    pub proto: Protocol,
    /// Its SELECTed database.
    pub db: u32,
    pub subscribed: bool,
    pub worker: u32,
}

/// Every connected client.
#[derive(Default)]
pub struct Registry {
    clients: DashMap<u64, ClientEntry>,
    pause: Pause,
    /// Invalidations for clients that others name in CLIENT TRACKING
    /// REDIRECT, until their task takes them (written only for those).
    mail: DashMap<u64, Vec<Invalidation>>,
    /// Clients CLIENT KILL closed whose task has not ended yet: Redis
    /// frees a killed client before it answers, so INFO does not count
    /// them ([`Registry::killed`]).
    killed: AtomicI64,
}

/// An invalidation of client-side caches: the keys, or `None` for every
/// key (a flush, or a tracking connection lost).
pub type Invalidation = Option<Vec<Bytes>>;

/// CLIENT PAUSE: until when (ms after `since`; 0 = not paused) and whether
/// reads wait too.
struct Pause {
    since: Instant,
    until_ms: AtomicU64,
    all: AtomicBool,
}

/// Where a client connected from: an address, or orthrus's Unix socket
/// (shown as Redis shows it: `/path/to.sock:0`).
#[derive(Clone, Debug)]
pub enum ClientAddr {
    Tcp(SocketAddr),
    Unix(Arc<Path>),
}

impl std::fmt::Display for ClientAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientAddr::Tcp(addr) => addr.fmt(f),
            ClientAddr::Unix(path) => write!(f, "{}:0", path.display()),
        }
    }
}

/// What a client calls itself: CLIENT SETNAME (or HELLO SETNAME) and
/// CLIENT SETINFO.
#[derive(Clone, Debug, Default)]
pub struct Names {
    pub name: Option<Bytes>,
    pub lib_name: Option<Bytes>,
    pub lib_ver: Option<Bytes>,
    /// The user it logged in as, when not the default user.
    pub user: Option<Bytes>,
    /// That user, when its rules limit what it may do (`None`: everything
    /// is allowed, nothing is checked). Kept here, in the box written only
    /// at AUTH and SETNAME, so that a client that never logs in as such a
    /// user carries no field for it.
    pub acl: Option<std::sync::Arc<crate::acl::User>>,
}

/// Tells a client's task, from any thread, that orthrus closes it or is
/// shutting down: raising a bit wakes the task, which reads the bits each
/// time it runs (one atomic load, no lock).
#[derive(Debug, Default)]
pub struct Signal {
    bits: AtomicU8,
    waker: Mutex<Option<Waker>>,
}

/// Closes a client from anywhere: its task wakes and ends, dropping what
/// it had in flight (a blocked command's connection closes with it).
#[derive(Clone, Debug)]
pub struct Closer {
    pub identity: Arc<Identity>,
}

/// Which clients CLIENT KILL closes.
#[derive(Default)]
struct Filter {
    id: Option<u64>,
    addr: Option<String>,
    laddr: Option<String>,
    kind: Option<ClientType>,
    user: Option<Vec<u8>>,
    skip_me: bool,
}

/// The command a client is running now, for its own CLIENT LIST/INFO line
/// (orthrus does not record other clients' commands: that would write the
/// registry on every request).
pub struct Current<'a> {
    pub id: u64,
    /// `client|list`, `client|info`.
    pub cmd: &'a str,
    /// The request's size, as Redis's `qbuf` shows it while it runs.
    pub qbuf: usize,
}

/// CLIENT LIST/KILL TYPE.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ClientType {
    Normal,
    PubSub,
    /// master, replica: none connects to orthrus.
    Replication,
}

impl ClientType {
    fn of(e: &ClientEntry) -> ClientType {
        if e.subscribed {
            ClientType::PubSub
        } else {
            ClientType::Normal
        }
    }
}

fn client_type(value: &[u8]) -> Result<ClientType, String> {
    match value.to_ascii_lowercase().as_slice() {
        b"normal" => Ok(ClientType::Normal),
        b"master" | b"replica" | b"slave" => Ok(ClientType::Replication),
        b"pubsub" => Ok(ClientType::PubSub),
        _ => Err(format!(
            "ERR Unknown client type '{}'",
            String::from_utf8_lossy(value)
        )),
    }
}

// === impl Signal ===

impl Signal {
    /// orthrus closes the client.
    pub const CLOSE: u8 = 1;
    /// Read nothing more, finish what is queued, then close: orthrus is
    /// shutting down, or the client killed itself (Redis answers that
    /// CLIENT KILL before closing).
    pub const DRAIN: u8 = 2;
    /// Invalidations another client redirects to this one are waiting in
    /// the registry ([`Registry::take_invalidations`]).
    pub const MAIL: u8 = 4;
    /// CLIENT KILL closed it (counted in [`Registry::killed`] until its
    /// task ends).
    pub const KILLED: u8 = 8;

    pub fn raise(&self, bit: u8) {
        self.bits.fetch_or(bit, Ordering::AcqRel);
        let waker = self.waker.lock().ok().and_then(|w| w.clone());
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Raises `bit` without waking the task; whether it was down.
    fn mark(&self, bit: u8) -> bool {
        self.bits.fetch_or(bit, Ordering::AcqRel) & bit == 0
    }

    /// Wakes the task without raising anything (it looks again at what it
    /// waits for: CLIENT UNPAUSE).
    pub fn wake(&self) {
        let waker = self.waker.lock().ok().and_then(|w| w.clone());
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    pub fn bits(&self) -> u8 {
        self.bits.load(Ordering::Acquire)
    }

    /// Lowers `bit` (the task has seen to it).
    pub fn clear(&self, bit: u8) {
        self.bits.fetch_and(!bit, Ordering::AcqRel);
    }

    /// The task to wake on every raise from now on; the session registers
    /// again whenever it is polled with a waker that would wake another.
    pub fn register(&self, waker: &Waker) {
        if let Ok(mut slot) = self.waker.lock() {
            if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
                *slot = Some(waker.clone());
            }
        }
    }
}

// === impl Pause ===

impl Default for Pause {
    fn default() -> Self {
        Pause {
            since: Instant::now(),
            until_ms: AtomicU64::new(0),
            all: AtomicBool::new(false),
        }
    }
}

impl Pause {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn active(&self) -> bool {
        let until = self.until_ms.load(Ordering::Acquire);
        until != 0 && self.now_ms() < until
    }
}

// === impl Closer ===

impl Closer {
    pub fn close(&self) {
        self.identity.signal.raise(Signal::CLOSE);
    }

    /// Closes the client once the replies already queued, the current
    /// one included, are written.
    pub fn close_after_reply(&self) {
        self.identity.signal.raise(Signal::DRAIN);
    }

    pub fn is_closed(&self) -> bool {
        self.identity.signal.bits() & Signal::CLOSE != 0
    }
}

// === impl Registry ===

impl Registry {
    /// CLIENT PAUSE for `ms` milliseconds, of every command (`all`) or of
    /// writes only. As in Redis, a pause already in force is extended, not
    /// shortened, and never turns from ALL to WRITE.
    pub fn pause(&self, ms: u64, all: bool) {
        let p = &self.pause;
        let until = p.now_ms().saturating_add(ms).max(1);
        if p.active() {
            p.until_ms.fetch_max(until, Ordering::AcqRel);
            p.all.fetch_or(all, Ordering::AcqRel);
        } else {
            p.all.store(all, Ordering::Release);
            p.until_ms.store(until, Ordering::Release);
        }
    }

    /// CLIENT UNPAUSE: every held client goes on at once.
    pub fn unpause(&self) {
        self.pause.until_ms.store(0, Ordering::Release);
        self.pause.all.store(false, Ordering::Release);
        for e in self.clients.iter() {
            e.identity.signal.wake();
        }
    }

    /// Until when a command waits (`write`: it may write), if it must.
    pub fn paused_until(&self, write: bool) -> Option<Instant> {
        let p = &self.pause;
        let until = p.until_ms.load(Ordering::Acquire);
        if until == 0 || !(write || p.all.load(Ordering::Acquire)) {
            return None;
        }
        (p.now_ms() < until).then(|| p.since + Duration::from_millis(until))
    }

    /// Whether any pause is in force (one load: the request path asks).
    pub fn pausing(&self) -> bool {
        self.pause.until_ms.load(Ordering::Relaxed) != 0
    }

    /// Tells every client's task that orthrus is shutting down.
    pub fn drain_all(&self) {
        for e in self.clients.iter() {
            e.identity.signal.raise(Signal::DRAIN);
        }
    }

    /// Records a client as it is now (on connect and after a change).
    pub fn update(&self, entry: ClientEntry) {
        self.clients.insert(entry.identity.id, entry);
    }

    /// The name a client gave itself (CLIENT SETNAME, HELLO SETNAME).
    pub fn name(&self, id: u64) -> Option<Bytes> {
        self.clients
            .get(&id)
            .and_then(|e| e.names.as_ref().and_then(|n| n.name.clone()))
    }

    pub fn remove(&self, id: u64) {
        if let Some((_, entry)) = self.clients.remove(&id) {
            let bits = entry.identity.signal.bits();
            if bits & Signal::MAIL != 0 {
                self.mail.remove(&id);
            }
            if bits & Signal::KILLED != 0 {
                self.killed.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Whether client `id` is connected.
    pub fn contains(&self, id: u64) -> bool {
        self.clients.contains_key(&id)
    }

    /// Hands an invalidation to client `id` (CLIENT TRACKING REDIRECT)
    /// and wakes it; false if no such client is connected.
    pub fn send_invalidation(&self, id: u64, keys: Invalidation) -> bool {
        let Some(identity) = self.clients.get(&id).map(|e| e.identity.clone()) else {
            return false;
        };
        self.mail.entry(id).or_default().push(keys);
        identity.signal.raise(Signal::MAIL);
        if !self.clients.contains_key(&id) {
            // It left meanwhile and may have missed the bit.
            self.mail.remove(&id);
            return false;
        }
        true
    }

    /// The invalidations waiting for client `id`, oldest first.
    pub fn take_invalidations(&self, id: u64) -> Vec<Invalidation> {
        self.mail.remove(&id).map(|(_, v)| v).unwrap_or_default()
    }

    /// CLIENT LIST [TYPE type] [ID id ...]: one line per client, oldest
    /// first. `me` is the asking client, shown running this command.
    pub fn list(&self, args: &[&[u8]], me: &Current<'_>) -> Result<String, String> {
        let mut ids: Option<Vec<u64>> = None;
        let mut kind: Option<ClientType> = None;
        match args {
            [] => {}
            [key, value] if key.eq_ignore_ascii_case(b"type") => {
                kind = Some(client_type(value)?);
            }
            [key, rest @ ..] if key.eq_ignore_ascii_case(b"id") && !rest.is_empty() => {
                let parsed: Option<Vec<u64>> = rest
                    .iter()
                    .map(|v| {
                        std::str::from_utf8(v)
                            .ok()?
                            .parse()
                            .ok()
                            .filter(|&id| id > 0)
                    })
                    .collect();
                ids = Some(parsed.ok_or("ERR Invalid client ID")?);
            }
            _ => return Err("ERR syntax error".into()),
        }
        let mut entries: Vec<ClientEntry> = self
            .clients
            .iter()
            .filter(|e| ids.as_ref().is_none_or(|ids| ids.contains(&e.identity.id)))
            .filter(|e| kind.is_none_or(|k| k == ClientType::of(e)))
            .map(|e| e.value().clone())
            .collect();
        entries.sort_by_key(|e| e.identity.id);
        Ok(entries
            .iter()
            .map(|e| e.line((e.identity.id == me.id).then_some(me)))
            .collect())
    }

    /// CLIENT KILL, both forms. `me` is the asking client. Returns the
    /// reply: `+OK`/error for the old `CLIENT KILL addr:port` form, the
    /// number of clients closed for the filter form.
    /// `user_exists` says whether a user name is configured.
    pub fn kill(
        &self,
        args: &[&[u8]],
        me: u64,
        user_exists: impl Fn(&[u8]) -> bool,
    ) -> Result<KillReply, &'static str> {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        if let [addr] = args {
            let addr = text(addr);
            let found = self
                .clients
                .iter()
                .find(|e| e.identity.peer.to_string() == addr);
            return match found {
                Some(e) => {
                    self.close(&e.closer(), e.identity.id == me);
                    Ok(KillReply::Ok)
                }
                None => Err("ERR No such client"),
            };
        }
        let mut filter = Filter {
            skip_me: true,
            ..Filter::default()
        };
        for pair in args.chunks(2) {
            let [key, value] = pair else {
                return Err("ERR syntax error");
            };
            match key.to_ascii_lowercase().as_slice() {
                b"id" => {
                    let id = std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .filter(|&id: &u64| id > 0);
                    filter.id = Some(id.ok_or("ERR client-id should be greater than 0")?);
                }
                b"addr" => filter.addr = Some(text(value)),
                b"laddr" => filter.laddr = Some(text(value)),
                b"type" => {
                    let kind = client_type(value).map_err(|_| "ERR Unknown client type")?;
                    filter.kind = Some(kind);
                }
                b"user" => {
                    if !user_exists(value) {
                        return Err("ERR No such user");
                    }
                    filter.user = Some(value.to_vec());
                }
                b"skipme" => {
                    filter.skip_me = match value.to_ascii_lowercase().as_slice() {
                        b"yes" => true,
                        b"no" => false,
                        _ => return Err("ERR syntax error"),
                    }
                }
                _ => return Err("ERR syntax error"),
            }
        }
        let mut killed = 0;
        for e in self.clients.iter() {
            let who = &e.identity;
            let matches = filter.id.is_none_or(|id| id == who.id)
                && filter
                    .addr
                    .as_ref()
                    .is_none_or(|a| *a == who.peer.to_string())
                && filter
                    .laddr
                    .as_ref()
                    .is_none_or(|a| who.local.is_some_and(|l| *a == l.to_string()))
                && filter.kind.is_none_or(|k| k == ClientType::of(e.value()))
                && filter.user.as_deref().is_none_or(|u| u == e.user())
                && !(filter.skip_me && who.id == me);
            if matches {
                self.close(&e.closer(), who.id == me);
                killed += 1;
            }
        }
        Ok(KillReply::Count(killed))
    }
}

impl Registry {
    /// Closes every client logged in as `user` (its rules changed or it
    /// was removed); returns how many.
    pub fn close_user(&self, user: &[u8]) -> usize {
        let mut closed = 0;
        for e in self.clients.iter() {
            if e.user() == user {
                e.closer().close();
                closed += 1;
            }
        }
        closed
    }
}

impl Registry {
    /// A client killing itself still gets the reply, as in Redis; another
    /// is counted as gone at once ([`Registry::killed`]).
    fn close(&self, closer: &Closer, itself: bool) {
        if itself {
            closer.close_after_reply();
            return;
        }
        // The caller holds the client's entry: its removal, which counts
        // it out again, waits until this is done.
        if closer.identity.signal.mark(Signal::KILLED) {
            self.killed.fetch_add(1, Ordering::AcqRel);
        }
        closer.close();
    }

    /// Clients CLIENT KILL closed whose task has not ended yet (it ends at
    /// its worker's next turn): not connected any more, as Redis sees it.
    pub fn killed(&self) -> i64 {
        self.killed.load(Ordering::Acquire)
    }
}

/// What CLIENT KILL answers.
pub enum KillReply {
    Ok,
    Count(i64),
}

impl ClientEntry {
    /// The user it logged in as (`default` unless named).
    pub fn user(&self) -> &[u8] {
        self.names
            .as_ref()
            .and_then(|n| n.user.as_deref())
            .unwrap_or(b"default")
    }

    pub fn closer(&self) -> Closer {
        Closer {
            identity: self.identity.clone(),
        }
    }

    /// One line in the format of Redis's CLIENT LIST and CLIENT INFO;
    /// `now`: the client is the one asking, running that command.
    pub fn line(&self, now: Option<&Current<'_>>) -> String {
        let show = |b: &Option<Bytes>| {
            b.as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default()
                .into_owned()
        };
        let who = &self.identity;
        let laddr = who.local.map(|a| a.to_string()).unwrap_or_default();
        let names = self.names.as_deref().cloned().unwrap_or_default();
        let flags = if self.subscribed { "P" } else { "N" };
        format!(
            "id={} addr={} laddr={} fd=-1 name={} age={} idle=0 flags={flags} db={} sub=0 psub=0 ssub=0 multi=-1 qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user={} redir=-1 resp={} lib-name={} lib-ver={} worker={}\n",
            who.id,
            who.peer,
            laddr,
            show(&names.name),
            who.created.elapsed().as_secs(),
            self.db,
            now.map_or(0, |c| c.qbuf),
            now.map_or("NULL", |c| c.cmd),
            String::from_utf8_lossy(self.user()),
            self.proto.version(),
            show(&names.lib_name),
            show(&names.lib_ver),
            self.worker,
        )
    }
}
