//! The read-your-writes judgement of one key of one client, as a pure
//! state machine: what the client last had acknowledged, and whether a
//! read's reply may follow from it.
//!
//! A FLUSHALL makes a nil ambiguous. Its window is from just before it was
//! sent (`flush.sent`) to just after its reply came back (`flush.done`);
//! on each master it ran somewhere in that window. A nil read is allowed
//! when the flush may have run after the client's last write and before
//! the read: the write was sent before `flush.done`, the read ended after
//! `flush.sent`, and no read that started after `flush.done` has returned
//! the write's value since (that read proves the flush ran before the
//! write). After an allowed nil the key is gone: only nil may follow until
//! the next write. Any other reply than the last acknowledged value is a
//! violation. A write whose outcome orthrus said is unknown ("may or may
//! not have been applied") leaves the key unknown until the next write.

/// The FLUSHALL's window, nanoseconds since the run began: `sent` is
/// `u64::MAX` before it is sent, `done` until its reply came back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FlushWindow {
    pub(crate) sent: u64,
    pub(crate) done: u64,
}

/// What the client knows of one of its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expect {
    /// Nothing acknowledged yet, or a write's outcome unknown.
    Unknown,
    /// `seq` acknowledged, its write sent at `sent`; `survived` once a
    /// read after the FLUSHALL returned it.
    Value { seq: u64, sent: u64, survived: bool },
    /// Flushed: nil until the next write.
    Gone,
}

/// A read's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Judged {
    /// What the client may see.
    Fine,
    /// A nil the FLUSHALL explains.
    FlushedNil,
    /// An older (or never written) value than the last acknowledged one.
    OlderValue,
    /// A nil no FLUSHALL explains.
    LostWrite,
}

// === impl FlushWindow ===

impl FlushWindow {
    /// No FLUSHALL sent yet.
    pub(crate) const NONE: FlushWindow = FlushWindow {
        sent: u64::MAX,
        done: u64::MAX,
    };
}

// === impl Expect ===

impl Expect {
    /// The key after a write of `seq` sent at `sent` was acknowledged.
    pub(crate) fn written(seq: u64, sent: u64) -> Expect {
        Expect::Value {
            seq,
            sent,
            survived: false,
        }
    }

    /// Judges a read that ran from `start` to `end` and returned `got`
    /// (`None`: nil), and moves the state on.
    pub(crate) fn read(
        &mut self,
        got: Option<u64>,
        start: u64,
        end: u64,
        flush: FlushWindow,
    ) -> Judged {
        match (*self, got) {
            (Expect::Unknown, _) => Judged::Fine,
            (Expect::Gone, None) => Judged::Fine,
            (Expect::Gone, Some(_)) => Judged::OlderValue,
            (Expect::Value { seq, sent, .. }, Some(v)) => {
                if v != seq {
                    return Judged::OlderValue;
                }
                if start > flush.done && flush.done != u64::MAX {
                    *self = Expect::Value {
                        seq,
                        sent,
                        survived: true,
                    };
                }
                Judged::Fine
            }
            (Expect::Value { sent, survived, .. }, None) => {
                let may_have_flushed =
                    !survived && flush.sent != u64::MAX && flush.sent < end && sent < flush.done;
                if may_have_flushed {
                    *self = Expect::Gone;
                    Judged::FlushedNil
                } else {
                    Judged::LostWrite
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLUSH: FlushWindow = FlushWindow {
        sent: 100,
        done: 200,
    };

    #[test]
    fn the_last_acknowledged_value_and_nothing_older() {
        let mut k = Expect::written(3, 10);
        assert_eq!(k.read(Some(3), 20, 30, FlushWindow::NONE), Judged::Fine);
        assert_eq!(
            k.read(Some(2), 20, 30, FlushWindow::NONE),
            Judged::OlderValue
        );
        assert_eq!(k.read(None, 20, 30, FlushWindow::NONE), Judged::LostWrite);
        let mut unknown = Expect::Unknown;
        assert_eq!(unknown.read(Some(9), 1, 2, FlushWindow::NONE), Judged::Fine);
        assert_eq!(unknown.read(None, 1, 2, FlushWindow::NONE), Judged::Fine);
    }

    #[test]
    fn a_nil_is_allowed_only_where_the_flush_explains_it() {
        // Written before the flush, read during it: nil allowed, then
        // only nil.
        let mut k = Expect::written(3, 50);
        assert_eq!(k.read(None, 120, 130, FLUSH), Judged::FlushedNil);
        assert_eq!(k.read(None, 140, 150, FLUSH), Judged::Fine);
        assert_eq!(k.read(Some(3), 250, 260, FLUSH), Judged::OlderValue);
        // Written after the flush was done: nil is a lost write.
        let mut k = Expect::written(4, 210);
        assert_eq!(k.read(None, 220, 230, FLUSH), Judged::LostWrite);
        // Read back after the flush was done: it survived it.
        let mut k = Expect::written(5, 150);
        assert_eq!(k.read(Some(5), 205, 210, FLUSH), Judged::Fine);
        assert_eq!(k.read(None, 220, 230, FLUSH), Judged::LostWrite);
        // Read back during the flush: the flush may still come.
        let mut k = Expect::written(6, 150);
        assert_eq!(k.read(Some(6), 160, 170, FLUSH), Judged::Fine);
        assert_eq!(k.read(None, 180, 190, FLUSH), Judged::FlushedNil);
        // A read that ended before the flush was sent.
        let mut k = Expect::written(7, 10);
        assert_eq!(k.read(None, 20, 90, FLUSH), Judged::LostWrite);
        // The flush is on its way (done unknown): nil allowed.
        let mut k = Expect::written(8, 150);
        let going = FlushWindow {
            sent: 100,
            done: u64::MAX,
        };
        assert_eq!(k.read(None, 160, 170, going), Judged::FlushedNil);
    }
}
