//! Orthrus in front of several upstreams: a configuration file that lives
//! as long as the test, and a start that waits for every upstream.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::Proxy;

/// A configuration file, removed on drop.
pub struct TempFile(pub PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// [`Proxy::start`], then waits until every upstream's topology is known
/// (`Proxy::start` waits for the default one's: a key of another upstream
/// sent before its first discovery gets `-CLUSTERDOWN ... not known yet`).
pub fn start_routed(seeds: &[SocketAddr], extra: &[&str]) -> Proxy {
    let proxy = Proxy::start(seeds, extra);
    wait_known(&proxy, None, Duration::from_secs(20));
    proxy
}

/// Waits until `INFO upstreams` shows every slot served by upstream
/// `only`, or by every upstream with `None`.
pub fn wait_known(proxy: &Proxy, only: Option<&str>, within: Duration) {
    orthrus_devcluster::wait_until(within, "upstreams known", || {
        let info = proxy
            .raw_command(&["INFO", "upstreams"])
            .map_err(|e| e.to_string())?;
        let info = String::from_utf8_lossy(&info);
        let prefix = only.map_or("upstream_".to_owned(), |name| format!("upstream_{name}:"));
        let lines: Vec<&str> = info.lines().filter(|l| l.starts_with(&prefix)).collect();
        if !lines.is_empty() && lines.iter().all(|l| l.contains("slots_covered=16384")) {
            Ok(())
        } else {
            Err(info.into_owned())
        }
    })
    .unwrap();
}

pub fn config_file(name: &str, text: &str) -> TempFile {
    let path =
        std::env::temp_dir().join(format!("orthrus-routes-{}-{name}.toml", std::process::id()));
    std::fs::write(&path, text).expect("write config");
    TempFile(path)
}
