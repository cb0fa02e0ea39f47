//! One direction of one relayed connection: read what arrives, hold it as
//! the standing fault says, write it on.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use super::{
    Direction, END_RESET, Fault, Inner, Link, NO_CUT, POLL, RUNNING, is_timeout, write_fully,
};

const READ_CHUNK: usize = 16 * 1024;
/// Bytes a pump holds at most; past it, it stops reading and TCP pushes
/// back on the sender.
const MAX_HELD: usize = 4 * 1024 * 1024;

/// Bytes read and when they may be written.
struct Held {
    due: Instant,
    bytes: Vec<u8>,
}

/// The state of one direction.
struct Pump<'a> {
    inner: &'a Inner,
    link: &'a Link,
    dir: Direction,
    held: VecDeque<Held>,
    held_bytes: usize,
    /// The latest due time given: a later chunk is never due before it,
    /// so jitter does not reorder bytes.
    last_due: Instant,
    /// Throttle: bytes that may be written now, and when that was counted.
    tokens: u64,
    counted_at: Instant,
    eof: bool,
}

/// Runs until the connection ends, the relay stops, or `from` closes and
/// everything read from it is written.
pub(super) fn run(
    inner: &Inner,
    link: &Link,
    mut from: TcpStream,
    mut to: TcpStream,
    dir: Direction,
) {
    let now = Instant::now();
    let mut pump = Pump {
        inner,
        link,
        dir,
        held: VecDeque::new(),
        held_bytes: 0,
        last_due: now,
        tokens: 0,
        counted_at: now,
        eof: false,
    };
    let mut buf = vec![0; READ_CHUNK];
    while !inner.stopped() && link.ended() == RUNNING {
        let fault = inner.fault();
        if fault == Fault::BlackHole {
            thread::sleep(POLL);
            continue;
        }
        if !pump.eof && pump.held_bytes < MAX_HELD {
            if pump.read(&mut from, &mut buf, fault).is_err() {
                return;
            }
        } else {
            thread::sleep(pump.wait());
        }
        // Looked at again: the fault may have changed during the read.
        let fault = inner.fault();
        if fault == Fault::BlackHole {
            continue;
        }
        if pump.write(&mut to, fault).is_err() {
            return;
        }
        if pump.eof && pump.held.is_empty() {
            return;
        }
    }
}

// === impl Pump ===

impl Pump<'_> {
    /// How long to wait for input: until the next held chunk is due, at
    /// most [`POLL`].
    fn wait(&self) -> Duration {
        let until_due = self
            .held
            .front()
            .map_or(POLL, |h| h.due.saturating_duration_since(Instant::now()));
        until_due.clamp(Duration::from_millis(1), POLL)
    }

    /// Reads what has arrived (waiting at most [`Pump::wait`]) and holds it.
    fn read(&mut self, from: &mut TcpStream, buf: &mut [u8], fault: Fault) -> io::Result<()> {
        from.set_read_timeout(Some(self.wait()))?;
        match from.read(buf) {
            Ok(0) => self.eof = true,
            Ok(n) => {
                let bytes = buf.get(..n).unwrap_or_default().to_vec();
                let arrived = Instant::now();
                let due = (arrived + self.delay(fault)).max(self.last_due);
                self.last_due = due;
                self.held_bytes += bytes.len();
                self.held.push_back(Held { due, bytes });
            }
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// What the standing fault adds to bytes read now.
    fn delay(&self, fault: Fault) -> Duration {
        match (self.dir, fault) {
            (Direction::ToClient, Fault::Delay { by, jitter }) => by + self.inner.jitter(jitter),
            _ => Duration::ZERO,
        }
    }

    /// Writes the held bytes that are due, as far as the throttle and an
    /// ordered cut allow. An error ends the connection.
    fn write(&mut self, to: &mut TcpStream, fault: Fault) -> io::Result<()> {
        let now = Instant::now();
        self.refill(fault, now);
        loop {
            let budget = self.cut_budget();
            let tokens = self.tokens;
            let Some(front) = self.held.front_mut().filter(|h| h.due <= now) else {
                break;
            };
            let mut n = front.bytes.len();
            if let Fault::Throttle { .. } = fault {
                n = n.min(usize::try_from(tokens).unwrap_or(usize::MAX));
            }
            n = n.min(usize::try_from(budget).unwrap_or(usize::MAX));
            let (link, inner) = (self.link, self.inner);
            let chunk = front.bytes.get(..n).unwrap_or_default();
            write_fully(to, chunk, || inner.stopped() || link.ended() != RUNNING)?;
            front.bytes.drain(..n);
            self.held_bytes -= n;
            self.tokens = self.tokens.saturating_sub(n as u64);
            if budget != NO_CUT {
                let left = budget - n as u64;
                self.link.cut_budget.store(left, Ordering::Relaxed);
                if left == 0 {
                    let how = self.link.cut_reset.load(Ordering::Relaxed);
                    self.link
                        .finish(if how { END_RESET } else { super::END_CLOSE });
                    return Err(io::Error::other("cut"));
                }
            }
            if front.bytes.is_empty() {
                self.held.pop_front();
            } else {
                break; // throttled: the rest waits for more tokens
            }
        }
        Ok(())
    }

    /// Bytes this direction may still pass before an ordered cut.
    fn cut_budget(&self) -> u64 {
        match self.dir {
            Direction::ToClient => self.link.cut_budget.load(Ordering::Relaxed),
            Direction::ToNode => NO_CUT,
        }
    }

    /// Throttle: adds the bytes earned since the last count, keeping at
    /// most a twentieth of a second's worth (the burst allowed).
    fn refill(&mut self, fault: Fault, now: Instant) {
        let Fault::Throttle { bytes_per_sec } = fault else {
            self.tokens = 0;
            self.counted_at = now;
            return;
        };
        let elapsed = now.saturating_duration_since(self.counted_at);
        let earned = u128::from(bytes_per_sec) * elapsed.as_micros() / 1_000_000;
        if earned > 0 {
            let cap = (bytes_per_sec / 20).max(1);
            let earned = u64::try_from(earned).unwrap_or(u64::MAX);
            self.tokens = self.tokens.saturating_add(earned).min(cap);
            self.counted_at = now;
        }
    }
}
