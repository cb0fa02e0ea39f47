//! Moving one slot between masters online, in the order of the Redis
//! Cluster specification: IMPORTING on the destination, MIGRATING on the
//! source, the keys moved in batches with MIGRATE, then SETSLOT NODE on
//! the destination, the source and every other master. Each step can be
//! run again: a move interrupted anywhere is finished by the same call.

use anyhow::bail;
use orthrus_cluster::Slot;
use orthrus_resp::Value;

use super::cluster::{self, Links, Master, Migration};

/// Keys asked for and moved per MIGRATE.
const BATCH: usize = 100;
/// MIGRATE's timeout, in milliseconds.
const MIGRATE_TIMEOUT_MS: &str = "10000";

/// Moves `step.slot` from `step.from` to `step.to` (indexes into
/// `masters`), or finishes such a move left half-done; tells `progress`
/// the keys moved so far after each batch, and returns their number.
pub async fn move_slot(
    links: &mut Links,
    masters: &[Master],
    step: Migration,
    progress: &mut dyn FnMut(u64),
) -> anyhow::Result<u64> {
    let Migration { slot, from, to } = step;
    let (Some(src), Some(dst)) = (masters.get(from), masters.get(to)) else {
        bail!("slot {}: no such master", slot.get());
    };
    let n = slot.get().to_string();
    let n = n.as_bytes();
    // A move interrupted after the destination took the slot goes
    // straight to the keys still on the source (MIGRATE needs no slot
    // state) and the SETSLOT NODE calls that did not happen.
    if !owns(links, dst, slot).await? {
        if !owns(links, src, slot).await? {
            bail!(
                "slot {}: neither {} nor {} serves it; settle it by hand (CLUSTER SETSLOT ... NODE)",
                slot.get(),
                src.addr,
                dst.addr
            );
        }
        // Both ends marked, then the keys; a second IMPORTING or
        // MIGRATING of the same slot to the same node is accepted.
        setslot(links, dst, n, "IMPORTING", src).await?;
        setslot(links, src, n, "MIGRATING", dst).await?;
    }
    let moved = migrate_keys(links, (src, dst), n, progress).await?;
    // The destination first, so that it owns the slot before the source
    // starts sending clients there; then the source; then the others.
    setslot(links, dst, n, "NODE", dst).await?;
    setslot(links, src, n, "NODE", dst).await?;
    for (i, other) in masters.iter().enumerate() {
        if i != from && i != to {
            setslot(links, other, n, "NODE", dst).await?;
        }
    }
    Ok(moved)
}

/// `CLUSTER SETSLOT slot state node` sent to `on`, naming `node` by its id.
async fn setslot(
    links: &mut Links,
    on: &Master,
    slot: &[u8],
    state: &str,
    node: &Master,
) -> anyhow::Result<()> {
    let args: [&[u8]; 5] = [
        b"CLUSTER",
        b"SETSLOT",
        slot,
        state.as_bytes(),
        node.id.as_bytes(),
    ];
    links.call(&on.addr, &args).await?;
    Ok(())
}

/// Whether `master` still serves `slot` by its own account.
async fn owns(links: &mut Links, master: &Master, slot: Slot) -> anyhow::Result<bool> {
    let text = cluster::nodes_text(links, master).await?;
    let Some(line) = cluster::myself(&text) else {
        bail!("{}: CLUSTER NODES has no myself line", master.addr);
    };
    let n = slot.get();
    Ok(line.split(' ').skip(8).any(|range| {
        if range.starts_with('[') {
            return false;
        }
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        match (first.parse::<u16>(), last.parse::<u16>()) {
            (Ok(first), Ok(last)) => (first..=last).contains(&n),
            _ => false,
        }
    }))
}

/// Moves every key of the slot from `src` to `dst`, `BATCH` at a time, in
/// every database the source serves (a Valkey 9 cluster with
/// `cluster-databases` keeps a slot's keys in each).
async fn migrate_keys(
    links: &mut Links,
    (src, dst): (&Master, &Master),
    slot: &[u8],
    progress: &mut dyn FnMut(u64),
) -> anyhow::Result<u64> {
    let databases = links.databases(&src.addr).await?;
    let mut moved = 0_u64;
    for db in 0..databases {
        if databases > 1 {
            links
                .call(&src.addr, &[b"SELECT", db.to_string().as_bytes()])
                .await?;
        }
        moved = migrate_db_keys(links, (src, dst), (slot, db), moved, progress).await?;
    }
    if databases > 1 {
        links.call(&src.addr, &[b"SELECT", b"0"]).await?;
    }
    Ok(moved)
}

/// [`migrate_keys`] in database `db`, selected on the source's link;
/// `moved` so far, returned with this database's added.
async fn migrate_db_keys(
    links: &mut Links,
    (src, dst): (&Master, &Master),
    (slot, db): (&[u8], u32),
    mut moved: u64,
    progress: &mut dyn FnMut(u64),
) -> anyhow::Result<u64> {
    let batch = BATCH.to_string();
    let port = dst.addr.port().to_string();
    let db = db.to_string();
    loop {
        let reply = links
            .call(
                &src.addr,
                &[b"CLUSTER", b"GETKEYSINSLOT", slot, batch.as_bytes()],
            )
            .await?;
        let keys: Vec<&[u8]> = reply
            .as_array()
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_bytes)
            .collect();
        if keys.is_empty() {
            return Ok(moved);
        }
        let mut args: Vec<&[u8]> = vec![
            b"MIGRATE",
            dst.addr.host().as_bytes(),
            port.as_bytes(),
            b"",
            db.as_bytes(),
            MIGRATE_TIMEOUT_MS.as_bytes(),
        ];
        let auth = links.migrate_auth();
        args.extend(auth.iter().map(Vec::as_slice));
        args.push(b"KEYS");
        args.extend(keys.iter().copied());
        links.call(&src.addr, &args).await?;
        moved = moved.saturating_add(keys.len() as u64);
        progress(moved);
    }
}
