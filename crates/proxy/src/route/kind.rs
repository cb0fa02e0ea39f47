//! How orthrus handles each command (its *kind*), and the built-in table of
//! key positions used until the cluster's own `COMMAND` reply is known.

/// How a command is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Answered by orthrus, never sent to a node.
    Local(Local),
    /// Routed to the master that owns its keys' slot.
    Keyed,
    /// Has no key and means the same on every node.
    AnyNode,
    /// Has no key and goes to the master where orthrus keeps its
    /// subscriptions: PUBLISH, whose count of receivers includes them,
    /// and PUBSUB NUMSUB and NUMPAT, which count them.
    SubscriptionNode,
    /// Sent to every master, the replies merged.
    FanOut(FanOut),
    /// SCAN: one master at a time, the cursor says which.
    Scan,
    /// Blocks until data arrives: on a dedicated connection.
    Blocking,
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH: orthrus runs transactions.
    Transaction,
    /// (S|P)SUBSCRIBE and their UN-forms: orthrus keeps the subscriptions.
    Subscription,
    /// Administrative: refused, or sent on under `admin.passthrough`.
    Admin,
    /// Refused with this reason; the connection stays usable.
    Unsupported(&'static str),
}

/// How the replies of a cross-slot multi-key command are merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merge {
    /// MGET: the values, in the caller's key order.
    Array,
    /// MSET: `+OK` (keys and values alternate).
    Ok,
    /// DEL, UNLINK, EXISTS, TOUCH: the integers summed.
    Sum,
}

/// How the replies of a command sent to every master are merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FanOut {
    /// KEYS: the arrays concatenated.
    Concat,
    /// DBSIZE: the integers summed.
    Sum,
    /// FLUSHALL, SCRIPT FLUSH, ...: `+OK` if every master says so.
    AllOk,
    /// SCRIPT LOAD, FUNCTION LOAD: every master answers the same.
    Same,
    /// SCRIPT EXISTS: 1 where every master has the script.
    And,
    /// RANDOMKEY: the first master that has a key.
    FirstNonNil,
    /// PUBSUB CHANNELS, SHARDCHANNELS: the arrays merged without repeats.
    Union,
    /// PUBSUB SHARDNUMSUB: `[name, count, ...]`, counts summed.
    PairSum,
}

/// The cross-slot merge of a multi-key command that orthrus splits.
pub fn split_merge(name: &str) -> Option<Merge> {
    match name {
        "mget" => Some(Merge::Array),
        "mset" => Some(Merge::Ok),
        "del" | "unlink" | "exists" | "touch" => Some(Merge::Sum),
        _ => None,
    }
}

/// What a command works on, for latency figures: Redis's ACL category for
/// its data type, or for what it does when it has none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    String,
    Bitmap,
    Hash,
    List,
    Set,
    SortedSet,
    Stream,
    Geo,
    HyperLogLog,
    /// Commands about keys whatever their type (DEL, EXPIRE, SCAN, ...).
    Keyspace,
    Scripting,
    Transaction,
    PubSub,
    /// Any command that blocked (BLPOP, XREAD BLOCK, ...): its time is
    /// mostly waiting for data, so it is kept apart from its type's.
    Blocking,
    Connection,
    Server,
    Other,
}

impl Family {
    pub const COUNT: usize = 17;
    pub const ALL: [Family; Family::COUNT] = [
        Family::String,
        Family::Bitmap,
        Family::Hash,
        Family::List,
        Family::Set,
        Family::SortedSet,
        Family::Stream,
        Family::Geo,
        Family::HyperLogLog,
        Family::Keyspace,
        Family::Scripting,
        Family::Transaction,
        Family::PubSub,
        Family::Blocking,
        Family::Connection,
        Family::Server,
        Family::Other,
    ];

    /// The name shown in INFO and in metric labels (Redis's category
    /// names, without the `@`).
    pub fn name(self) -> &'static str {
        match self {
            Family::String => "string",
            Family::Bitmap => "bitmap",
            Family::Hash => "hash",
            Family::List => "list",
            Family::Set => "set",
            Family::SortedSet => "sortedset",
            Family::Stream => "stream",
            Family::Geo => "geo",
            Family::HyperLogLog => "hyperloglog",
            Family::Keyspace => "keyspace",
            Family::Scripting => "scripting",
            Family::Transaction => "transaction",
            Family::PubSub => "pubsub",
            Family::Blocking => "blocking",
            Family::Connection => "connection",
            Family::Server => "server",
            Family::Other => "other",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// The family of a command from its ACL categories as `COMMAND`
    /// reports them (`@write`, `@string`, ...): its data type if it has
    /// one, else what it does.
    pub fn from_categories<'a>(categories: impl IntoIterator<Item = &'a str>) -> Option<Family> {
        const BY_RANK: [(&str, Family); 16] = [
            ("@string", Family::String),
            ("@bitmap", Family::Bitmap),
            ("@hash", Family::Hash),
            ("@list", Family::List),
            ("@set", Family::Set),
            ("@sortedset", Family::SortedSet),
            ("@stream", Family::Stream),
            ("@geo", Family::Geo),
            ("@hyperloglog", Family::HyperLogLog),
            ("@pubsub", Family::PubSub),
            ("@scripting", Family::Scripting),
            ("@transaction", Family::Transaction),
            ("@connection", Family::Connection),
            ("@keyspace", Family::Keyspace),
            ("@admin", Family::Server),
            ("@dangerous", Family::Server),
        ];
        let categories: Vec<&str> = categories.into_iter().collect();
        BY_RANK
            .iter()
            .find(|(name, _)| categories.iter().any(|c| c.eq_ignore_ascii_case(name)))
            .map(|&(_, family)| family)
    }
}

/// The commands orthrus answers itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Local {
    /// ACL WHOAMI, USERS, LIST, CAT, LOG (the others pass through).
    Acl,
    Auth,
    Client,
    Cluster,
    Echo,
    Hello,
    /// HOTKEYS, for the whole cluster.
    HotKeys,
    Info,
    /// ORTHRUS HOTSLOTS.
    Orthrus,
    Ping,
    Quit,
    ReadOnly,
    ReadWrite,
    Reset,
    ResetStat,
    Select,
    SlowLog,
}

/// Key positions in the built-in table.
#[derive(Clone, Copy, Debug)]
pub enum Keys {
    None,
    /// First key index, last key index (negative counts from the end), step.
    Range(i64, i64, usize),
    /// A key count at index `at`, the keys `first` after it (EVAL, ZUNION).
    KeyCount {
        at: i64,
        first: usize,
    },
    /// Every key after a keyword, first half of the rest (XREAD STREAMS).
    AfterKeyword(&'static str),
}

/// One built-in command: name, arity, flags (`r` read-only, `b` blocking,
/// `a` admin) and keys.
#[derive(Debug)]
pub struct Builtin {
    pub name: &'static str,
    pub arity: i32,
    pub flags: &'static str,
    pub keys: Keys,
}

const WAIT: &str =
    "replication acknowledgements are per node, and a client's writes may have gone to several";
/// SCRIPT KILL, FUNCTION KILL (and FUNCTION STATS, listed as any-node)
/// never meet this rule: `cmd::script` takes them first (to every master,
/// over connections of their own).
const SCRIPT_ADMIN: &str = "send it to the node that runs the script";
const BLOCKING: &str = "it blocks but has no key, so orthrus cannot tell which node it is for";
const NOT_THROUGH_PROXY: &str = "it cannot work through a proxy";
/// Why administrative commands are refused (unless `admin.passthrough`).
pub const ADMIN: &str = "administrative commands must be sent to the cluster nodes directly";
const NO_KEY: &str = "it has no key, so orthrus cannot tell which node it is for";

/// Commands whose subcommands orthrus handles differently from each other.
pub const CONTAINERS: &[&str] = &[
    "script", "function", "pubsub", "cluster", "config", "command", "client",
];

/// The kind of the command `name` (lower case; `container|sub` for a
/// subcommand) given the flags the cluster reports for it.
pub fn kind_of(name: &str, blocking: bool, admin: bool, has_keys: bool) -> Kind {
    if let Some(kind) = listed(name) {
        return kind;
    }
    if let Some((container, _)) = name.split_once('|') {
        if let Some(kind @ (Kind::Local(_) | Kind::AnyNode | Kind::Admin | Kind::Unsupported(_))) =
            listed(container)
        {
            return kind;
        }
    }
    if blocking && has_keys {
        Kind::Blocking
    } else if blocking {
        Kind::Unsupported(BLOCKING)
    } else if admin {
        Kind::Admin
    } else if has_keys {
        Kind::Keyed
    } else {
        Kind::Unsupported(NO_KEY)
    }
}

/// orthrus's own decision for a command, when it has one.
fn listed(name: &str) -> Option<Kind> {
    use Local::*;
    let kind = match name {
        "auth" => Kind::Local(Auth),
        "client" => Kind::Local(Client),
        "cluster" => Kind::Local(Cluster),
        "config|resetstat" => Kind::Local(ResetStat),
        "echo" => Kind::Local(Echo),
        "hello" => Kind::Local(Hello),
        "hotkeys" => Kind::Local(HotKeys),
        "orthrus" => Kind::Local(Orthrus),
        "info" => Kind::Local(Info),
        "ping" => Kind::Local(Ping),
        "quit" => Kind::Local(Quit),
        "readonly" => Kind::Local(ReadOnly),
        "readwrite" => Kind::Local(ReadWrite),
        "reset" => Kind::Local(Reset),
        "select" => Kind::Local(Select),
        "slowlog" => Kind::Local(SlowLog),
        // XREAD is flagged blocking, but only blocks with BLOCK: decided per request.
        "xread" | "xreadgroup" => Kind::Keyed,
        "command" | "pubsub" | "time" | "lastsave" | "lolwut" => Kind::AnyNode,
        "multi" | "exec" | "discard" | "watch" | "unwatch" => Kind::Transaction,
        "subscribe" | "psubscribe" | "ssubscribe" | "unsubscribe" | "punsubscribe"
        | "sunsubscribe" => Kind::Subscription,
        "keys" => Kind::FanOut(FanOut::Concat),
        "dbsize" => Kind::FanOut(FanOut::Sum),
        // SWAPDB: a cluster's nodes refuse it in their own words; a
        // standalone upstream's one node swaps.
        "flushdb" | "flushall" | "swapdb" | "script|flush" | "function|flush"
        | "function|delete" | "function|restore" => Kind::FanOut(FanOut::AllOk),
        "randomkey" => Kind::FanOut(FanOut::FirstNonNil),
        "script|load" | "function|load" => Kind::FanOut(FanOut::Same),
        "script|exists" => Kind::FanOut(FanOut::And),
        "scan" => Kind::Scan,
        "pubsub|channels" | "pubsub|shardchannels" => Kind::FanOut(FanOut::Union),
        "pubsub|shardnumsub" => Kind::FanOut(FanOut::PairSum),
        // Where the subscriptions are (other masters hold only copies
        // made for keyspace notifications).
        "publish" | "pubsub|numsub" | "pubsub|numpat" => Kind::SubscriptionNode,
        "function|list" | "function|dump" | "function|stats" | "script|help" | "function|help" => {
            Kind::AnyNode
        }
        "script" | "function" | "script|kill" | "function|kill" => Kind::Unsupported(SCRIPT_ADMIN),
        "wait" | "waitaof" => Kind::Unsupported(WAIT),
        "sync" | "psync" | "replconf" => Kind::Unsupported(NOT_THROUGH_PROXY),
        "acl|whoami" | "acl|users" | "acl|list" | "acl|cat" | "acl|log" => Kind::Local(Acl),
        "debug" | "shutdown" | "config" | "save" | "bgsave" | "bgrewriteaof" | "replicaof"
        | "slaveof" | "failover" | "acl" | "latency" | "module" | "monitor" => Kind::Admin,
        _ => return None,
    };
    Some(kind)
}

const fn b(name: &'static str, arity: i32, flags: &'static str, keys: Keys) -> Builtin {
    Builtin {
        name,
        arity,
        flags,
        keys,
    }
}

const K1: Keys = Keys::Range(1, 1, 1);
const K12: Keys = Keys::Range(1, 2, 1);
const KALL: Keys = Keys::Range(1, -1, 1);
const KPAIRS: Keys = Keys::Range(1, -1, 2);
const KBLOCK: Keys = Keys::Range(1, -2, 1);
const N: Keys = Keys::None;

/// Commands whose key positions orthrus knows without asking the cluster,
/// by family.
#[rustfmt::skip]
pub const BUILTIN: &[(Family, &[Builtin])] = &[
    (Family::Connection, &[
        b("auth", -2, "", N), b("client", -2, "", N), b("echo", 2, "r", N), b("hello", -1, "", N),
        b("ping", -1, "r", N), b("quit", -1, "", N), b("readonly", 1, "", N),
        b("readwrite", 1, "", N), b("reset", 1, "", N), b("select", 2, "", N),
        b("command", -1, "r", N),
    ]),
    (Family::Server, &[
        b("info", -1, "r", N), b("time", 1, "r", N), b("lastsave", 1, "r", N),
        b("lolwut", -1, "r", N), b("wait", 3, "", N), b("monitor", 1, "", N), b("sync", 1, "", N),
        b("psync", -3, "", N), b("cluster", -2, "", N), b("swapdb", 3, "", N),
        b("debug", -2, "", N), b("shutdown", -1, "", N), b("config", -2, "", N),
        b("save", 1, "", N), b("bgsave", -1, "", N), b("bgrewriteaof", 1, "", N),
        b("replicaof", 3, "", N), b("slaveof", 3, "", N), b("failover", -1, "", N),
        b("acl", -2, "", N), b("slowlog", -2, "", N), b("latency", -2, "", N),
        b("module", -2, "", N), b("hotkeys", -2, "ra", N), b("orthrus", -2, "r", N),
    ]),
    (Family::PubSub, &[
        b("publish", 3, "", N), b("pubsub", -2, "r", N), b("subscribe", -2, "", N),
        b("psubscribe", -2, "", N), b("ssubscribe", -2, "", KALL), b("unsubscribe", -1, "", N),
        b("punsubscribe", -1, "", N), b("sunsubscribe", -1, "", N), b("spublish", 3, "", K1),
    ]),
    (Family::Transaction, &[
        b("multi", 1, "", N), b("exec", 1, "", N), b("discard", 1, "", N),
        b("watch", -2, "r", KALL), b("unwatch", 1, "", N),
    ]),
    (Family::Keyspace, &[
        b("keys", 2, "r", N), b("scan", -2, "r", N), b("dbsize", 1, "r", N),
        b("flushdb", -1, "", N), b("flushall", -1, "", N), b("randomkey", 1, "r", N),
        b("move", 3, "", K1), b("del", -2, "", KALL), b("unlink", -2, "", KALL),
        b("exists", -2, "r", KALL), b("touch", -2, "r", KALL), b("expire", -3, "", K1),
        b("pexpire", -3, "", K1), b("expireat", -3, "", K1), b("pexpireat", -3, "", K1),
        b("expiretime", 2, "r", K1), b("pexpiretime", 2, "r", K1), b("ttl", 2, "r", K1),
        b("pttl", 2, "r", K1), b("persist", 2, "", K1), b("type", 2, "r", K1),
        b("rename", 3, "", K12), b("renamenx", 3, "", K12), b("copy", -3, "", K12),
        b("dump", 2, "r", K1), b("restore", -4, "", K1), b("sort", -2, "", K1),
        b("sort_ro", -2, "r", K1), b("object", -2, "r", Keys::Range(2, 2, 1)),
        b("memory", -2, "r", Keys::Range(2, 2, 1)),
    ]),
    (Family::String, &[
        b("get", 2, "r", K1), b("set", -3, "", K1), b("setnx", 3, "", K1), b("setex", 4, "", K1),
        b("psetex", 4, "", K1), b("getset", 3, "", K1), b("getdel", 2, "", K1),
        b("getex", -2, "", K1), b("mget", -2, "r", KALL), b("mset", -3, "", KPAIRS),
        b("msetnx", -3, "", KPAIRS), b("incr", 2, "", K1), b("decr", 2, "", K1),
        b("incrby", 3, "", K1), b("decrby", 3, "", K1), b("incrbyfloat", 3, "", K1),
        b("append", 3, "", K1), b("strlen", 2, "r", K1), b("getrange", 4, "r", K1),
        b("setrange", 4, "", K1), b("substr", 4, "r", K1), b("lcs", -3, "r", K12),
    ]),
    (Family::Bitmap, &[
        b("setbit", 4, "", K1), b("getbit", 3, "r", K1), b("bitcount", -2, "r", K1),
        b("bitpos", -3, "r", K1), b("bitop", -4, "", Keys::Range(2, -1, 1)),
        b("bitfield", -2, "", K1), b("bitfield_ro", -2, "r", K1),
    ]),
    (Family::Hash, &[
        b("hset", -4, "", K1), b("hsetnx", 4, "", K1), b("hget", 3, "r", K1),
        b("hmset", -4, "", K1), b("hmget", -3, "r", K1), b("hdel", -3, "", K1),
        b("hlen", 2, "r", K1), b("hstrlen", 3, "r", K1), b("hexists", 3, "r", K1),
        b("hincrby", 4, "", K1), b("hincrbyfloat", 4, "", K1), b("hkeys", 2, "r", K1),
        b("hvals", 2, "r", K1), b("hgetall", 2, "r", K1), b("hscan", -3, "r", K1),
        b("hrandfield", -2, "r", K1),
    ]),
    (Family::List, &[
        b("lpush", -3, "", K1), b("rpush", -3, "", K1), b("lpushx", -3, "", K1),
        b("rpushx", -3, "", K1), b("lpop", -2, "", K1), b("rpop", -2, "", K1),
        b("llen", 2, "r", K1), b("lindex", 3, "r", K1), b("lset", 4, "", K1),
        b("lrange", 4, "r", K1), b("ltrim", 4, "", K1), b("lrem", 4, "", K1),
        b("linsert", 5, "", K1), b("lpos", -3, "r", K1), b("rpoplpush", 3, "", K12),
        b("lmove", 5, "", K12), b("lmpop", -4, "", Keys::KeyCount { at: 1, first: 1 }),
        b("blpop", -3, "b", KBLOCK), b("brpop", -3, "b", KBLOCK), b("brpoplpush", 4, "b", K12),
        b("blmove", 6, "b", K12), b("blmpop", -5, "b", Keys::KeyCount { at: 2, first: 1 }),
    ]),
    (Family::Set, &[
        b("sadd", -3, "", K1), b("srem", -3, "", K1), b("smembers", 2, "r", K1),
        b("sismember", 3, "r", K1), b("smismember", -3, "r", K1), b("scard", 2, "r", K1),
        b("spop", -2, "", K1), b("srandmember", -2, "r", K1), b("sinter", -2, "r", KALL),
        b("sinterstore", -3, "", KALL), b("sunion", -2, "r", KALL), b("sunionstore", -3, "", KALL),
        b("sdiff", -2, "r", KALL), b("sdiffstore", -3, "", KALL), b("smove", 4, "", K12),
        b("sscan", -3, "r", K1), b("sintercard", -3, "r", Keys::KeyCount { at: 1, first: 1 }),
    ]),
    (Family::SortedSet, &[
        b("zadd", -4, "", K1), b("zincrby", 4, "", K1), b("zrem", -3, "", K1),
        b("zcard", 2, "r", K1), b("zscore", 3, "r", K1), b("zmscore", -3, "r", K1),
        b("zrank", -3, "r", K1), b("zrevrank", -3, "r", K1), b("zrange", -4, "r", K1),
        b("zrangestore", -5, "", K12), b("zrevrange", -4, "r", K1), b("zrangebyscore", -4, "r", K1),
        b("zrevrangebyscore", -4, "r", K1), b("zrangebylex", -4, "r", K1),
        b("zrevrangebylex", -4, "r", K1), b("zcount", 4, "r", K1), b("zlexcount", 4, "r", K1),
        b("zremrangebyrank", 4, "", K1), b("zremrangebyscore", 4, "", K1),
        b("zremrangebylex", 4, "", K1), b("zpopmin", -2, "", K1), b("zpopmax", -2, "", K1),
        b("zrandmember", -2, "r", K1), b("zscan", -3, "r", K1),
        b("zunion", -3, "r", Keys::KeyCount { at: 1, first: 1 }),
        b("zinter", -3, "r", Keys::KeyCount { at: 1, first: 1 }),
        b("zdiff", -3, "r", Keys::KeyCount { at: 1, first: 1 }),
        b("zintercard", -3, "r", Keys::KeyCount { at: 1, first: 1 }),
        b("zmpop", -4, "", Keys::KeyCount { at: 1, first: 1 }), b("bzpopmin", -3, "b", KBLOCK),
        b("bzpopmax", -3, "b", KBLOCK), b("bzmpop", -5, "b", Keys::KeyCount { at: 2, first: 1 }),
    ]),
    (Family::Stream, &[
        b("xadd", -5, "", K1), b("xlen", 2, "r", K1), b("xrange", -4, "r", K1),
        b("xrevrange", -4, "r", K1), b("xdel", -3, "", K1), b("xtrim", -4, "", K1),
        b("xack", -4, "", K1), b("xpending", -3, "r", K1), b("xclaim", -6, "", K1),
        b("xautoclaim", -6, "", K1), b("xsetid", -3, "", K1),
        b("xread", -4, "r", Keys::AfterKeyword("streams")),
        b("xreadgroup", -7, "", Keys::AfterKeyword("streams")),
        b("xgroup", -2, "", Keys::Range(2, 2, 1)), b("xinfo", -2, "r", Keys::Range(2, 2, 1)),
    ]),
    (Family::Geo, &[
        b("geoadd", -5, "", K1), b("geopos", -2, "r", K1), b("geodist", -4, "r", K1),
        b("geohash", -2, "r", K1), b("geosearch", -7, "r", K1), b("geosearchstore", -8, "", K12),
        b("georadius_ro", -6, "r", K1), b("georadiusbymember_ro", -5, "r", K1),
    ]),
    (Family::HyperLogLog, &[
        b("pfadd", -2, "", K1), b("pfcount", -2, "r", KALL), b("pfmerge", -2, "", KALL),
    ]),
    (Family::Scripting, &[
        b("script", -2, "", N), b("function", -2, "", N),
        b("eval", -3, "", Keys::KeyCount { at: 2, first: 1 }),
        b("evalsha", -3, "", Keys::KeyCount { at: 2, first: 1 }),
        b("eval_ro", -3, "r", Keys::KeyCount { at: 2, first: 1 }),
        b("evalsha_ro", -3, "r", Keys::KeyCount { at: 2, first: 1 }),
        b("fcall", -3, "", Keys::KeyCount { at: 2, first: 1 }),
        b("fcall_ro", -3, "r", Keys::KeyCount { at: 2, first: 1 }),
    ]),
];
