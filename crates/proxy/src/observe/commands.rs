//! Per-command and per-error counters as orthrus sees them (INFO
//! commandstats and errorstats): every request a client sent, by command
//! name (`container|sub` for the commands Redis counts per subcommand),
//! with its time through orthrus, and every error reply by its first word.
//!
//! Each worker writes its own counters; INFO adds them up. A request of a
//! command the table knows is counted by the number its entry carries
//! (`route::counted`), in counters only its worker writes (plain loads and
//! stores, no lock: CONFIG RESETSTAT moves a baseline instead of writing
//! them); others by the name they sent, and errors by their name, in a
//! table behind the worker's own (uncontended) lock. Names are bounded (a
//! client sending made-up command names cannot grow them without end), as
//! Redis bounds its error names.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use rustc_hash::FxHashMap as HashMap;

use crate::observe::stats::worker_index;
use crate::route::counted::{self, is_container};

/// Longest command name counted (with `|sub`), in bytes.
const NAME_BUF: usize = 64;
/// Most command names one worker counts.
const MAX_COMMANDS: usize = 1024;
/// Most error names counted (Redis's `ERROR_STATS_NUMBER`).
const MAX_ERRORS: usize = 128;
/// Numbered counters come in chunks of this many, made on first use.
const CHUNK: usize = 64;
const CHUNKS: usize = counted::MAX_NAMES.div_ceil(CHUNK);

/// Every worker's counters.
pub struct CommandStats {
    workers: Vec<Worker>,
    /// The numbered counters' sums when CONFIG RESETSTAT ran, by number:
    /// readers subtract them.
    base: Mutex<Vec<Counters>>,
}

struct Worker {
    /// By the number of the command's name.
    numbered: [OnceLock<Box<[Numbered; CHUNK]>>; CHUNKS],
    table: Mutex<Table>,
}

/// One command's counters, written by one worker only.
#[derive(Default)]
struct Numbered {
    calls: AtomicU64,
    usec: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
}

#[derive(Default)]
struct Table {
    /// By the name sent, for what has no number.
    commands: HashMap<Vec<u8>, Counters>,
    errors: HashMap<Vec<u8>, u64>,
}

#[derive(Clone, Copy, Default)]
struct Counters {
    calls: u64,
    usec: u64,
    rejected: u64,
    failed: u64,
}

/// One finished request, as `record` takes it.
pub struct Call<'a> {
    /// The request as the client sent it.
    pub frame: &'a [u8],
    /// The number of its command-table entry, if it has one.
    pub stat: Option<u16>,
    /// Its time through orthrus.
    /// Microseconds from its read to its reply.
    pub took_us: u64,
    /// False when orthrus refused it before it ran.
    pub ran: bool,
    /// The reply (an error reply counts as failed, or rejected).
    pub reply: &'a [u8],
}

// === impl CommandStats ===

impl CommandStats {
    pub fn new(workers: usize) -> CommandStats {
        CommandStats {
            workers: (0..workers.max(1))
                .map(|_| Worker {
                    numbered: std::array::from_fn(|_| OnceLock::new()),
                    table: Mutex::default(),
                })
                .collect(),
            base: Mutex::default(),
        }
    }

    /// Counts one request of `worker`.
    pub fn record(&self, worker: usize, call: &Call<'_>) {
        let Some(this) = self.workers.get(worker_index(worker, self.workers.len())) else {
            return;
        };
        let error = error_name(call.reply);
        let usec = call.took_us;
        if let Some(id) = call.stat {
            if let Some(c) = this.numbered(usize::from(id)) {
                if call.ran {
                    add(&c.calls, 1);
                    add(&c.usec, usec);
                    add(&c.failed, u64::from(error.is_some()));
                } else {
                    add(&c.rejected, 1);
                }
            }
            if error.is_none() {
                return; // the common case: no lock taken
            }
        }
        let Ok(mut table) = this.table.lock() else {
            return;
        };
        let table = &mut *table;
        if call.stat.is_none() {
            let mut buf = [0u8; NAME_BUF];
            // A container's subcommand is counted by the name sent (as
            // `client|list`); an unknown command only among the errors.
            let name = command_name(call.frame, &mut buf)
                .filter(|name| name.contains(&b'|') || counted::known(name));
            if let Some(name) = name {
                let len = table.commands.len();
                let counters = match table.commands.get_mut(name) {
                    Some(c) => Some(c),
                    None if len < MAX_COMMANDS => {
                        Some(table.commands.entry(name.to_vec()).or_default())
                    }
                    None => None,
                };
                if let Some(c) = counters {
                    match call.ran {
                        false => c.rejected += 1,
                        true => {
                            c.calls += 1;
                            c.usec += usec;
                            c.failed += u64::from(error.is_some());
                        }
                    }
                }
            }
        }
        if let Some(error) = error {
            let len = table.errors.len();
            if let Some(n) = table.errors.get_mut(error) {
                *n += 1;
            } else if len < MAX_ERRORS {
                table.errors.insert(error.to_vec(), 1);
            }
        }
    }

    /// CONFIG RESETSTAT.
    pub fn reset(&self) {
        let sums = self.numbered_sums();
        if let Ok(mut base) = self.base.lock() {
            *base = sums;
        }
        for worker in &self.workers {
            if let Ok(mut t) = worker.table.lock() {
                *t = Table::default();
            }
        }
    }

    /// Every worker's numbered counters added up, by number (not less
    /// the baseline).
    fn numbered_sums(&self) -> Vec<Counters> {
        let mut sums: Vec<Counters> = Vec::new();
        for worker in &self.workers {
            for (chunk, cells) in worker.numbered.iter().enumerate() {
                let Some(cells) = cells.get() else { continue };
                let first = chunk * CHUNK;
                if sums.len() < first + CHUNK {
                    sums.resize(first + CHUNK, Counters::default());
                }
                for (sum, c) in sums.iter_mut().skip(first).zip(cells.iter()) {
                    sum.calls += c.calls.load(Ordering::Relaxed);
                    sum.usec += c.usec.load(Ordering::Relaxed);
                    sum.rejected += c.rejected.load(Ordering::Relaxed);
                    sum.failed += c.failed.load(Ordering::Relaxed);
                }
            }
        }
        sums
    }

    /// The lines of INFO commandstats, sorted by name.
    pub fn write_commands(&self, out: &mut String) {
        let mut all: HashMap<Vec<u8>, Counters> = HashMap::default();
        let add = |all: &mut HashMap<Vec<u8>, Counters>, name: &[u8], c: &Counters| {
            let sum = all.entry(name.to_vec()).or_default();
            sum.calls += c.calls;
            sum.usec += c.usec;
            sum.rejected += c.rejected;
            sum.failed += c.failed;
        };
        let base = self.base.lock().map(|b| b.clone()).unwrap_or_default();
        for (id, sum) in self.numbered_sums().iter().enumerate() {
            let c = match base.get(id) {
                Some(b) => Counters {
                    calls: sum.calls.saturating_sub(b.calls),
                    usec: sum.usec.saturating_sub(b.usec),
                    rejected: sum.rejected.saturating_sub(b.rejected),
                    failed: sum.failed.saturating_sub(b.failed),
                },
                None => *sum,
            };
            if c.calls + c.rejected == 0 {
                continue; // a number no request had (since RESETSTAT)
            }
            if let Some(name) = counted::name(id) {
                add(&mut all, name.as_bytes(), &c);
            }
        }
        for worker in &self.workers {
            let Ok(t) = worker.table.lock() else { continue };
            for (name, c) in &t.commands {
                add(&mut all, name, c);
            }
        }
        let mut names: Vec<_> = all.into_iter().collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, c) in names {
            let per_call = if c.calls == 0 {
                0.0
            } else {
                c.usec as f64 / c.calls as f64
            };
            let _ = write!(
                out,
                "cmdstat_{}:calls={},usec={},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}\r\n",
                String::from_utf8_lossy(&name),
                c.calls,
                c.usec,
                c.rejected,
                c.failed
            );
        }
    }

    /// Every error reply counted (INFO stats `total_error_replies`).
    pub fn total_errors(&self) -> u64 {
        self.workers
            .iter()
            .filter_map(|w| w.table.lock().ok().map(|t| t.errors.values().sum::<u64>()))
            .sum()
    }

    /// The lines of INFO errorstats, sorted by name.
    pub fn write_errors(&self, out: &mut String) {
        let mut all: HashMap<Vec<u8>, u64> = HashMap::default();
        for worker in &self.workers {
            let Ok(t) = worker.table.lock() else { continue };
            for (name, n) in &t.errors {
                *all.entry(name.clone()).or_default() += n;
            }
        }
        let mut names: Vec<_> = all.into_iter().collect();
        names.sort();
        for (name, n) in names {
            let _ = write!(
                out,
                "errorstat_{}:count={n}\r\n",
                String::from_utf8_lossy(&name)
            );
        }
    }
}

// === impl Worker ===

impl Worker {
    /// The counters numbered `id`, their chunk made on first use.
    #[inline]
    fn numbered(&self, id: usize) -> Option<&Numbered> {
        let chunk = self.numbered.get(id / CHUNK)?;
        let cells = chunk.get_or_init(|| Box::new(std::array::from_fn(|_| Numbered::default())));
        cells.get(id % CHUNK)
    }
}

/// `counter += n` for a counter that only the calling thread writes.
fn add(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// The command's name in lower case, with its subcommand for the commands
/// Redis counts per subcommand; from a multibulk or an inline request.
/// Written into `buf` (no allocation per request); `None` if longer.
fn command_name<'b>(frame: &[u8], buf: &'b mut [u8; NAME_BUF]) -> Option<&'b [u8]> {
    let mut words = words(frame);
    let first = words.next()?;
    let mut len = first.len();
    let dst = buf.get_mut(..len)?;
    dst.copy_from_slice(first);
    dst.make_ascii_lowercase();
    if is_container(dst) {
        if let Some(sub) = words.next() {
            let end = len + 1 + sub.len();
            let (bar, rest) = buf.get_mut(len..end)?.split_first_mut()?;
            *bar = b'|';
            rest.copy_from_slice(sub);
            rest.make_ascii_lowercase();
            len = end;
        }
    }
    buf.get(..len)
}

/// The first two arguments of a request.
fn words(frame: &[u8]) -> impl Iterator<Item = &[u8]> {
    let multibulk = frame.first() == Some(&b'*');
    let mut rest = frame;
    let mut taken = 0;
    std::iter::from_fn(move || {
        if taken == 2 {
            return None;
        }
        taken += 1;
        if multibulk {
            // Skip the `*N` line on the first call, then `$L\r\nARG\r\n`.
            if taken == 1 {
                rest = after_line(rest)?;
            }
            let header = rest.get(..rest.iter().position(|&b| b == b'\r')?)?;
            let len = decimal(header.get(1..)?)?;
            rest = after_line(rest)?;
            let arg = rest.get(..len)?;
            rest = rest.get(len + 2..).unwrap_or_default();
            Some(arg)
        } else {
            let start = rest.iter().position(|b| !b.is_ascii_whitespace())?;
            rest = rest.get(start..)?;
            let end = rest
                .iter()
                .position(u8::is_ascii_whitespace)
                .unwrap_or(rest.len());
            let (arg, tail) = rest.split_at(end);
            rest = tail;
            Some(arg)
        }
    })
}

/// A bulk length: ASCII digits, at most 10 of them (no sign, no `str`
/// parse: this runs for every request).
fn decimal(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() || digits.len() > 10 {
        return None;
    }
    digits.iter().try_fold(0usize, |n, &d| {
        d.is_ascii_digit().then(|| n * 10 + usize::from(d - b'0'))
    })
}

fn after_line(buf: &[u8]) -> Option<&[u8]> {
    let lf = buf.iter().position(|&b| b == b'\n')?;
    buf.get(lf + 1..)
}

/// The first word of an error reply (`WRONGTYPE`, `ERR`), or `None`.
fn error_name(reply: &[u8]) -> Option<&[u8]> {
    let text = match reply.first()? {
        b'-' => reply.get(1..)?,
        b'!' => after_line(reply)?,
        _ => return None,
    };
    let end = text
        .iter()
        .position(|b| b.is_ascii_whitespace())
        .unwrap_or(text.len());
    text.get(..end).filter(|w| !w.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call<'a>(frame: &'a [u8], ran: bool, reply: &'a [u8]) -> Call<'a> {
        Call {
            frame,
            stat: None,
            took_us: 10,
            ran,
            reply,
        }
    }

    #[test]
    fn bulk_lengths_are_digits_only() {
        assert_eq!(decimal(b"3"), Some(3));
        assert_eq!(decimal(b"0"), Some(0));
        assert_eq!(decimal(b"4294967296"), Some(4_294_967_296));
        assert_eq!(decimal(b""), None);
        assert_eq!(decimal(b"-1"), None);
        assert_eq!(decimal(b"1x"), None);
        assert_eq!(decimal(b"12345678901"), None);
    }

    #[test]
    fn names_from_multibulk_and_inline_requests() {
        let name = |frame: &[u8]| {
            let mut buf = [0u8; NAME_BUF];
            command_name(frame, &mut buf).map(<[u8]>::to_vec)
        };
        assert_eq!(
            name(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n").unwrap(),
            b"set"
        );
        assert_eq!(
            name(b"*2\r\n$6\r\nCLIENT\r\n$4\r\nList\r\n").unwrap(),
            b"client|list"
        );
        assert_eq!(name(b"  ping\r\n").unwrap(), b"ping");
        assert_eq!(name(b"config get x\r\n").unwrap(), b"config|get");
        assert_eq!(name(&[b'x'; 100]), None, "too long to count");
        assert_eq!(
            error_name(b"-WRONGTYPE Operation\r\n").unwrap(),
            b"WRONGTYPE"
        );
        assert_eq!(error_name(b"+OK\r\n"), None);
    }

    #[test]
    fn counts_calls_failures_and_refusals() {
        let stats = CommandStats::new(2);
        let geoadd = b"*2\r\n$6\r\nGEOADD\r\n$3\r\nfoo\r\n";
        // By the number of its table entry, and by name: one line.
        let numbered = Call {
            stat: counted::id("geoadd"),
            ..call(geoadd, true, b":1\r\n")
        };
        stats.record(0, &numbered);
        stats.record(1, &call(geoadd, true, b"-WRONGTYPE x\r\n"));
        // Counted by name: a command some table knows (numbered when a
        // table is built); an unknown one only among the errors.
        counted::id("sync");
        stats.record(1, &call(b"*1\r\n$4\r\nSYNC\r\n", false, b"-ERR no\r\n"));
        stats.record(
            0,
            &call(b"*1\r\n$5\r\nNOSUC\r\n", false, b"-ERR unknown\r\n"),
        );
        let mut out = String::new();
        stats.write_commands(&mut out);
        assert_eq!(
            out,
            "cmdstat_geoadd:calls=2,usec=20,usec_per_call=10.00,rejected_calls=0,failed_calls=1\r\n\
             cmdstat_sync:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0\r\n"
        );
        let mut out = String::new();
        stats.write_errors(&mut out);
        assert_eq!(
            out,
            "errorstat_ERR:count=2\r\nerrorstat_WRONGTYPE:count=1\r\n"
        );
        stats.reset();
        let mut out = String::new();
        stats.write_commands(&mut out);
        assert!(out.is_empty());
        assert_eq!(stats.total_errors(), 0);
        // Counted again from zero after the reset, on either worker.
        stats.record(1, &numbered);
        let mut out = String::new();
        stats.write_commands(&mut out);
        assert_eq!(
            out,
            "cmdstat_geoadd:calls=1,usec=10,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n"
        );
    }
}
