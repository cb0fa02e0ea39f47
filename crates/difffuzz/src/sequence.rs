//! A command sequence: the connections it opens and the steps it takes on
//! them, with a text form that round-trips (the regression tests keep
//! shrunk sequences in it).
//!
//! ```text
//! conn 0 resp2
//! conn 1 resp3
//! 0> SET {a}1 x          one command, its replies read at once
//! 1| GET {a}1            consecutive `|` lines of one connection: one
//! 1| INCR k1             pipeline, sent in one write (a blank line ends it)
//! 0& BLPOP k2 1          sent; its reply is read by a later `0<`
//! 1> RPUSH k2 v
//! 0<
//! 1% SCAN 0 MATCH *      a SCAN-family command iterated to cursor 0
//! ```
//!
//! Arguments are separated by spaces; one holding a space, a quote, a
//! backslash or a byte outside printable ASCII is written in double quotes
//! with `\"`, `\\` and `\xHH` escapes (redis-cli reads the same quoting).

use std::fmt::Write as _;

/// One command's arguments, the name first.
pub type Args = Vec<Vec<u8>>;

/// The protocol a connection speaks from its start (`HELLO 3` for RESP3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Resp2,
    Resp3,
}

/// What a step does on its connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send one command and read its replies.
    Call(Args),
    /// Send these commands in one write, then read every reply.
    Pipeline(Vec<Args>),
    /// Send a (blocking) command without reading; `Collect` reads it.
    Send(Args),
    /// Read the replies owed to earlier `Send`s.
    Collect,
    /// Iterate a SCAN-family command from cursor 0 back to 0.
    Scan(Args),
}

/// One step: an action on one of the sequence's connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub conn: usize,
    pub action: Action,
}

/// Connections and steps, run in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sequence {
    pub conns: Vec<Proto>,
    pub steps: Vec<Step>,
}

// === impl Action ===

impl Action {
    /// The commands this action sends.
    pub fn commands(&self) -> Vec<&Args> {
        match self {
            Action::Call(a) | Action::Send(a) | Action::Scan(a) => vec![a],
            Action::Pipeline(cmds) => cmds.iter().collect(),
            Action::Collect => Vec::new(),
        }
    }
}

// === impl Sequence ===

impl Sequence {
    /// How many commands the sequence sends (a SCAN iteration counts once).
    pub fn command_count(&self) -> usize {
        self.steps.iter().map(|s| s.action.commands().len()).sum()
    }

    /// The sequence with every read a reply cache keeps (GET, MGET, HGET,
    /// ...) sent twice in a row, alone or in its pipeline: the second is
    /// the one a cache may answer (`--cache`).
    pub fn with_reads_repeated(mut self) -> Sequence {
        fn cached_read(args: &Args) -> bool {
            const READS: &[&str] = &[
                "get",
                "mget",
                "strlen",
                "getrange",
                "exists",
                "type",
                "hget",
                "hmget",
                "hgetall",
                "hlen",
                "hexists",
                "smembers",
                "sismember",
                "scard",
                "zscore",
                "zrange",
                "zcard",
                "zrank",
                "lrange",
                "llen",
                "lindex",
                "getbit",
                "bitcount",
            ];
            args.first().is_some_and(|name| {
                READS
                    .iter()
                    .any(|r| name.eq_ignore_ascii_case(r.as_bytes()))
            })
        }
        let mut steps = Vec::with_capacity(self.steps.len() * 2);
        for step in self.steps {
            match &step.action {
                Action::Call(args) if cached_read(args) => {
                    let again = step.clone();
                    steps.push(step);
                    steps.push(again);
                }
                Action::Pipeline(commands) => {
                    let mut doubled = Vec::with_capacity(commands.len() * 2);
                    for args in commands {
                        doubled.push(args.clone());
                        if cached_read(args) {
                            doubled.push(args.clone());
                        }
                    }
                    steps.push(Step {
                        conn: step.conn,
                        action: Action::Pipeline(doubled),
                    });
                }
                _ => steps.push(step),
            }
        }
        self.steps = steps;
        self
    }

    /// The text form described in the module docs.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (i, proto) in self.conns.iter().enumerate() {
            let p = if *proto == Proto::Resp3 {
                "resp3"
            } else {
                "resp2"
            };
            let _ = writeln!(out, "conn {i} {p}");
        }
        for step in &self.steps {
            let c = step.conn;
            match &step.action {
                Action::Call(a) => {
                    let _ = writeln!(out, "{c}> {}", quote_args(a));
                }
                Action::Send(a) => {
                    let _ = writeln!(out, "{c}& {}", quote_args(a));
                }
                Action::Scan(a) => {
                    let _ = writeln!(out, "{c}% {}", quote_args(a));
                }
                Action::Collect => {
                    let _ = writeln!(out, "{c}<");
                }
                Action::Pipeline(cmds) => {
                    for a in cmds {
                        let _ = writeln!(out, "{c}| {}", quote_args(a));
                    }
                    out.push('\n');
                }
            }
        }
        out
    }

    /// Parses the text form; `#` starts a comment line.
    pub fn parse(text: &str) -> Result<Sequence, String> {
        let mut seq = Sequence::default();
        let mut open_pipe = false;
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() {
                open_pipe = false;
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| format!("line {}: {why}: {raw}", n + 1);
            if let Some(rest) = line.strip_prefix("conn ") {
                let (_, proto) = rest
                    .split_once(' ')
                    .ok_or_else(|| bad("conn N resp2|resp3"))?;
                seq.conns.push(match proto {
                    "resp3" => Proto::Resp3,
                    "resp2" => Proto::Resp2,
                    _ => return Err(bad("unknown protocol")),
                });
                continue;
            }
            let at = line
                .find(|c: char| !c.is_ascii_digit())
                .ok_or_else(|| bad("no step marker"))?;
            let conn: usize = line[..at]
                .parse()
                .map_err(|_| bad("no connection number"))?;
            if conn >= seq.conns.len() {
                return Err(bad("connection not declared"));
            }
            let marker = line[at..].chars().next().unwrap_or(' ');
            let args = split_args(&line[at + 1..]).map_err(|e| bad(&e))?;
            let action = match marker {
                '<' => Action::Collect,
                '|' => {
                    let same = seq.steps.last_mut().filter(|s| s.conn == conn && open_pipe);
                    if let Some(Step {
                        action: Action::Pipeline(cmds),
                        ..
                    }) = same
                    {
                        cmds.push(args);
                        continue;
                    }
                    open_pipe = true;
                    Action::Pipeline(vec![args])
                }
                _ if args.is_empty() => return Err(bad("no command")),
                '>' => Action::Call(args),
                '&' => Action::Send(args),
                '%' => Action::Scan(args),
                _ => return Err(bad("unknown step marker")),
            };
            if marker != '|' {
                open_pipe = false;
            }
            seq.steps.push(Step { conn, action });
        }
        Ok(seq)
    }
}

/// One argument as redis-cli and [`Sequence::parse`] read it.
pub fn quote_arg(arg: &[u8]) -> String {
    let plain = !arg.is_empty()
        && arg
            .iter()
            .all(|&b| b.is_ascii_graphic() && b != b'"' && b != b'\'' && b != b'\\');
    if plain {
        return String::from_utf8_lossy(arg).into_owned();
    }
    let mut out = String::from("\"");
    for &b in arg {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('"');
    out
}

/// A command's arguments, quoted and joined by spaces.
pub fn quote_args(args: &[Vec<u8>]) -> String {
    let words: Vec<String> = args.iter().map(|a| quote_arg(a)).collect();
    words.join(" ")
}

/// Splits a line into arguments, undoing [`quote_arg`].
pub fn split_args(line: &str) -> Result<Args, String> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b' ' {
            i += 1;
            continue;
        }
        let mut arg = Vec::new();
        if bytes[i] == b'"' {
            i += 1;
            loop {
                match bytes.get(i) {
                    None => return Err("unterminated quote".into()),
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') => {
                        match bytes.get(i + 1) {
                            Some(b'x') => {
                                let hex = line.get(i + 2..i + 4).ok_or("short \\x escape")?;
                                let b = u8::from_str_radix(hex, 16).map_err(|e| e.to_string())?;
                                arg.push(b);
                                i += 4;
                                continue;
                            }
                            Some(&c) => arg.push(c),
                            None => return Err("trailing backslash".into()),
                        }
                        i += 2;
                    }
                    Some(&c) => {
                        arg.push(c);
                        i += 1;
                    }
                }
            }
        } else {
            while i < bytes.len() && bytes[i] != b' ' {
                arg.push(bytes[i]);
                i += 1;
            }
        }
        out.push(arg);
    }
    Ok(out)
}
