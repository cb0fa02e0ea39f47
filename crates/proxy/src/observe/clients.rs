//! The registry of orthrus's own clients, over every worker, for CLIENT
//! LIST, CLIENT INFO and CLIENT KILL. A client's entry is written when it
//! connects, when a local command changes what it looks like (SETNAME,
//! HELLO, SETINFO, RESET) and removed when it leaves: never per request.

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use dashmap::DashMap;
use orthrus_resp::Protocol;
use tokio_util::sync::CancellationToken;

/// What CLIENT LIST shows of one client, and how to close it.
#[derive(Clone, Debug)]
pub struct ClientEntry {
    pub id: u64,
    pub peer: SocketAddr,
    pub local: Option<SocketAddr>,
    pub created: Instant,
    pub name: Option<Bytes>,
    pub lib_name: Option<Bytes>,
    pub lib_ver: Option<Bytes>,
    pub proto: Protocol,
    pub subscribed: bool,
    pub worker: usize,
    pub gone: CancellationToken,
}

/// Every connected client.
#[derive(Default)]
pub struct Registry {
    clients: DashMap<u64, ClientEntry>,
}

/// Which clients CLIENT KILL closes.
#[derive(Default)]
struct Filter {
    id: Option<u64>,
    addr: Option<String>,
    laddr: Option<String>,
    skip_me: bool,
}

impl Registry {
    /// Records a client as it is now (on connect and after a change).
    pub fn update(&self, entry: ClientEntry) {
        self.clients.insert(entry.id, entry);
    }

    /// The name a client gave itself (CLIENT SETNAME, HELLO SETNAME).
    pub fn name(&self, id: u64) -> Option<Bytes> {
        self.clients.get(&id).and_then(|e| e.name.clone())
    }

    pub fn remove(&self, id: u64) {
        self.clients.remove(&id);
    }

    /// CLIENT LIST: one line per client, oldest first.
    pub fn list(&self) -> String {
        let mut entries: Vec<ClientEntry> =
            self.clients.iter().map(|e| e.value().clone()).collect();
        entries.sort_by_key(|e| e.id);
        entries.iter().map(ClientEntry::line).collect()
    }

    /// CLIENT KILL, both forms. `me` is the asking client. Returns the
    /// reply: `+OK`/error for the old `CLIENT KILL addr:port` form, the
    /// number of clients closed for the filter form.
    pub fn kill(&self, args: &[&[u8]], me: u64) -> Result<KillReply, &'static str> {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        if let [addr] = args {
            let addr = text(addr);
            let found = self
                .clients
                .iter()
                .find(|e| e.peer.to_string() == addr)
                .map(|e| e.gone.clone());
            return match found {
                Some(gone) => {
                    gone.cancel();
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
                    let id = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
                    filter.id = Some(id.ok_or("ERR client-id should be greater than 0")?);
                }
                b"addr" => filter.addr = Some(text(value)),
                b"laddr" => filter.laddr = Some(text(value)),
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
            let matches = filter.id.is_none_or(|id| id == e.id)
                && filter
                    .addr
                    .as_ref()
                    .is_none_or(|a| *a == e.peer.to_string())
                && filter
                    .laddr
                    .as_ref()
                    .is_none_or(|a| e.local.is_some_and(|l| *a == l.to_string()))
                && !(filter.skip_me && e.id == me);
            if matches {
                e.gone.cancel();
                killed += 1;
            }
        }
        Ok(KillReply::Count(killed))
    }
}

/// What CLIENT KILL answers.
pub enum KillReply {
    Ok,
    Count(i64),
}

impl ClientEntry {
    /// One line in the format of Redis's CLIENT LIST and CLIENT INFO.
    pub fn line(&self) -> String {
        let show = |b: &Option<Bytes>| {
            b.as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default()
                .into_owned()
        };
        let laddr = self.local.map(|a| a.to_string()).unwrap_or_default();
        let flags = if self.subscribed { "P" } else { "N" };
        format!(
            "id={} addr={} laddr={} fd=-1 name={} age={} idle=0 flags={flags} db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=client user=default redir=-1 resp={} lib-name={} lib-ver={} worker={}\n",
            self.id,
            self.peer,
            laddr,
            show(&self.name),
            self.created.elapsed().as_secs(),
            self.proto.version(),
            show(&self.lib_name),
            show(&self.lib_ver),
            self.worker,
        )
    }
}
