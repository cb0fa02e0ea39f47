//! Protected mode, as Redis's `protected-mode`: with no client password
//! and no user configured, orthrus serves only clients on the same host
//! (loopback addresses and the Unix socket); anyone else is told why and
//! closed, so that a proxy listening on `0.0.0.0` by mistake does not hand
//! the cluster (and its backend password) to whoever reaches the port.

use std::net::IpAddr;

use crate::config::Config;
use crate::observe::clients::ClientAddr;

/// What a refused client reads: Redis's explanation, with orthrus's
/// settings in place of Redis's.
pub const DENIED: &[u8] = b"-DENIED orthrus is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to orthrus you may adopt one of the following solutions: 1) Set a client password (client.password, client.password_file or the environment variable ORTHRUS_CLIENT__PASSWORD) or a user in [client.users]. 2) Alternatively disable protected mode by setting protected_mode = false in the configuration (or ORTHRUS_PROTECTED_MODE=false) and sending SIGHUP or restarting, but MAKE SURE orthrus is not publicly accessible from the internet if you do so. NOTE: You only need to do one of the above things in order for orthrus to start accepting connections from the outside.\r\n";

/// Whether protected mode turns `peer` away under `config`.
pub fn denies(config: &Config, peer: &ClientAddr) -> bool {
    config.protected_mode && is_open(config) && !is_local(peer)
}

/// No client password and no user: anyone connected is in.
pub fn is_open(config: &Config) -> bool {
    config.client.password.is_none() && config.client.users.is_empty()
}

/// On this host: a loopback address (127.0.0.0/8, ::1, or either mapped
/// into IPv6) or the Unix socket.
pub fn is_local(peer: &ClientAddr) -> bool {
    match peer {
        ClientAddr::Unix(_) => true,
        ClientAddr::Tcp(addr) => is_loopback(addr.ip()),
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UserConfig;
    use std::path::Path;
    use std::sync::Arc;

    fn tcp(addr: &str) -> ClientAddr {
        ClientAddr::Tcp(addr.parse().unwrap())
    }

    #[test]
    fn only_loopback_and_unix_clients_are_local() {
        for local in [
            "127.0.0.1:1",
            "127.9.8.7:1",
            "[::1]:1",
            "[::ffff:127.0.0.2]:1",
        ] {
            assert!(is_local(&tcp(local)), "{local}");
        }
        for remote in [
            "10.0.0.1:1",
            "0.0.0.0:1",
            "[::ffff:10.0.0.1]:1",
            "[fe80::1]:1",
            "128.0.0.1:1",
        ] {
            assert!(!is_local(&tcp(remote)), "{remote}");
        }
        assert!(is_local(&ClientAddr::Unix(Arc::from(Path::new("/tmp/s")))));
    }

    #[test]
    fn a_password_a_user_or_the_setting_turns_it_off() {
        let remote = tcp("10.1.2.3:5000");
        let mut config = Config::default();
        assert!(denies(&config, &remote));
        assert!(!denies(&config, &tcp("127.0.0.1:5000")));
        config.client.password = Some("pw".to_owned());
        assert!(!denies(&config, &remote));
        config.client.password = None;
        config
            .client
            .users
            .insert("alice".to_owned(), UserConfig::Password("pw".to_owned()));
        assert!(!denies(&config, &remote));
        config.client.users.clear();
        config.protected_mode = false;
        assert!(!denies(&config, &remote));
    }
}
