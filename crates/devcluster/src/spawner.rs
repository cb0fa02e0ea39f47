//! Spawning servers so that they die with the process that started them.
//!
//! Drop stops nodes on every normal return and on panics, but nothing runs
//! when the process itself is killed (a test harness timeout, Ctrl-C on
//! `cargo test`, SIGKILL of `orthrus-devcluster`), and the servers would
//! keep running, holding ports and memory. On Linux, servers are therefore
//! started through `setpriv --pdeathsig KILL` (util-linux, an Essential
//! package on Debian), which asks the kernel to SIGKILL the process once its
//! parent is gone and then execs the server, keeping the pid.
//!
//! The kernel's "parent" is the thread that forked, not the process, so a
//! node started from a short-lived thread (a test thread, the parallel start
//! of a cluster) would die with that thread. Every spawn is therefore done
//! by one thread that lives as long as the process. Without `setpriv`
//! (macOS) servers are spawned directly and only Drop cleans up.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::thread;

use crate::binaries::search_path;

/// A command to run and where to send the spawned child.
type Job = (Command, mpsc::Sender<io::Result<Child>>);

/// A `Command` that runs `server`, wrapped in `setpriv` where available
/// (spawn it with [`spawn`] so that it dies with this process).
pub fn server_command(server: &Path) -> Command {
    match setpriv() {
        Some(setpriv) => {
            let mut cmd = Command::new(setpriv);
            cmd.args(["--pdeathsig", "KILL", "--"]).arg(server);
            cmd
        }
        None => Command::new(server),
    }
}

/// Spawns `cmd` from the long-lived spawner thread.
pub fn spawn(mut cmd: Command) -> io::Result<Child> {
    let Some(spawner) = spawner() else {
        return cmd.spawn();
    };
    let (reply_tx, reply_rx) = mpsc::channel();
    match spawner.send((cmd, reply_tx)) {
        Ok(()) => reply_rx
            .recv()
            .unwrap_or_else(|_| Err(io::Error::other("the spawner thread stopped"))),
        // The thread never returns, but if it ever did, spawn here.
        Err(mpsc::SendError((mut cmd, _))) => cmd.spawn(),
    }
}

fn setpriv() -> Option<&'static PathBuf> {
    static SETPRIV: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETPRIV
        .get_or_init(|| {
            if cfg!(target_os = "linux") {
                search_path("setpriv".as_ref())
            } else {
                None
            }
        })
        .as_ref()
}

fn spawner() -> Option<&'static mpsc::Sender<Job>> {
    static SPAWNER: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
    SPAWNER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            thread::Builder::new()
                .name("devcluster-spawner".into())
                .spawn(move || {
                    // The sender lives in a static, so this loop ends only
                    // with the process.
                    for (mut cmd, reply) in rx {
                        // The requester may have given up; nothing to do then.
                        let _ = reply.send(cmd.spawn());
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}
