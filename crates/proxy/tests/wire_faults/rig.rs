//! What every wire-fault scenario runs on: a cluster with a fault relay in
//! front of master 0 (which announces it, so orthrus connects through it),
//! orthrus with a short request deadline, and clients that keep writing
//! and reading unique values and check every reply against its request.

#![allow(unreachable_pub)]

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::{Proxy, encode, read_reply};
use orthrus_cluster::Slot;
use orthrus_devcluster::{Cluster, ClusterSpec, Relay};

/// orthrus's `backend.request_timeout_ms` in these scenarios: short, so a
/// black hole shows its timeouts in a second rather than five.
pub const DEADLINE: Duration = Duration::from_millis(1000);
/// orthrus's worker threads: each has its own connection to the node.
pub const THREADS: usize = 2;
/// No client runs longer than this, whatever happens to the test.
const CLIENT_CAP: Duration = Duration::from_secs(40);
/// A client's own read timeout: a reply orthrus never sends fails the test.
const CLIENT_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between a steady client's requests, to keep the load bounded on
/// a shared 2-core machine.
const STEADY_PAUSE: Duration = Duration::from_millis(2);

pub struct Rig {
    pub cluster: Cluster,
    pub relay: Relay,
    pub proxy: Proxy,
    /// A hash tag whose slot master 0 (behind the relay) owns.
    pub faulted: String,
    /// Hash tags owned by the other masters, one each.
    pub others: Vec<String>,
    pub stop: Arc<AtomicBool>,
}

/// Which side of the fault a request was on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Its slot is master 0's, reached through the relay.
    Faulted,
    Other,
}

/// One request and what came of it.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub side: Side,
    pub write: bool,
    pub sent: Instant,
    pub took: Duration,
    /// The reply as text (an error starts with `-`).
    pub reply: String,
}

pub type Client = JoinHandle<Result<Vec<Outcome>, String>>;

// === impl Rig ===

impl Rig {
    /// 3 masters (`replicas` each), a relay in front of master 0, orthrus
    /// with a request deadline of [`DEADLINE`].
    pub fn start(replicas: usize) -> Rig {
        Rig::with_deadline(replicas, DEADLINE)
    }

    /// [`Rig::start`] with another request deadline.
    pub fn with_deadline(replicas: usize, deadline: Duration) -> Rig {
        let cluster = Cluster::start(ClusterSpec::new(3, replicas)).expect("start cluster");
        let relay = cluster.relay(0).expect("relay in front of master 0");
        let deadline = deadline.as_millis().to_string();
        let threads = THREADS.to_string();
        let proxy = Proxy::spawn(
            &cluster.seeds(),
            &["--threads", &threads],
            &[("ORTHRUS_BACKEND__REQUEST_TIMEOUT_MS", &deadline)],
        );
        proxy.wait_ready(Duration::from_secs(20));
        let faulted = tag_owned_by(&cluster, 0);
        let others = vec![tag_owned_by(&cluster, 1), tag_owned_by(&cluster, 2)];
        Rig {
            cluster,
            relay,
            proxy,
            faulted,
            others,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The relay's address: how orthrus names master 0 in its errors.
    pub fn node_name(&self) -> String {
        self.relay.addr().to_string()
    }

    /// `n` steady clients on the faulted master and `n` on each other one.
    pub fn steady_load(&self, n: usize) -> Vec<Client> {
        let mut clients = Vec::new();
        for id in 0..n {
            clients.push(self.steady(&self.faulted, Side::Faulted, id));
            for (k, tag) in self.others.iter().enumerate() {
                clients.push(self.steady(tag, Side::Other, 100 * (k + 1) + id));
            }
        }
        clients
    }

    /// A client that sends `SET key unique-value` then `GET key`, one
    /// request at a time, until stopped.
    pub fn steady(&self, tag: &str, side: Side, id: usize) -> Client {
        let (addr, stop, tag) = (self.proxy.addr, self.stop.clone(), tag.to_owned());
        std::thread::spawn(move || steady_client(addr, &tag, side, id, &stop))
    }

    /// A client that pipelines batches of `batch` × (`SET k v`, `GET k`,
    /// `RPUSH log i`) until stopped; see [`batch_client`].
    pub fn batches(&self, tag: &str, side: Side, id: usize, batch: usize) -> Client {
        let (addr, stop, tag) = (self.proxy.addr, self.stop.clone(), tag.to_owned());
        std::thread::spawn(move || batch_client(addr, &tag, side, id, batch, &stop))
    }

    /// Stops the clients and gathers what they saw; a client that saw a
    /// reply that is not its request's fails the test.
    pub fn finish(&self, clients: Vec<Client>) -> Vec<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for c in clients {
            match c.join().expect("client thread") {
                Ok(outcomes) => all.extend(outcomes),
                Err(e) => panic!("{e}"),
            }
        }
        all
    }
}

/// A hash tag whose slot node `node` owns.
fn tag_owned_by(cluster: &Cluster, node: usize) -> String {
    (0..1000)
        .map(|n| format!("w{n}"))
        .find(|tag| {
            cluster
                .master_of_slot(Slot::for_key(tag.as_bytes()).get())
                .ok()
                == Some(node)
        })
        .expect("a tag for every master")
}

fn connect(addr: SocketAddr) -> (TcpStream, BufReader<TcpStream>) {
    let s = TcpStream::connect(addr).expect("connect to orthrus");
    s.set_read_timeout(Some(CLIENT_READ_TIMEOUT))
        .expect("timeout");
    let rd = BufReader::new(s.try_clone().expect("clone"));
    (s, rd)
}

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// `$len\r\nvalue\r\n`.
fn bulk(value: &str) -> String {
    format!("${}\r\n{value}\r\n", value.len())
}

fn steady_client(
    addr: SocketAddr,
    tag: &str,
    side: Side,
    id: usize,
    stop: &AtomicBool,
) -> Result<Vec<Outcome>, String> {
    let (mut s, mut rd) = connect(addr);
    let started = Instant::now();
    let mut out = Vec::new();
    let mut call = |args: &[&str], write: bool| -> Result<String, String> {
        let sent = Instant::now();
        s.write_all(&encode(args))
            .map_err(|e| format!("send: {e}"))?;
        take(&mut rd, &mut out, (side, write, sent))
    };
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) && started.elapsed() < CLIENT_CAP {
        let key = format!("{{{tag}}}:s{id}:{i}");
        let value = format!("v{id}:{i}");
        let set = call(&["SET", &key, &value], true)?;
        let got = call(&["GET", &key], false)?;
        check_set_get(&set, &got, &value).map_err(|e| format!("{key}: {e}"))?;
        i += 1;
        std::thread::sleep(STEADY_PAUSE);
    }
    Ok(out)
}

/// Pipelines batches of (`SET k v`, `GET k`, `RPUSH log i`) with unique
/// `k`, `v` and `i`, and checks each reply against its request: `SET` is
/// `+OK` or an error; `GET` is the value just set, nil only if that `SET`
/// failed, or an error; `RPUSH` counts up, one more than the last it
/// acknowledged at least. When stopped it reads the log back: no element
/// twice (no write sent twice) and every acknowledged one present.
fn batch_client(
    addr: SocketAddr,
    tag: &str,
    side: Side,
    id: usize,
    batch: usize,
    stop: &AtomicBool,
) -> Result<Vec<Outcome>, String> {
    let (mut s, mut rd) = connect(addr);
    let log = format!("{{{tag}}}:log{id}");
    let started = Instant::now();
    let mut out = Vec::new();
    let mut acked = Vec::new();
    let mut last_len = 0i64;
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) && started.elapsed() < CLIENT_CAP {
        let mut frames = Vec::new();
        let first = i;
        for n in first..first + batch as u64 {
            let (key, value) = (format!("{{{tag}}}:b{id}:{n}"), format!("v{id}:{n}"));
            frames.extend(encode(&["SET", &key, &value]));
            frames.extend(encode(&["GET", &key]));
            frames.extend(encode(&["RPUSH", &log, &n.to_string()]));
        }
        let sent = Instant::now();
        s.write_all(&frames).map_err(|e| format!("send: {e}"))?;
        for n in first..first + batch as u64 {
            let mut next = |write: bool| take(&mut rd, &mut out, (side, write, sent));
            let value = format!("v{id}:{n}");
            let set = next(true)?;
            let got = next(false)?;
            let pushed = next(true)?;
            check_set_get(&set, &got, &value).map_err(|e| format!("#{n}: {e}"))?;
            if let Some(len) = pushed.strip_prefix(':') {
                let len: i64 = len
                    .trim()
                    .parse()
                    .map_err(|_| format!("RPUSH #{n}: {pushed:?}"))?;
                if len <= last_len {
                    return Err(format!("RPUSH #{n} answered {len} after {last_len}"));
                }
                last_len = len;
                acked.push(n);
            } else if !pushed.starts_with('-') {
                return Err(format!("RPUSH #{n} answered {pushed:?}"));
            }
        }
        i += batch as u64;
    }
    check_log(addr, &log, &acked)?;
    Ok(out)
}

/// Reads one reply and records it as the outcome of a request of `side`
/// (a write or not) sent at `sent`.
fn take(
    rd: &mut BufReader<TcpStream>,
    out: &mut Vec<Outcome>,
    (side, write, sent): (Side, bool, Instant),
) -> Result<String, String> {
    let reply = text(&read_reply(rd).map_err(|e| format!("reading a reply: {e}"))?);
    out.push(Outcome {
        side,
        write,
        sent,
        took: sent.elapsed(),
        reply: reply.clone(),
    });
    Ok(reply)
}

/// `SET k value` answers `+OK` or an error; `GET k` right after answers
/// `value`, an error, or nil only if the `SET` failed.
fn check_set_get(set: &str, got: &str, value: &str) -> Result<(), String> {
    if set != "+OK\r\n" && !set.starts_with('-') {
        return Err(format!("SET answered {set:?}"));
    }
    let fits =
        got == bulk(value) || got.starts_with('-') || (got == "$-1\r\n" && set.starts_with('-'));
    if !fits {
        return Err(format!(
            "GET answered {got:?}; SET {value:?} answered {set:?}"
        ));
    }
    Ok(())
}

/// The log holds no element twice, in increasing order, and every one
/// acknowledged. (Read with the redis crate: the byte-at-a-time reader of
/// the harness is for short replies.)
fn check_log(addr: SocketAddr, log: &str, acked: &[u64]) -> Result<(), String> {
    let url = format!("redis://{addr}/");
    let mut con = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .map_err(|e| format!("connect: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let items: Vec<u64> = loop {
        match redis::cmd("LRANGE").arg(log).arg(0).arg(-1).query(&mut con) {
            Ok(items) => break items,
            Err(e) if Instant::now() > deadline => return Err(format!("LRANGE {log}: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    if items.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("{log} holds an element twice or out of order"));
    }
    if let Some(missing) = acked.iter().find(|n| items.binary_search(n).is_err()) {
        return Err(format!("{log} lacks the acknowledged element {missing}"));
    }
    Ok(())
}

/// The `p`-th percentile (0..=100) of the times taken.
pub fn percentile(outcomes: &[&Outcome], p: usize) -> Duration {
    let mut took: Vec<Duration> = outcomes.iter().map(|o| o.took).collect();
    took.sort_unstable();
    took.get((took.len().saturating_sub(1)) * p / 100)
        .copied()
        .unwrap_or_default()
}

/// Outcomes of `side` whose request was sent within `from..to`.
pub fn sent_between(all: &[Outcome], side: Side, from: Instant, to: Instant) -> Vec<&Outcome> {
    all.iter()
        .filter(|o| o.side == side && o.sent >= from && o.sent < to)
        .collect()
}

pub fn errors<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>) -> Vec<&'a Outcome> {
    outcomes
        .into_iter()
        .filter(|o| o.reply.starts_with('-'))
        .collect()
}
