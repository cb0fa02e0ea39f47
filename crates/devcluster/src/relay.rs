//! A fault relay: a TCP relay on a free loopback port in front of one node
//! that, on command, delays, throttles, black-holes, resets, cuts or
//! refuses what passes through it, and heals. This machine's kernel has no
//! `tc netem`; a relay is how a test gets these faults on one node's link.
//!
//! Every connection accepted is one connection to the node and two
//! threads, one per direction (`pump`). A standing [`Fault`] is read by
//! every pump at every step, so a change reaches connections already open;
//! [`Relay::reset`] and [`Relay::cut_after`] act once on the connections
//! open when they are called. [`Cluster::relay`](crate::Cluster::relay)
//! puts one in front of a cluster node and makes the node announce it.
//!
//! - `pump`: one direction of one connection.

use std::io::{self, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::DevError;

mod pump;

/// How long a relay thread waits at most before it looks at its orders
/// again: a fault set, healed or ordered takes effect within it.
const POLL: Duration = Duration::from_millis(5);
/// How long the relay waits for the node to accept a connection.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A standing fault: applies to every connection, open or new, until
/// another is set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// Everything forwarded as it comes.
    #[default]
    Healed,
    /// What the node sends back is held `by`, plus a random part of
    /// `jitter`, before it is passed on (bytes keep their order): every
    /// round trip through the relay takes that much longer.
    Delay { by: Duration, jitter: Duration },
    /// At most `bytes_per_sec` bytes a second, each way, on each
    /// connection.
    Throttle { bytes_per_sec: u64 },
    /// Nothing is forwarded either way and nothing is closed: no RST, no
    /// FIN. Bytes wait in the relay and the kernels' buffers and flow again
    /// when healed. New connections are accepted (the kernel completes the
    /// TCP handshake of a listening socket whatever the program does) and
    /// held the same way.
    BlackHole,
    /// Connections open keep working; each new one is accepted, counted
    /// and reset at once (RST) before a byte passes. The client's connect
    /// succeeds, its first read or write fails with "connection reset".
    Refuse,
}

/// How [`Relay::cut_after`] ends a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// A FIN: the client reads end of stream.
    Close,
    /// An RST (`SO_LINGER` 0): the client's read fails, "connection reset".
    Reset,
}

/// A relay from a free loopback port to one address. Dropping it closes
/// every connection through it and joins its threads.
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    inner: Arc<Inner>,
    acceptor: Option<JoinHandle<()>>,
}

/// What the relay's threads share.
#[derive(Debug)]
struct Inner {
    target: SocketAddr,
    fault: Mutex<Fault>,
    stop: AtomicBool,
    accepted: AtomicU64,
    links: Mutex<Vec<Arc<Link>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// State of the generator that draws jitter (xorshift).
    random: AtomicU64,
}

/// One relayed connection.
#[derive(Debug)]
struct Link {
    /// The client's socket, to set `SO_LINGER` 0 on before a reset.
    client: TcpStream,
    /// [`RUNNING`], or how it is to end.
    end: AtomicU8,
    /// Bytes still to pass towards the client before a cut; `u64::MAX`:
    /// no cut ordered.
    cut_budget: AtomicU64,
    cut_reset: AtomicBool,
    /// Threads of this link that have not finished.
    pumps: AtomicU8,
}

const RUNNING: u8 = 0;
const END_CLOSE: u8 = 1;
const END_RESET: u8 = 2;
const NO_CUT: u64 = u64::MAX;

/// Which way a pump carries bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    ToNode,
    ToClient,
}

// === impl Relay ===

impl Relay {
    /// Starts relaying from a free loopback port to `target`, healed.
    pub fn start(target: SocketAddr) -> Result<Relay, DevError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let inner = Arc::new(Inner {
            target,
            fault: Mutex::new(Fault::Healed),
            stop: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            links: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            random: AtomicU64::new(
                0x9E37_79B9_7F4A_7C15 ^ u64::from(seed) ^ u64::from(addr.port()),
            ),
        });
        let acceptor = {
            let inner = inner.clone();
            thread::Builder::new()
                .name(format!("relay-{}", addr.port()))
                .spawn(move || accept_loop(&listener, &inner))?
        };
        Ok(Relay {
            addr,
            inner,
            acceptor: Some(acceptor),
        })
    }

    /// Where clients connect: `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Where it relays to.
    pub fn target(&self) -> SocketAddr {
        self.inner.target
    }

    /// Sets the standing fault (replacing the one before).
    pub fn set(&self, fault: Fault) {
        *lock(&self.inner.fault) = fault;
    }

    /// Back to forwarding everything: [`Fault::Healed`]. Cuts ordered with
    /// [`Relay::cut_after`] and not yet reached are called off too.
    pub fn heal(&self) {
        self.set(Fault::Healed);
        for link in lock(&self.inner.links).iter() {
            link.cut_budget.store(NO_CUT, Ordering::Relaxed);
        }
    }

    /// The standing fault.
    pub fn fault(&self) -> Fault {
        *lock(&self.inner.fault)
    }

    /// Resets (RST) every connection open now, both its sides; later
    /// connections are not affected.
    pub fn reset(&self) {
        for link in lock(&self.inner.links).iter() {
            link.finish(END_RESET);
        }
    }

    /// Every connection open now passes at most `bytes` more towards the
    /// client, then ends as `how` says (a reply cut in the middle); later
    /// connections are not affected.
    pub fn cut_after(&self, bytes: u64, how: Cut) {
        for link in lock(&self.inner.links).iter() {
            link.cut_reset.store(how == Cut::Reset, Ordering::Relaxed);
            link.cut_budget
                .store(bytes.min(NO_CUT - 1), Ordering::Relaxed);
        }
    }

    /// Connection attempts accepted since the start, refused ones included.
    pub fn accepted(&self) -> u64 {
        self.inner.accepted.load(Ordering::Relaxed)
    }

    /// Connections relayed now (accepted and not yet ended).
    pub fn open_connections(&self) -> usize {
        lock(&self.inner.links).len()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        // Wakes the acceptor from `accept`; it sees `stop` and returns.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let threads = std::mem::take(&mut *lock(&self.inner.threads));
        for t in threads {
            let _ = t.join();
        }
    }
}

// === impl Inner ===

impl Inner {
    fn fault(&self) -> Fault {
        *lock(&self.fault)
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// A random duration in `0..=max` (xorshift64; good enough for jitter).
    fn jitter(&self, max: Duration) -> Duration {
        if max.is_zero() {
            return Duration::ZERO;
        }
        let mut x = self.random.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.random.store(x, Ordering::Relaxed);
        let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(x % nanos.saturating_add(1))
    }
}

// === impl Link ===

impl Link {
    fn ended(&self) -> u8 {
        self.end.load(Ordering::Relaxed)
    }

    /// Orders the link to end (the first order wins).
    fn finish(&self, how: u8) {
        let _ = self
            .end
            .compare_exchange(RUNNING, how, Ordering::Relaxed, Ordering::Relaxed);
    }
}

fn accept_loop(listener: &TcpListener, inner: &Arc<Inner>) {
    for client in listener.incoming() {
        if inner.stopped() {
            return;
        }
        let Ok(client) = client else { continue };
        inner.accepted.fetch_add(1, Ordering::Relaxed);
        if inner.fault() == Fault::Refuse {
            reset_on_close(&client);
            continue;
        }
        let Ok(node) = TcpStream::connect_timeout(&inner.target, UPSTREAM_CONNECT_TIMEOUT) else {
            reset_on_close(&client);
            continue;
        };
        if let Err(e) = start_link(inner, client, node) {
            eprintln!("relay to {}: cannot relay a connection: {e}", inner.target);
        }
    }
}

/// Starts the two pumps of a new connection.
fn start_link(inner: &Arc<Inner>, client: TcpStream, node: TcpStream) -> io::Result<()> {
    for s in [&client, &node] {
        s.set_nodelay(true)?;
        s.set_write_timeout(Some(POLL))?;
    }
    let link = Arc::new(Link {
        client: client.try_clone()?,
        end: AtomicU8::new(RUNNING),
        cut_budget: AtomicU64::new(NO_CUT),
        cut_reset: AtomicBool::new(false),
        pumps: AtomicU8::new(2),
    });
    let to_node = (client.try_clone()?, node.try_clone()?);
    let to_client = (node, client);
    lock(&inner.links).push(link.clone());
    let mut threads = lock(&inner.threads);
    threads.retain(|t| !t.is_finished());
    for (dir, (from, to)) in [
        (Direction::ToNode, to_node),
        (Direction::ToClient, to_client),
    ] {
        let (inner, link) = (inner.clone(), link.clone());
        threads.push(
            thread::Builder::new()
                .name("relay-pump".into())
                .spawn(move || {
                    pump::run(&inner, &link, from, to, dir);
                    close_side(&inner, &link);
                })?,
        );
    }
    Ok(())
}

/// A pump of `link` has finished: the last one closes the connection as
/// it was ordered to end and forgets it.
fn close_side(inner: &Inner, link: &Arc<Link>) {
    link.finish(END_CLOSE);
    if link.pumps.fetch_sub(1, Ordering::AcqRel) != 1 {
        return;
    }
    if link.ended() == END_RESET {
        reset_on_close(&link.client);
    } else {
        let _ = link.client.shutdown(Shutdown::Both);
    }
    lock(&inner.links).retain(|l| !Arc::ptr_eq(l, link));
}

/// Makes the close of `stream` an RST (`SO_LINGER` 0): it is sent when the
/// last copy of the descriptor is dropped.
fn reset_on_close(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

/// Writes all of `buf`, looking at the stop orders between partial writes
/// (a peer that does not read must not pin the thread).
fn write_fully(to: &mut TcpStream, buf: &[u8], stop: impl Fn() -> bool) -> io::Result<()> {
    let mut done = 0;
    while let Some(rest) = buf.get(done..).filter(|r| !r.is_empty()) {
        if stop() {
            return Err(io::Error::other("relay stopping"));
        }
        match to.write(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A poisoned lock only means a relay thread panicked; its data stays
/// usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
