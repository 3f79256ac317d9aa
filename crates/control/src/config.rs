//! The daemon's configuration file (TOML). Unknown fields are errors: a typo must never be
//! silently ignored on a router.
//!
//! ```toml
//! # /etc/ferrouter/ferrouter.toml
//! control_socket = "/run/ferrouter/ferrouter.sock"
//! workers = 1
//!
//! [[port]]
//! name = "eth1"
//! backend = "auto"      # auto (AF_XDP, else AF_PACKET) | af_xdp | af_packet
//!
//! [[port]]
//! name = "eth2"
//!
//! [[port]]
//! name = "mif0"         # a TAP of this name is the port's face in Linux
//! backend = "memif"
//! memif_socket = "/run/ferrouter/memif.sock"
//! memif_role = "server" # server | client
//! memif_id = 0
//! mac = "02:fe:00:00:00:01"
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Port backend choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// AF_XDP if the interface takes it, else AF_PACKET (the reason is logged).
    #[default]
    Auto,
    /// AF_PACKET with a TPACKET_V3 ring (works on every interface).
    AfPacket,
    /// AF_XDP with the XDP program (native or generic XDP, zero-copy or copy).
    AfXdp,
    /// A memif shared-memory interface (libmemif / DPDK `net_memif` peers). The daemon
    /// creates a TAP interface of the port's name as its kernel face.
    Memif,
}

/// memif role (DPDK 22.11 names: server = listens, client = connects and allocates the
/// shared memory).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemifRole {
    /// Listen on the socket; the peer connects.
    #[default]
    Server,
    /// Connect to the peer's socket (retried until it appears).
    Client,
}

/// One port.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// Linux interface name in the daemon's network namespace.
    pub name: String,
    /// Backend.
    #[serde(default)]
    pub backend: Backend,
    /// memif only: the control socket path.
    #[serde(default)]
    pub memif_socket: Option<PathBuf>,
    /// memif only: role on that socket.
    #[serde(default)]
    pub memif_role: MemifRole,
    /// memif only: interface id on that socket (both peers must agree).
    #[serde(default)]
    pub memif_id: u32,
    /// memif only: the MAC of the port (and of its TAP), `aa:bb:cc:dd:ee:ff`; derived from
    /// the name if absent.
    #[serde(default)]
    pub mac: Option<String>,
}

/// Parse `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// The whole file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Unix socket of the control API (`ferrouter show`).
    #[serde(default = "default_socket")]
    pub control_socket: PathBuf,
    /// Worker threads (AF_PACKET ports are served by one worker).
    #[serde(default = "one")]
    pub workers: usize,
    /// Netlink receive buffer in bytes. Notifications have no flow control; when they
    /// overflow this buffer the daemon resyncs from a full dump.
    #[serde(default = "default_rcvbuf")]
    pub netlink_rcvbuf: usize,
    /// The API's TCP listener and its token (`[api]`; the unix socket is always on).
    #[serde(default)]
    pub api: crate::http::ApiSettings,
    /// Ports the fast path owns.
    #[serde(rename = "port", default)]
    pub ports: Vec<PortConfig>,
}

fn default_rcvbuf() -> usize {
    32 << 20
}

fn default_socket() -> PathBuf {
    PathBuf::from("/run/ferrouter/ferrouter.sock")
}

fn one() -> usize {
    1
}

/// Why a config file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// File could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Syntax or schema error, with its location.
    #[error("config {path}: {message}")]
    Parse {
        /// Path.
        path: PathBuf,
        /// The parser's message (line, column, what was expected).
        message: String,
    },
    /// Semantically invalid.
    #[error("config {path}: {message}")]
    Invalid {
        /// Path.
        path: PathBuf,
        /// What is wrong and how to fix it.
        message: String,
    },
}

impl Config {
    /// Read, parse and validate a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parse and validate text (`path` only labels messages).
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.into(),
            message: e.to_string(),
        })?;
        let invalid = |message: String| ConfigError::Invalid {
            path: path.into(),
            message,
        };
        if c.ports.is_empty() {
            return Err(invalid(
                "no [[port]] configured: the fast path needs at least one interface".into(),
            ));
        }
        if c.ports.len() > 64 {
            return Err(invalid(format!(
                "{} ports configured; at most 64 are supported",
                c.ports.len()
            )));
        }
        for (i, p) in c.ports.iter().enumerate() {
            if p.name.is_empty() || p.name.len() > 15 || p.name.contains(['/', ' ', '\0']) {
                return Err(invalid(format!("port[{i}].name {:?} is not a valid Linux interface name (1-15 characters, no '/' or spaces)", p.name)));
            }
            let memif_fields = p.memif_socket.is_some()
                || p.memif_role != MemifRole::Server
                || p.memif_id != 0
                || p.mac.is_some();
            if p.backend != Backend::Memif && memif_fields {
                return Err(invalid(format!("port[{i}] ({}): memif_socket, memif_role, memif_id and mac apply only to backend = \"memif\"", p.name)));
            }
            if p.backend == Backend::Memif {
                match &p.memif_socket {
                    None => return Err(invalid(format!("port[{i}] ({}): backend = \"memif\" needs memif_socket = \"/path/to/socket\"", p.name))),
                    Some(s) if !s.is_absolute() => return Err(invalid(format!("port[{i}] ({}): memif_socket {} must be an absolute path", p.name, s.display()))),
                    Some(_) => {}
                }
                if let Some(m) = &p.mac {
                    match parse_mac(m) {
                        Some(b) if b[0] & 1 == 0 && b != [0; 6] => {}
                        _ => {
                            return Err(invalid(format!(
                            "port[{i}] ({}): mac {m:?} is not a unicast MAC like 02:00:00:00:00:01",
                            p.name
                        )))
                        }
                    }
                }
                if c.ports[..i].iter().any(|q| {
                    q.backend == Backend::Memif
                        && q.memif_socket == p.memif_socket
                        && q.memif_id == p.memif_id
                }) {
                    return Err(invalid(format!(
                        "port[{i}] ({}): another port already uses memif_id {} on {}",
                        p.name,
                        p.memif_id,
                        p.memif_socket
                            .as_ref()
                            .map(|s| s.display().to_string())
                            .unwrap_or_default()
                    )));
                }
            }
            if c.ports[..i].iter().any(|q| q.name == p.name) {
                return Err(invalid(format!(
                    "port[{i}]: interface {:?} is listed twice",
                    p.name
                )));
            }
        }
        if !(4096..=1 << 30).contains(&c.netlink_rcvbuf) {
            return Err(invalid(format!(
                "netlink_rcvbuf = {} is out of range (4096..=1073741824 bytes)",
                c.netlink_rcvbuf
            )));
        }
        if let Some(m) = c.api.problem() {
            return Err(invalid(m));
        }
        if c.workers == 0 || c.workers > 64 {
            return Err(invalid(format!(
                "workers = {} is out of range (1..=64)",
                c.workers
            )));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Result<Config, ConfigError> {
        Config::parse(t, Path::new("test.toml"))
    }

    #[test]
    fn minimal_and_full() {
        let c = parse("[[port]]\nname = \"eth1\"\n").unwrap();
        assert_eq!(c.ports[0].backend, Backend::Auto);
        assert_eq!(c.workers, 1);
        let c = parse("workers = 1\ncontrol_socket = \"/tmp/x.sock\"\n[[port]]\nname = \"a\"\nbackend = \"af_packet\"\n[[port]]\nname = \"b\"\n").unwrap();
        assert_eq!(c.ports.len(), 2);
        assert_eq!(c.ports[0].backend, Backend::AfPacket);
    }

    #[test]
    fn rejections_say_what_and_where() {
        let e = parse("[[port]]\nname = \"eth1\"\nspeed = 10\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("speed") && e.contains("line 3"), "{e}");
        let e = parse("[[port]]\nname = \"eth1\"\n[[port]]\nname = \"eth1\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("listed twice"), "{e}");
        let e = parse("workers = 0\n[[port]]\nname = \"e\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("workers"), "{e}");
        let e = parse("").unwrap_err().to_string();
        assert!(e.contains("no [[port]]"), "{e}");
        let e = parse("[[port]]\nname = \"a/b\"\n").unwrap_err().to_string();
        assert!(e.contains("not a valid Linux interface name"), "{e}");
        let e = parse("[[port]]\nname = \"e\"\nbackend = \"dpdk\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("dpdk"), "{e}");
    }

    #[test]
    fn memif_ports() {
        let c = parse("[[port]]\nname = \"mif0\"\nbackend = \"memif\"\nmemif_socket = \"/run/m.sock\"\nmemif_role = \"client\"\nmemif_id = 3\nmac = \"02:00:00:00:00:01\"\n").unwrap();
        assert_eq!(c.ports[0].backend, Backend::Memif);
        assert_eq!(c.ports[0].memif_role, MemifRole::Client);
        assert_eq!(c.ports[0].memif_id, 3);
        let cases = [
            ("backend = \"memif\"\n", "needs memif_socket"),
            (
                "backend = \"memif\"\nmemif_socket = \"rel.sock\"\n",
                "absolute",
            ),
            ("memif_socket = \"/run/m.sock\"\n", "apply only to backend"),
            (
                "backend = \"memif\"\nmemif_socket = \"/m\"\nmac = \"01:00:00:00:00:01\"\n",
                "not a unicast MAC",
            ),
            (
                "backend = \"memif\"\nmemif_socket = \"/m\"\nmac = \"02:00:00:00:00\"\n",
                "not a unicast MAC",
            ),
            (
                "backend = \"memif\"\nmemif_socket = \"/m\"\nmemif_role = \"master\"\n",
                "master",
            ),
        ];
        for (body, want) in cases {
            let e = parse(&format!("[[port]]\nname = \"mif0\"\n{body}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{body}: {e}");
        }
        let two = "[[port]]\nname = \"a\"\nbackend = \"memif\"\nmemif_socket = \"/m\"\n[[port]]\nname = \"b\"\nbackend = \"memif\"\nmemif_socket = \"/m\"\n";
        assert!(parse(two)
            .unwrap_err()
            .to_string()
            .contains("already uses memif_id 0"));
        assert_eq!(
            parse_mac("02:fe:0a:0B:c:ff"),
            Some([2, 0xfe, 10, 11, 12, 255])
        );
        assert_eq!(parse_mac("02:fe:0a:0b:0c:ff:00"), None);
        assert_eq!(parse_mac("02:fe:0a:0b:0c:fff"), None);
    }
}
