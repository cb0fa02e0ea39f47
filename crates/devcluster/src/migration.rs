//! Moving a slot between masters the way redis-cli's resharding does, one
//! step per call, so that a test can stop with the slot half moved and look
//! at MOVED/ASK behaviour in between.

use std::time::{Duration, Instant};

use orthrus_resp::Value;

use crate::cluster::Cluster;
use crate::{DevError, SLOT_COUNT};

/// Keys per MIGRATE in [`Cluster::move_slot`].
const MOVE_BATCH: usize = 100;
/// MIGRATE's own timeout for one batch, in milliseconds.
const MIGRATE_TIMEOUT_MS: &str = "5000";
/// Bound on a whole [`Cluster::move_slot`] key transfer.
const MOVE_TIMEOUT: Duration = Duration::from_secs(60);

// === impl Cluster (migration) ===

impl Cluster {
    /// Marks `slot` IMPORTING on `to`, then MIGRATING on `from` (in that
    /// order, so that no ASK ever points at a node that would refuse it).
    pub fn begin_migration(&self, slot: u16, from: usize, to: usize) -> Result<(), DevError> {
        check_slot(slot)?;
        let slot = slot.to_string();
        let from_id = self.node_id(from)?;
        let to_id = self.node_id(to)?;
        self.node(to)?
            .cmd_ok(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id])?;
        self.node(from)?
            .cmd_ok(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id])?;
        Ok(())
    }

    /// Moves up to `batch` keys of `slot` from `from` to `to` with one
    /// MIGRATE; returns how many it moved, 0 once the slot is empty on
    /// `from`.
    pub fn migrate_keys(
        &self,
        slot: u16,
        from: usize,
        to: usize,
        batch: usize,
    ) -> Result<usize, DevError> {
        check_slot(slot)?;
        let source = self.node(from)?;
        let target = self.node(to)?;
        let mut conn = source.connect()?;
        let reply = conn.cmd_ok(&[
            "CLUSTER",
            "GETKEYSINSLOT",
            &slot.to_string(),
            &batch.max(1).to_string(),
        ])?;
        let keys = match reply {
            Value::Array(keys) => keys,
            other => {
                return Err(DevError::Unexpected {
                    cmd: "CLUSTER GETKEYSINSLOT".into(),
                    detail: format!("{other:?}"),
                });
            }
        };
        if keys.is_empty() {
            return Ok(0);
        }
        let port = target.port().to_string();
        let mut args: Vec<&[u8]> = vec![
            b"MIGRATE",
            b"127.0.0.1",
            port.as_bytes(),
            b"",
            b"0",
            MIGRATE_TIMEOUT_MS.as_bytes(),
        ];
        if let Some(password) = &target.options().password {
            args.extend([&b"AUTH"[..], password.as_bytes()]);
        }
        args.push(b"KEYS");
        for key in &keys {
            match key {
                Value::Bulk(k) | Value::Simple(k) => args.push(k),
                other => {
                    return Err(DevError::Unexpected {
                        cmd: "CLUSTER GETKEYSINSLOT".into(),
                        detail: format!("key is {other:?}"),
                    });
                }
            }
        }
        conn.cmd_ok(&args)?;
        Ok(keys.len())
    }

    /// Gives `slot` to `to`: SETSLOT NODE on `to` first (it stops answering
    /// ASK-only), then on the previous owner (which must hold no keys of the
    /// slot any more), then on every other master, so that no master is left
    /// with a stale owner.
    pub fn finish_migration(&self, slot: u16, to: usize) -> Result<(), DevError> {
        check_slot(slot)?;
        let from = self.master_of_slot(slot)?;
        let to_id = self.node_id(to)?;
        let slot_text = slot.to_string();
        let setslot = ["CLUSTER", "SETSLOT", slot_text.as_str(), "NODE", &to_id];
        self.node(to)?.cmd_ok(&setslot)?;
        if from != to {
            self.node(from)?.cmd_ok(&setslot)?;
        }
        for m in self.masters()? {
            if m != to && m != from && self.node(m)?.is_live() {
                self.node(m)?.cmd_ok(&setslot)?;
            }
        }
        Ok(())
    }

    /// Gives `slot` to `to` in the awkward order some tools use: SETSLOT
    /// NODE on the previous owner first, on `to` only `gap` later, then on
    /// every other master. Meanwhile the previous owner answers MOVED to
    /// `to` and `to`, still importing, answers MOVED back: a client must
    /// keep following until the two agree.
    pub fn finish_migration_source_first(
        &self,
        slot: u16,
        to: usize,
        gap: Duration,
    ) -> Result<(), DevError> {
        check_slot(slot)?;
        let from = self.master_of_slot(slot)?;
        let to_id = self.node_id(to)?;
        let slot_text = slot.to_string();
        let setslot = ["CLUSTER", "SETSLOT", slot_text.as_str(), "NODE", &to_id];
        if from != to {
            self.node(from)?.cmd_ok(&setslot)?;
            std::thread::sleep(gap);
        }
        self.node(to)?.cmd_ok(&setslot)?;
        for m in self.masters()? {
            if m != to && m != from && self.node(m)?.is_live() {
                self.node(m)?.cmd_ok(&setslot)?;
            }
        }
        Ok(())
    }

    /// Moves `slot` and its keys to master `to`: begin, migrate every key,
    /// finish. Does nothing if `to` already owns it.
    pub fn move_slot(&self, slot: u16, to: usize) -> Result<(), DevError> {
        check_slot(slot)?;
        let from = self.master_of_slot(slot)?;
        if from == to {
            return Ok(());
        }
        self.begin_migration(slot, from, to)?;
        let deadline = Instant::now() + MOVE_TIMEOUT;
        while self.migrate_keys(slot, from, to, MOVE_BATCH)? > 0 {
            if Instant::now() >= deadline {
                return Err(DevError::Timeout {
                    what: format!("moving the keys of slot {slot} (after {MOVE_TIMEOUT:?})"),
                });
            }
        }
        self.finish_migration(slot, to)
    }
}

fn check_slot(slot: u16) -> Result<(), DevError> {
    if slot < SLOT_COUNT {
        Ok(())
    } else {
        Err(DevError::BadSpec {
            reason: format!("slot {slot} is not below {SLOT_COUNT}"),
        })
    }
}
