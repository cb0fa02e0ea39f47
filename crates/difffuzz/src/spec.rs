//! The command table the generator draws from: every family orthrus
//! routes (keyed, split, fanned out, answered by orthrus), each command
//! with a weight and its arguments in a small grammar.
//!
//! - `WORD` (upper case, or anything not listed below): sent as written;
//! - `[ ... ]`: present half of the time; `( a | b )`: one of them;
//!   `{ ... }`: repeated one to three times;
//! - `key`: a key from the pool; `key2`: a key in the first key's slot;
//!   `keyx`: either, so the keys sometimes span slots; `nk`/`nkx`: a key
//!   count and that many keys (one slot / maybe several); `nk2`: a count and
//!   keys in the first key's slot (after a destination key);
//! - values: `val` (strings and numbers), `int`, `nat` (0..5), `cnt`
//!   (1..4), `num` (a float), `idx` (a list index), `ttl`/`ttlms` (long
//!   enough never to expire during a run), `abst` (an absolute time far
//!   ahead), `mem`, `fld`, `score`, `bound` (a score bound), `lex`, `sid`
//!   (a stream ID), `grp`, `cons`, `bit`, `off`, `pat` (a key pattern),
//!   `chan`, `cpat`, `name`, `lon`, `lat`, `lua` (a script with its keys),
//!   `sha` (the same by its SHA1), `luabody`, `shaonly`, `library` (a
//!   function library, [`LIBRARY`]),
//!   `typ`, `tmo` (seconds of a short block), `tmoms`, `db` (a database
//!   below `--databases`).
//!
//! A spec that starts with `!` is never queued inside MULTI: orthrus answers
//! those itself, and refuses them there (docs/commands.md, Transactions).

/// `(weight, spec)` of every command the generator may send as a plain
/// command (pub/sub, CLIENT REPLY, blocking wake-ups and SCAN iterations
/// are steps of their own, made by the generator).
pub const COMMANDS: &[(u32, &str)] = &[
    // strings
    (
        6,
        "SET key val [(NX|XX)] [GET] [(EX ttl|PX ttlms|EXAT abst|KEEPTTL)]",
    ),
    (6, "GET key"),
    (2, "GETDEL key"),
    (2, "GETEX key [(EX ttl|PERSIST)]"),
    (1, "GETSET key val"),
    (1, "SETNX key val"),
    (1, "SETEX key ttl val"),
    (1, "PSETEX key ttlms val"),
    (2, "APPEND key val"),
    (2, "STRLEN key"),
    (3, "INCR key"),
    (1, "DECR key"),
    (2, "INCRBY key int"),
    (1, "DECRBY key int"),
    (2, "INCRBYFLOAT key num"),
    (1, "GETRANGE key idx idx"),
    (1, "SETRANGE key nat val"),
    (4, "MGET key {keyx}"),
    (3, "MSET key val {keyx val}"),
    (2, "MSETNX key val {key2 val}"),
    (1, "LCS key key2 [(LEN|IDX)]"),
    // keys
    (4, "DEL key {keyx}"),
    (2, "UNLINK key {keyx}"),
    (3, "EXISTS key {keyx}"),
    (1, "TOUCH key {keyx}"),
    (3, "TYPE key"),
    (2, "EXPIRE key ttl [(NX|XX|GT|LT)]"),
    (1, "PEXPIRE key ttlms"),
    (1, "EXPIREAT key abst"),
    (1, "PERSIST key"),
    (2, "TTL key"),
    (1, "PTTL key"),
    (1, "EXPIRETIME key"),
    (2, "RENAME key key2"),
    (1, "RENAMENX key key2"),
    (2, "COPY key key2 [REPLACE]"),
    (2, "OBJECT ENCODING key"),
    (2, "DBSIZE"),
    (2, "KEYS pat"),
    (1, "RANDOMKEY"),
    (1, "SORT key [LIMIT nat cnt] [ALPHA] [(ASC|DESC)]"),
    (1, "SORT_RO key [ALPHA]"),
    (1, "DUMP key"),
    // lists
    (4, "LPUSH key val {val}"),
    (4, "RPUSH key val {val}"),
    (1, "LPUSHX key val"),
    (1, "RPUSHX key val"),
    (3, "LPOP key [cnt]"),
    (3, "RPOP key [cnt]"),
    (2, "LLEN key"),
    (3, "LRANGE key idx idx"),
    (1, "LINDEX key idx"),
    (1, "LSET key idx val"),
    (1, "LINSERT key (BEFORE|AFTER) val val"),
    (1, "LREM key int val"),
    (1, "LTRIM key idx idx"),
    (1, "LPOS key val [RANK (1|-1|2)] [COUNT nat]"),
    (2, "LMOVE key key2 (LEFT|RIGHT) (LEFT|RIGHT)"),
    (1, "RPOPLPUSH key key2"),
    (1, "LMPOP nk (LEFT|RIGHT) [COUNT cnt]"),
    // blocking, with short timeouts (wake-ups are steps of their own)
    (
        2,
        "(BLPOP key {key2} tmo|BRPOP key tmo|BLMOVE key key2 (LEFT|RIGHT) (LEFT|RIGHT) tmo|BLMPOP tmo nk (LEFT|RIGHT)|BZPOPMIN key {key2} tmo|BZMPOP tmo nk (MIN|MAX)|XREAD BLOCK tmoms STREAMS key $)",
    ),
    // hashes
    (4, "HSET key fld val {fld val}"),
    (1, "HSETNX key fld val"),
    (3, "HGET key fld"),
    (2, "HMGET key fld {fld}"),
    (2, "HDEL key fld {fld}"),
    (1, "HLEN key"),
    (1, "HEXISTS key fld"),
    (2, "HINCRBY key fld int"),
    (1, "HINCRBYFLOAT key fld num"),
    (1, "HKEYS key"),
    (1, "HVALS key"),
    (2, "HGETALL key"),
    (1, "HSTRLEN key fld"),
    (1, "HRANDFIELD key [int [WITHVALUES]]"),
    // sets
    (4, "SADD key mem {mem}"),
    (2, "SREM key mem {mem}"),
    (2, "SCARD key"),
    (2, "SISMEMBER key mem"),
    (1, "SMISMEMBER key mem {mem}"),
    (2, "SMEMBERS key"),
    (2, "SINTER key {keyx}"),
    (2, "SUNION key {keyx}"),
    (2, "SDIFF key {keyx}"),
    (1, "SINTERSTORE key key2 {key2}"),
    (1, "SUNIONSTORE key key2 {key2}"),
    (1, "SDIFFSTORE key key2 {key2}"),
    (1, "SINTERCARD nkx [LIMIT nat]"),
    (1, "SMOVE key key2 mem"),
    (1, "SRANDMEMBER key [int]"),
    // sorted sets
    (4, "ZADD key [(NX|XX)] [(GT|LT)] [CH] score mem {score mem}"),
    (2, "ZINCRBY key score mem"),
    (2, "ZSCORE key mem"),
    (1, "ZMSCORE key mem {mem}"),
    (2, "ZCARD key"),
    (1, "ZCOUNT key bound bound"),
    (2, "ZRANK key mem"),
    (1, "ZREVRANK key mem"),
    (3, "ZRANGE key idx idx [WITHSCORES]"),
    (
        1,
        "ZRANGE key bound bound BYSCORE [REV] [LIMIT nat cnt] [WITHSCORES]",
    ),
    (1, "ZRANGEBYSCORE key bound bound [WITHSCORES]"),
    (1, "ZRANGEBYLEX key lex lex"),
    (1, "ZLEXCOUNT key lex lex"),
    (2, "ZREM key mem {mem}"),
    (1, "ZREMRANGEBYRANK key idx idx"),
    (1, "ZREMRANGEBYSCORE key bound bound"),
    (2, "ZPOPMIN key [cnt]"),
    (1, "ZPOPMAX key [cnt]"),
    (1, "ZUNIONSTORE key nk2 [AGGREGATE (SUM|MIN|MAX)]"),
    (1, "ZINTERSTORE key nk2"),
    (1, "ZDIFFSTORE key nk2"),
    (1, "ZRANGESTORE key key2 idx idx"),
    (1, "ZUNION nkx [WITHSCORES]"),
    (1, "ZINTER nkx [WITHSCORES]"),
    (1, "ZDIFF nkx"),
    (1, "ZINTERCARD nkx"),
    (1, "ZMPOP nk (MIN|MAX) [COUNT cnt]"),
    (1, "ZRANDMEMBER key [int]"),
    // streams
    (3, "XADD key [MAXLEN cnt] sid fld val"),
    (2, "XLEN key"),
    (2, "XRANGE key - + [COUNT cnt]"),
    (1, "XREVRANGE key + - [COUNT cnt]"),
    (1, "XDEL key sid"),
    (1, "XTRIM key MAXLEN nat"),
    (2, "XGROUP CREATE key grp (0|$) [MKSTREAM]"),
    (2, "XREADGROUP GROUP grp cons [COUNT cnt] STREAMS key >"),
    (1, "XACK key grp sid"),
    (1, "XPENDING key grp"),
    (1, "XREAD [COUNT cnt] STREAMS key (0|0-0)"),
    (1, "XGROUP DESTROY key grp"),
    (1, "XAUTOCLAIM key grp cons 0 0-0 [COUNT cnt]"),
    (1, "XCLAIM key grp cons 0 sid {sid} JUSTID"),
    (1, "XINFO (STREAM key|GROUPS key|CONSUMERS key grp)"),
    (
        1,
        "XGROUP (CREATECONSUMER key grp cons|DELCONSUMER key grp cons|SETID key grp (0|$))",
    ),
    // bitmaps, HyperLogLog, geo
    (2, "SETBIT key off bit"),
    (1, "GETBIT key off"),
    (1, "BITCOUNT key [idx idx]"),
    (1, "BITPOS key bit"),
    (1, "BITOP (AND|OR|XOR) key key2 {key2}"),
    (
        1,
        "BITFIELD key (GET u8 off|INCRBY i5 off int|SET u4 off nat)",
    ),
    (2, "PFADD key mem {mem}"),
    (1, "PFCOUNT key"),
    (1, "PFMERGE key key2"),
    (2, "GEOADD key lon lat mem"),
    (1, "GEODIST key mem mem"),
    (1, "GEOPOS key mem"),
    (1, "GEOHASH key mem"),
    (1, "GEOSEARCH key FROMMEMBER mem BYRADIUS 500 km ASC"),
    // scripts
    (2, "EVAL lua"),
    (1, "EVAL_RO \"return redis.call('GET', KEYS[1])\" 1 key"),
    (2, "EVALSHA sha"),
    (1, "SCRIPT LOAD luabody"),
    (1, "SCRIPT EXISTS shaonly {shaonly}"),
    (1, "FUNCTION LOAD REPLACE library"),
    (2, "(FCALL|FCALL_RO) (fget|fget_ro|fincr) 1 key"),
    (1, "FUNCTION DELETE dfz"),
    // answered by orthrus, fanned out, any master
    (2, "PING [val]"),
    (1, "ECHO val"),
    (1, "!SELECT 0"),
    (1, "!CLIENT SETNAME name"),
    (1, "!CLIENT GETNAME"),
    (1, "TIME"),
    (1, "LASTSAVE"),
    (1, "!INFO keyspace"),
    (1, "EXISTS key"),
    (
        1,
        "!PUBSUB (CHANNELS|SHARDCHANNELS|NUMPAT|NUMSUB chan|SHARDNUMSUB chan)",
    ),
    (1, "!PUBLISH chan val"),
];

/// Added to [`COMMANDS`] with `--databases N`: switching databases and
/// moving keys between them (`db`: a database below N). Never `SWAPDB`: a
/// cluster's nodes refuse it, a single server swaps (docs/commands.md,
/// Databases).
pub const DB_COMMANDS: &[(u32, &str)] = &[
    (4, "!SELECT db"),
    (2, "MOVE key db"),
    (2, "COPY key key2 DB db [REPLACE]"),
];

/// Values of `val`: strings, integers, floats, an empty and a binary one.
pub const VALUES: &[&str] = &[
    "a",
    "b",
    "hello",
    "1",
    "2",
    "10",
    "-3",
    "3.5",
    "0",
    "",
    "x y",
    "\x00\x01bin",
    "99999",
];

/// Scripts for `lua` and `sha` (EVALSHA: only SHA1s of these), with the
/// number of keys each takes and its SHA1 (what SCRIPT LOAD answers).
pub const SCRIPTS: &[(&str, usize, &str)] = &[
    (
        "return redis.call('GET', KEYS[1])",
        1,
        "d3c21d0c2b9ca22f82737626a27bcaf5d288f99f",
    ),
    (
        "return redis.call('INCR', KEYS[1])",
        1,
        "61636018f4e6b5817b89791bbed242f93fa089e3",
    ),
    (
        "return {KEYS[1], KEYS[2], ARGV[1]}",
        2,
        "37d0fd1dfec5bfcc353ff499fad03ca9ce598fb5",
    ),
    (
        "return redis.call('TYPE', KEYS[1])",
        1,
        "5afb84be81de8a6b369cec37597ef66bc9f128e1",
    ),
    (
        "return redis.call('LPUSH', KEYS[1], ARGV[1])",
        1,
        "f53bb015f589d5503bcd8963563f2f5cf8783350",
    ),
    (
        "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])",
        1,
        "18d788194860a281b19910d462b1e96dabf3c984",
    ),
    ("return 1", 0, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"),
    (
        "return redis.pcall('INCR', KEYS[1])",
        1,
        "a89d6d897bdbddf3eb8ebdd32aefe405cbf980d6",
    ),
];

/// The function library `library` loads: one read-only and one writing
/// function, by the names FCALL uses.
pub const LIBRARY: &str = "#!lua name=dfz
redis.register_function('fincr', function(keys, args) return redis.call('INCR', keys[1]) end)
redis.register_function('fget', function(keys, args) return redis.call('GET', keys[1]) end)
redis.register_function{function_name='fget_ro', callback=function(keys, args) return redis.call('GET', keys[1]) end, flags={'no-writes'}}
";

/// Commands the users mode adds: SORT with STORE, and with BY and GET
/// patterns (`sortby`: `nosort` or a pattern; `sortget`: `#` or a
/// pattern). A Redis 7.0 cluster refuses a BY pattern and any GET
/// (docs/commands.md), so those are sent without STORE: what they show is
/// whether a user without access to every key is refused first.
pub const USER_COMMANDS: &[(u32, &str)] = &[
    (2, "SORT key BY sortby [GET sortget] [GET #] [ALPHA]"),
    (1, "SORT_RO key BY sortby GET sortget"),
    (
        2,
        "SORT key [BY nosort] [DESC] [LIMIT nat cnt] [ALPHA] STORE key2",
    ),
];

/// Scripts the users mode adds to [`SCRIPTS`]: they touch `{a}o`, a key
/// they do not declare (their declared key is always in the slot of `a`,
/// on the default upstream).
pub const USER_SCRIPTS: &[(&str, usize, &str)] = &[
    (
        "redis.call('SET', '{a}o', ARGV[1]); return redis.call('GET', KEYS[1])",
        1,
        "f2584394fbbc84ac333ed8dce067530258e524d2",
    ),
    (
        "return redis.call('GET', '{a}o')",
        1,
        "770b4b5a0c3ae750d24f40b88958c9550143c061",
    ),
];
