//! One sequence on both targets: flush both, run it on each, compare what
//! was read frame by frame.

use std::fmt;
use std::net::SocketAddr;

use crate::compare::{command_name, differ};
use crate::run::{self, Kind, Obs};
use crate::sequence::{Sequence, quote_args};

/// The two addresses a sequence runs against.
#[derive(Clone, Copy, Debug)]
pub struct Targets {
    pub single: SocketAddr,
    pub proxy: SocketAddr,
}

/// The first frame on which the targets disagree.
#[derive(Clone, Debug)]
pub struct Difference {
    /// The step it was read at (0-based), and its connection.
    pub step: usize,
    pub conn: usize,
    /// The command it answers (for a message, `message CHANNEL`).
    pub command: String,
    pub single: String,
    pub proxy: String,
    pub why: String,
}

/// Runs `seq` on both targets (each flushed first) and compares.
pub fn check(targets: Targets, seq: &Sequence) -> Result<Option<Difference>, String> {
    reset(targets.single)?;
    let single = run::run(targets.single, seq);
    reset(targets.proxy)?;
    let proxy = run::run(targets.proxy, seq);
    Ok(first_difference(&single, &proxy))
}

/// The first pair of observations that differ, or a count mismatch.
pub fn first_difference(single: &[Obs], proxy: &[Obs]) -> Option<Difference> {
    for (s, p) in single.iter().zip(proxy) {
        if let Some(why) = differ(s, p) {
            return Some(Difference::new(s, p, why));
        }
    }
    if single.len() != proxy.len() {
        let longer = if single.len() > proxy.len() {
            single
        } else {
            proxy
        };
        let extra = &longer[single.len().min(proxy.len())];
        return Some(Difference {
            step: extra.step,
            conn: extra.conn,
            command: quote_args(&extra.args),
            single: format!("{} frames", single.len()),
            proxy: format!("{} frames", proxy.len()),
            why: "different numbers of frames".into(),
        });
    }
    None
}

/// FLUSHALL, SCRIPT FLUSH and FUNCTION FLUSH on a target, over a connection of its own;
/// tried three times a second apart (a busy machine may stall a target).
pub fn reset(addr: SocketAddr) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..3 {
        match reset_once(addr) {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    Err(format!("flushing before a sequence: {last}"))
}

fn reset_once(addr: SocketAddr) -> Result<(), String> {
    let seq = Sequence::parse("conn 0 resp2\n0> FLUSHALL\n0> SCRIPT FLUSH\n0> FUNCTION FLUSH\n")?;
    for obs in run::run(addr, &seq) {
        match obs.reply {
            Ok(r) if r.starts_with(b"+OK") => {}
            Ok(r) => {
                return Err(format!(
                    "{addr}: {} answered {}",
                    quote_args(&obs.args),
                    show(&r)
                ));
            }
            Err(e) => return Err(format!("{addr}: {e}")),
        }
    }
    Ok(())
}

/// A frame in one line, escaped, cut at 300 characters.
pub fn show(frame: &[u8]) -> String {
    let mut out = String::new();
    for &b in frame {
        match b {
            b'\r' => out.push_str("\\r"),
            b'\n' => out.push_str("\\n"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
        if out.len() > 300 {
            out.push_str("...");
            break;
        }
    }
    out
}

// === impl Difference ===

impl Difference {
    fn new(s: &Obs, p: &Obs, why: String) -> Difference {
        let text = |o: &Obs| match &o.reply {
            Ok(f) => show(f),
            Err(e) => format!("({e})"),
        };
        let command = match s.kind {
            Kind::Message => format!("message on {}", String::from_utf8_lossy(&s.args[1])),
            _ => quote_args(&s.args),
        };
        Difference {
            step: s.step,
            conn: s.conn,
            command,
            single: text(s),
            proxy: text(p),
            why,
        }
    }

    /// What identifies this difference across sequences (and keeps the
    /// shrinker on it): the command's name, why, and the first word of
    /// each side's reply (`-NOSCRIPT` against `:1`).
    pub fn signature(&self) -> String {
        let args = crate::sequence::split_args(&self.command).unwrap_or_default();
        let head = |text: &str| {
            let end = text.find([' ', '\\']).unwrap_or(text.len()).min(24);
            text.get(..end).unwrap_or_default().to_string()
        };
        format!(
            "{} ({}: {} against {})",
            command_name(&args),
            self.why,
            head(&self.single),
            head(&self.proxy)
        )
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "step {} on conn {}: {}\n  single:  {}\n  orthrus: {}\n  ({})",
            self.step + 1,
            self.conn,
            self.command,
            self.single,
            self.proxy,
            self.why
        )
    }
}
