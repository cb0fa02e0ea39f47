//! MONITOR through orthrus: one connection to every master, each sent
//! `MONITOR`, whatever they stream pushed to the client as it arrives
//! (Redis's own `+<time> [0 <addr>] "cmd" ...` lines, so a line says which
//! node ran the command). Ends when the client leaves or RESETs.

use std::rc::Rc;

use orthrus_cluster::NodeAddr;
use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

use crate::client::PushSink;
use crate::node::answer::error_reply;
use crate::node::client::Dialect;
use crate::node::conn;
use crate::node::frames::{Frame, FrameReader};
use crate::worker::WorkerCtx;

const MONITOR: &[u8] = b"*1\r\n$7\r\nMONITOR\r\n";

/// A client's MONITOR streams; dropping it closes them.
pub struct Monitor {
    streams: Vec<AbortHandle>,
}

impl Monitor {
    /// Starts streaming what every one of `masters` runs to `push`. The
    /// receivers fire as each master confirms (or fails): the client's +OK
    /// waits for them, so that what it sends next is seen.
    pub fn start(
        ctx: &Rc<WorkerCtx>,
        masters: Vec<NodeAddr>,
        push: &PushSink,
    ) -> (Monitor, Vec<oneshot::Receiver<()>>) {
        let (streams, ready) = masters
            .into_iter()
            .map(|addr| {
                let (tx, rx) = oneshot::channel();
                let task = stream(addr, ctx.clone(), push.clone(), tx);
                (ctx.spawn(task).abort_handle(), rx)
            })
            .unzip();
        (Monitor { streams }, ready)
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        for s in &self.streams {
            s.abort();
        }
    }
}

/// One node's MONITOR stream, until it fails or is aborted.
async fn stream(addr: NodeAddr, ctx: Rc<WorkerCtx>, push: PushSink, ready: oneshot::Sender<()>) {
    let mut ready = Some(ready);
    let stream = match conn::connect(&addr, Dialect::default(), &ctx.shared).await {
        Ok(s) => s,
        Err(e) => {
            push.push(error_reply(&format!(
                "ERR orthrus: cannot MONITOR {addr}: {e}"
            )));
            return;
        }
    };
    let mut lines = FrameReader::new(stream, usize::MAX);
    let stream = lines.get_mut();
    if stream.write_all(MONITOR).await.is_err() || stream.flush().await.is_err() {
        return;
    }
    // A malformed line ends the stream as a lost connection does: the
    // client is told, and nothing piles up unread.
    while let Ok(Frame::Reply(line) | Frame::Push(line)) = lines.next(1).await {
        match ready.take() {
            // The node's own +OK: orthrus's goes to the client.
            Some(tx) => {
                let _ = tx.send(());
            }
            None => push.push(line),
        }
    }
    push.push(error_reply(&format!(
        "ERR orthrus: MONITOR of {addr} ended"
    )));
}
