//! The server's limits, and the rule for which addresses it may listen on.

use std::net::SocketAddr;
use std::time::Duration;

/// Every bound of the server, set at start-up (nothing grows past them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// Largest READ or WRITE payload, in bytes (advertised as the maximum
    /// block size, capped further by the volume's largest request). TRIM
    /// and WRITE_ZEROES carry no payload and may be larger: they are split.
    pub max_payload_bytes: u32,
    /// Payload bytes (write data received, read data to send) in flight on
    /// one connection; the server stops reading requests past it.
    pub max_inflight_bytes_per_connection: u32,
    /// Requests in flight on one connection.
    pub max_inflight_requests_per_connection: u32,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Time a client has to finish option haggling.
    pub handshake_timeout: Duration,
    /// Options one client may send before the server gives up on it.
    pub max_options_per_handshake: u32,
    /// Largest option data read; bigger options are skipped and answered
    /// `NBD_REP_ERR_TOO_BIG` (up to [`Self::max_option_skip_bytes`]) or the
    /// connection is closed.
    pub max_option_bytes: u32,
    pub max_option_skip_bytes: u32,
    /// A WRITE refused before its payload is read (bad range, too large,
    /// read-only export) still has its payload on the wire: up to this many
    /// bytes are read and dropped so the connection stays usable; past it
    /// the connection is closed.
    pub max_write_skip_bytes: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_payload_bytes: 32 << 20,
            max_inflight_bytes_per_connection: 128 << 20,
            max_inflight_requests_per_connection: 256,
            max_connections: 64,
            handshake_timeout: Duration::from_secs(30),
            max_options_per_handshake: 256,
            max_option_bytes: 64 << 10,
            max_option_skip_bytes: 1 << 20,
            max_write_skip_bytes: 256 << 20,
        }
    }
}

impl ServerConfig {
    /// Writes, trims and zeroing one export's block lock table holds at
    /// once (every request in flight on every connection); more wait.
    pub(crate) fn max_tracked_writes(&self) -> usize {
        self.max_connections
            .saturating_mul(self.max_inflight_requests_per_connection as usize)
    }

    /// The config with its relationships restored: at least one request and
    /// one block in flight, and room in flight for the largest payload.
    pub(crate) fn normalized(mut self) -> Self {
        self.max_payload_bytes = self.max_payload_bytes.max(512);
        self.max_inflight_bytes_per_connection = self
            .max_inflight_bytes_per_connection
            .max(self.max_payload_bytes);
        self.max_inflight_requests_per_connection =
            self.max_inflight_requests_per_connection.max(1);
        self.max_connections = self.max_connections.max(1);
        self.max_options_per_handshake = self.max_options_per_handshake.max(1);
        self.max_option_bytes = self.max_option_bytes.max(4096 + 64);
        self
    }
}

/// The server refuses to listen where clients could reach it without TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenRefused {
    pub addr: SocketAddr,
}

impl std::fmt::Display for ListenRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "refusing to listen on {}: it is not a loopback address, and without TLS \
             the NBD traffic (the volume's data) would cross the network unencrypted and \
             unauthenticated. Configure TLS (--tls-cert and --tls-key, and --tls-client-ca \
             to admit only clients with a certificate from your CA), listen on 127.0.0.1 \
             or ::1, or pass --insecure-no-tls to accept the risk",
            self.addr
        )
    }
}

impl std::error::Error for ListenRefused {}

/// Loopback addresses are always allowed; any other address (including
/// the wildcard `0.0.0.0` / `::`) only when the server requires TLS
/// (`tls`), or with `insecure_no_tls`.
pub fn check_listen_address(
    addr: SocketAddr,
    tls: bool,
    insecure_no_tls: bool,
) -> Result<(), ListenRefused> {
    if addr.ip().is_loopback() || tls || insecure_no_tls {
        Ok(())
    } else {
        Err(ListenRefused { addr })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_without_tls_or_the_override() {
        let ok =
            |s: &str, insecure| check_listen_address(s.parse().unwrap(), false, insecure).is_ok();
        assert!(ok("127.0.0.1:10809", false));
        assert!(ok("127.0.0.2:1", false));
        assert!(ok("[::1]:10809", false));
        assert!(!ok("0.0.0.0:10809", false));
        assert!(!ok("[::]:10809", false));
        assert!(!ok("192.168.1.5:10809", false));
        assert!(ok("0.0.0.0:10809", true));
        assert!(check_listen_address("0.0.0.0:10809".parse().unwrap(), true, false).is_ok());
        let msg = check_listen_address("10.0.0.1:1".parse().unwrap(), false, false)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("--tls-cert") && msg.contains("--insecure-no-tls"));
    }

    #[test]
    fn normalized_keeps_room_for_one_payload() {
        let c = ServerConfig {
            max_payload_bytes: 1 << 20,
            max_inflight_bytes_per_connection: 1,
            max_inflight_requests_per_connection: 0,
            ..ServerConfig::default()
        }
        .normalized();
        assert!(c.max_inflight_bytes_per_connection >= c.max_payload_bytes);
        assert_eq!(c.max_inflight_requests_per_connection, 1);
    }
}
