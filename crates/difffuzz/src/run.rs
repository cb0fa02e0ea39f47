//! Running a [`Sequence`] against one target (a redis-server, or orthrus)
//! over raw TCP, and recording every frame read.
//!
//! How many frames each command gets is decided from what was sent, never
//! from what came back, so both targets are read alike: a (un)subscribe
//! command gets a frame per channel, CLIENT REPLY OFF/SKIP none, a PUBLISH
//! one message on every connection of the sequence subscribed to a
//! matching channel or pattern (read right after it), and a command queued
//! in MULTI its `+QUEUED`.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use orthrus_resp::{Limits, scan_reply};

use crate::sequence::{Action, Args, Proto, Sequence};

/// How long one frame may take: blocking commands block at most 2 s.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Time given to a target to block a `Send`'s command before the next step.
pub const BLOCK_SETTLE: Duration = Duration::from_millis(20);
/// Time given to a target to carry out commands it does not answer
/// (CLIENT REPLY OFF) before another connection sends anything.
pub const SILENT_SETTLE: Duration = Duration::from_millis(20);
/// Upper bound on the round trips of one SCAN iteration.
const SCAN_ROUNDS: usize = 1_000;

/// What a frame was read for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A reply to `args`.
    Reply,
    /// The messages a PUBLISH brought one connection, as one array
    /// (`args` names the channel).
    Message,
    /// A SCAN-family iteration: the sorted elements it returned.
    Scan,
}

/// One reply read (or the error met instead); a command answered by
/// several frames (SUBSCRIBE a b) has them as the elements of one array.
#[derive(Clone, Debug)]
pub struct Obs {
    pub step: usize,
    pub conn: usize,
    pub kind: Kind,
    pub proto: Proto,
    pub args: Args,
    /// For EXEC: the commands it ran.
    pub queued: Vec<Args>,
    pub reply: Result<Vec<u8>, String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ReplyMode {
    On,
    Off,
    SkipNext,
}

/// One connection of the sequence and what the runner knows of its state.
struct Link {
    io: Result<Io, String>,
    proto: Proto,
    mode: ReplyMode,
    multi: Option<Vec<Args>>,
    channels: BTreeSet<Vec<u8>>,
    patterns: BTreeSet<Vec<u8>>,
    shards: BTreeSet<Vec<u8>>,
    /// Commands sent by `Send` whose frames are not read yet.
    owed: Vec<(Args, usize)>,
}

struct Io {
    stream: TcpStream,
    buf: Vec<u8>,
    limits: Limits,
}

/// A frame count and what to record with it.
struct Plan {
    frames: usize,
    queued: Vec<Args>,
}

/// Runs `seq` against `addr` and returns every frame read, in order.
pub fn run(addr: SocketAddr, seq: &Sequence) -> Vec<Obs> {
    let mut links: Vec<Link> = seq.conns.iter().map(|p| Link::open(addr, *p)).collect();
    let mut out = Vec::new();
    // The connection that last sent a command no reply answers: the next
    // step on another connection waits for it to be carried out.
    let mut silent: Option<usize> = None;
    for (i, step) in seq.steps.iter().enumerate() {
        let c = step.conn;
        if c >= links.len() {
            continue;
        }
        if silent.is_some_and(|s| s != c) {
            thread::sleep(SILENT_SETTLE);
        }
        silent = None;
        if !matches!(step.action, Action::Collect) {
            collect(&mut links[c], i, c, &mut out);
        }
        let before = out.len();
        match &step.action {
            Action::Collect => collect(&mut links[c], i, c, &mut out),
            Action::Send(args) => {
                let plan = links[c].plan(args);
                links[c].send(&[args]);
                links[c].owed.push((args.clone(), plan.frames));
                thread::sleep(BLOCK_SETTLE);
            }
            Action::Scan(args) if links[c].scannable() => {
                let reply = links[c].scan_all(args);
                out.push(links[c].obs(i, c, Kind::Scan, args, Vec::new(), reply));
            }
            Action::Call(args) | Action::Scan(args) => call(&mut links, i, c, &[args], &mut out),
            Action::Pipeline(cmds) => {
                let cmds: Vec<&Args> = cmds.iter().collect();
                call(&mut links, i, c, &cmds, &mut out);
            }
        }
        if out.len() == before && !step.action.commands().is_empty() {
            silent = Some(c);
        }
    }
    for (c, link) in links.iter_mut().enumerate() {
        collect(link, seq.steps.len(), c, &mut out);
    }
    out
}

/// Sends `cmds` in one write, reads their frames, then the messages any
/// PUBLISH among them caused.
fn call(links: &mut [Link], step: usize, c: usize, cmds: &[&Args], out: &mut Vec<Obs>) {
    let link = &mut links[c];
    let plans: Vec<Plan> = cmds.iter().map(|a| link.plan(a)).collect();
    let published: Vec<(usize, bool, Vec<u8>)> = cmds
        .iter()
        .zip(&plans)
        .enumerate()
        .filter(|(_, (_, p))| p.queued.is_empty())
        .filter_map(|(i, (a, _))| publish_target(a).map(|(shard, chan)| (i, shard, chan)))
        .collect();
    let was_queued = link.multi.is_some();
    link.send(cmds);
    // Commands refused (a user's rules): a refused PUBLISH brings no
    // message, a refused SUBSCRIBE subscribes to nothing.
    let mut refused = vec![false; cmds.len()];
    for (i, (args, plan)) in cmds.iter().zip(plans).enumerate() {
        if plan.frames > 0 {
            let reply = link.read_frames(plan.frames);
            if !was_queued && reply.as_ref().is_ok_and(|r| r.starts_with(b"-")) {
                refused[i] = true;
                link.undo_subscribe(args);
            }
            out.push(link.obs(step, c, Kind::Reply, args, plan.queued, reply));
        }
    }
    if was_queued {
        return;
    }
    for (_, shard, chan) in published.into_iter().filter(|(i, _, _)| !refused[*i]) {
        for (d, other) in links.iter_mut().enumerate() {
            let n = other.deliveries(shard, &chan);
            if n > 0 {
                // As an array of the messages even when there is one: the
                // comparison takes them in any order.
                let reply = other.read_frames(n).map(|f| match n {
                    1 => [b"*1\r\n".as_slice(), &f].concat(),
                    _ => f,
                });
                let args = vec![b"message".to_vec(), chan.clone()];
                out.push(other.obs(step, d, Kind::Message, &args, Vec::new(), reply));
            }
        }
    }
}

fn collect(link: &mut Link, step: usize, c: usize, out: &mut Vec<Obs>) {
    for (args, frames) in std::mem::take(&mut link.owed) {
        if frames > 0 {
            let reply = link.read_frames(frames);
            out.push(link.obs(step, c, Kind::Reply, &args, Vec::new(), reply));
        }
    }
}

/// `(sharded, channel)` of a PUBLISH or SPUBLISH.
fn publish_target(args: &Args) -> Option<(bool, Vec<u8>)> {
    let name = upper(args.first()?);
    let chan = args.get(1)?.clone();
    match name.as_str() {
        "PUBLISH" if args.len() == 3 => Some((false, chan)),
        "SPUBLISH" if args.len() == 3 => Some((true, chan)),
        _ => None,
    }
}

fn upper(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).to_ascii_uppercase()
}

/// Redis's glob for the patterns the generator uses: `*`, `?`, literals.
pub fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| glob(rest, &text[i..])),
        Some((b'?', rest)) => !text.is_empty() && glob(rest, &text[1..]),
        Some((&p, rest)) => text.first() == Some(&p) && glob(rest, &text[1..]),
    }
}

// === impl Link ===

impl Link {
    /// A connection in the state a new one (or RESET) has: RESP2, replies
    /// on, no MULTI, no subscriptions.
    fn fresh(io: Result<Io, String>) -> Link {
        Link {
            io,
            proto: Proto::Resp2,
            mode: ReplyMode::On,
            multi: None,
            channels: BTreeSet::new(),
            patterns: BTreeSet::new(),
            shards: BTreeSet::new(),
            owed: Vec::new(),
        }
    }

    fn open(addr: SocketAddr, proto: Proto) -> Link {
        let mut link = Link::fresh(Io::connect(addr));
        if proto == Proto::Resp3 {
            let hello: Args = vec![b"HELLO".to_vec(), b"3".to_vec()];
            link.send(&[&hello]);
            if let Err(e) = link.read_frame() {
                link.io = Err(format!("HELLO 3: {e}"));
            }
            link.proto = Proto::Resp3;
        }
        link
    }

    fn obs(
        &self,
        step: usize,
        conn: usize,
        kind: Kind,
        args: &Args,
        queued: Vec<Args>,
        reply: Result<Vec<u8>, String>,
    ) -> Obs {
        Obs {
            step,
            conn,
            kind,
            proto: self.proto,
            args: args.clone(),
            queued,
            reply,
        }
    }

    fn subscribed(&self) -> bool {
        !(self.channels.is_empty() && self.patterns.is_empty() && self.shards.is_empty())
    }

    fn scannable(&self) -> bool {
        self.mode == ReplyMode::On
            && self.multi.is_none()
            && !(self.proto == Proto::Resp2 && self.subscribed())
    }

    /// How many messages a PUBLISH to `chan` brings this connection.
    fn deliveries(&self, shard: bool, chan: &[u8]) -> usize {
        if self.mode != ReplyMode::On || self.io.is_err() {
            return 0;
        }
        if shard {
            return usize::from(self.shards.contains(chan));
        }
        let direct = usize::from(self.channels.contains(chan));
        direct + self.patterns.iter().filter(|p| glob(p, chan)).count()
    }

    /// The frames `args` gets, updating the state it changes.
    fn plan(&mut self, args: &Args) -> Plan {
        let name = args.first().map(|a| upper(a)).unwrap_or_default();
        let sub = args.get(1).map(|a| upper(a)).unwrap_or_default();
        let rest = args.get(1..).unwrap_or_default();
        let mut queued = Vec::new();
        let mut frames = 1;
        let control = matches!(
            name.as_str(),
            "EXEC" | "DISCARD" | "MULTI" | "RESET" | "QUIT" | "WATCH"
        );
        if let (Some(q), false) = (&mut self.multi, control) {
            q.push(args.clone());
            return self.apply_mode(1);
        }
        match (name.as_str(), sub.as_str()) {
            ("MULTI", _) => {
                self.multi.get_or_insert_with(Vec::new);
            }
            ("EXEC", _) => queued = self.multi.take().unwrap_or_default(),
            ("DISCARD", _) => self.multi = None,
            ("RESET", _) => {
                *self = Link::fresh(std::mem::replace(&mut self.io, Err(String::new())));
                return Plan { frames: 1, queued };
            }
            ("HELLO", "2") => self.proto = Proto::Resp2,
            ("HELLO", "3") => self.proto = Proto::Resp3,
            ("CLIENT", "REPLY") => {
                let how = args.get(2).map(|a| upper(a)).unwrap_or_default();
                match how.as_str() {
                    "ON" => {
                        self.mode = ReplyMode::On;
                        return Plan { frames: 1, queued };
                    }
                    "OFF" => {
                        self.mode = ReplyMode::Off;
                        return Plan { frames: 0, queued };
                    }
                    "SKIP" if self.mode == ReplyMode::On => {
                        self.mode = ReplyMode::SkipNext;
                        return Plan { frames: 0, queued };
                    }
                    _ => {}
                }
            }
            ("SUBSCRIBE" | "PSUBSCRIBE" | "SSUBSCRIBE", _) if !rest.is_empty() => {
                let set = self.set_of(&name);
                set.extend(rest.iter().cloned());
                frames = rest.len();
            }
            ("UNSUBSCRIBE" | "PUNSUBSCRIBE" | "SUNSUBSCRIBE", _) => {
                let set = self.set_of(&name);
                if rest.is_empty() {
                    frames = set.len().max(1);
                    set.clear();
                } else {
                    rest.iter().for_each(|c| {
                        set.remove(c);
                    });
                    frames = rest.len();
                }
            }
            _ => {}
        }
        let mut plan = self.apply_mode(frames);
        plan.queued = queued;
        plan
    }

    fn apply_mode(&mut self, frames: usize) -> Plan {
        let frames = match self.mode {
            ReplyMode::On => frames,
            ReplyMode::Off => 0,
            ReplyMode::SkipNext => {
                self.mode = ReplyMode::On;
                0
            }
        };
        Plan {
            frames,
            queued: Vec::new(),
        }
    }

    /// Forgets what a refused SUBSCRIBE, PSUBSCRIBE or SSUBSCRIBE added.
    fn undo_subscribe(&mut self, args: &Args) {
        let name = args.first().map(|a| upper(a)).unwrap_or_default();
        if matches!(name.as_str(), "SUBSCRIBE" | "PSUBSCRIBE" | "SSUBSCRIBE") {
            let set = self.set_of(&name);
            args.iter().skip(1).for_each(|c| {
                set.remove(c);
            });
        }
    }

    fn set_of(&mut self, name: &str) -> &mut BTreeSet<Vec<u8>> {
        match name {
            "PSUBSCRIBE" | "PUNSUBSCRIBE" => &mut self.patterns,
            "SSUBSCRIBE" | "SUNSUBSCRIBE" => &mut self.shards,
            _ => &mut self.channels,
        }
    }

    fn send(&mut self, cmds: &[&Args]) {
        let mut bytes = Vec::new();
        for args in cmds {
            encode(args, &mut bytes);
        }
        if let Ok(io) = &mut self.io
            && let Err(e) = io.stream.write_all(&bytes)
        {
            self.io = Err(format!("write: {e}"));
        }
    }

    /// One frame, or `n` frames as the elements of one array (the replies
    /// of a command that gets several, such as SUBSCRIBE a b).
    fn read_frames(&mut self, n: usize) -> Result<Vec<u8>, String> {
        if n == 1 {
            return self.read_frame();
        }
        let mut all = format!("*{n}\r\n").into_bytes();
        for _ in 0..n {
            all.extend(self.read_frame()?);
        }
        Ok(all)
    }

    fn read_frame(&mut self) -> Result<Vec<u8>, String> {
        let io = self
            .io
            .as_mut()
            .map_err(|e| format!("connection broken ({e})"))?;
        match io.read_frame() {
            Ok(f) => Ok(f),
            Err(e) => {
                self.io = Err(e.clone());
                Err(e)
            }
        }
    }

    /// Iterates a SCAN-family command to cursor 0; the result is one array
    /// of the sorted elements (pairs kept together for HSCAN and ZSCAN).
    fn scan_all(&mut self, args: &Args) -> Result<Vec<u8>, String> {
        let name = upper(&args[0]);
        let at = if name == "SCAN" { 1 } else { 2 };
        let group = if name == "HSCAN" || name == "ZSCAN" {
            2
        } else {
            1
        };
        let mut args = args.clone();
        let mut seen = BTreeSet::new();
        for _ in 0..SCAN_ROUNDS {
            self.send(&[&args]);
            let reply = self.read_frame()?;
            let parts = crate::frame::elements(&reply);
            let (Some(cursor), Some(batch)) = (parts.first(), parts.get(1)) else {
                return Ok(reply);
            };
            let items = crate::frame::elements(batch);
            for chunk in items.chunks(group) {
                seen.insert(chunk.concat());
            }
            let cursor = crate::frame::bulk_payload(cursor).unwrap_or_default();
            if cursor == b"0" {
                let mut out = format!("*{}\r\n", seen.len() * group).into_bytes();
                seen.iter().for_each(|s| out.extend_from_slice(s));
                return Ok(out);
            }
            if let Some(slot) = args.get_mut(at) {
                *slot = cursor.to_vec();
            }
        }
        Err("SCAN did not return to cursor 0".into())
    }
}

/// A command as a RESP multibulk.
pub fn encode(args: &[Vec<u8>], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

// === impl Io ===

impl Io {
    fn connect(addr: SocketAddr) -> Result<Io, String> {
        let stream =
            TcpStream::connect_timeout(&addr, READ_TIMEOUT).map_err(|e| format!("connect: {e}"))?;
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Io {
            stream,
            buf: Vec::new(),
            limits: Limits::for_replies(),
        })
    }

    fn read_frame(&mut self) -> Result<Vec<u8>, String> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match scan_reply(&self.buf, &self.limits) {
                Ok(Some(n)) => {
                    let rest = self.buf.split_off(n);
                    return Ok(std::mem::replace(&mut self.buf, rest));
                }
                Ok(None) => {}
                Err(e) => return Err(format!("bad frame: {e}")),
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("connection closed".into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return Err(format!("no reply within {READ_TIMEOUT:?}"));
                }
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }
}
