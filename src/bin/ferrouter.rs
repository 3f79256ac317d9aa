//! `ferrouter`: the router daemon (`run`) and its CLI (`show`, `config`, `trace`,
//! `capture`), clients of the daemon's API. The test bench (lab, benchmarks, traffic
//! generator) is the separate `ferrouter-lab` binary; this one links none of it.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use control::model;

/// `ferrouter --version`: the package version and the commit it was built from (see
/// build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("FERROUTER_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "ferrouter",
    version = VERSION,
    about = "High-performance userspace router fast path beside the Linux stack"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// How the CLI reaches the daemon's API.
#[derive(Args, Clone)]
struct ApiArgs {
    /// Control socket (local access).
    #[arg(long, default_value = "/run/ferrouter/ferrouter.sock", global = true)]
    socket: std::path::PathBuf,
    /// Reach the daemon over TCP instead, at HOST:PORT (its `[api] listen`).
    #[arg(long, value_name = "HOST:PORT", global = true)]
    api: Option<String>,
    /// With --api: the file holding the bearer token (FERROUTER_TOKEN is used if unset).
    #[arg(long, global = true)]
    token_file: Option<std::path::PathBuf>,
}

impl ApiArgs {
    fn client(&self) -> Result<control::client::Client> {
        use control::client::{Client, Endpoint};
        let Some(addr) = &self.api else {
            return Ok(Client::new(Endpoint::Unix(self.socket.clone())));
        };
        let token = match &self.token_file {
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .with_context(|| format!("reading --token-file {}", p.display()))?
                    .trim()
                    .to_string(),
            ),
            None => std::env::var("FERROUTER_TOKEN").ok(),
        };
        Ok(Client::new(Endpoint::Tcp {
            addr: addr.clone(),
            token,
        }))
    }
}

#[derive(Subcommand)]
enum TraceCmd {
    /// Trace the next N matching packets (per worker).
    Add {
        /// How many.
        n: u32,
        /// Only packets received on this port (name or number).
        #[arg(long)]
        port: Option<String>,
        /// Match expression, e.g. "ip4 and dst 10.0.0.0/8 and proto udp and port 53"
        /// (ip4, ip6, arp, src|dst|host ADDR[/LEN], proto NAME|N, port N; not; and).
        #[arg(long = "match")]
        expr: Option<String>,
    },
    /// Print the traced packets.
    Show {
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Disarm and forget the traced packets.
    Clear,
}

#[derive(Subcommand)]
enum ConntrackCmd {
    /// Remove the flows that match (all of them without a filter); the next packet of a
    /// removed flow is new again.
    Flush {
        /// Only flows with an end in this address or prefix.
        address: Option<String>,
        /// Only flows of this protocol (tcp, udp, icmp, ... or a number).
        #[arg(long)]
        protocol: Option<String>,
        /// Only flows with an end on this port.
        #[arg(long)]
        port: Option<u16>,
    },
}

#[derive(Subcommand)]
enum IpsecCmd {
    /// SAs through the API, beside the config's (kept until a restart).
    Sa {
        #[command(subcommand)]
        cmd: IpsecSaCmd,
    },
    /// IKE: bring up (or restart) the IKE SA of an [[ipsec.peer]].
    Initiate {
        /// The peer's name.
        peer: String,
    },
    /// IKE: delete a peer's IKE SAs and their child SAs (an initiating peer stays down
    /// until `initiate`, a config apply or a restart).
    Terminate {
        /// The peer's name.
        peer: String,
    },
}

#[derive(Subcommand)]
enum IpsecSaCmd {
    /// Install a manually keyed SA on a tunnel (an outbound one becomes the tunnel's
    /// transmit SA, replacing the one the API gave it before). Its key is read from a key
    /// file as the config's `key_file` (owner-only permissions), never from the command line.
    Add {
        /// The tunnel (an [[ipsec.tunnel]]).
        #[arg(long)]
        tunnel: String,
        /// out or in.
        #[arg(long)]
        direction: String,
        /// SPI (decimal or 0x hex), 256 and above.
        #[arg(long, value_parser = parse_spi)]
        spi: u32,
        /// aes-128-gcm, aes-256-gcm, chacha20-poly1305, aes-128-cbc, aes-256-cbc, null.
        #[arg(long)]
        encryption: String,
        /// none (the AEADs), hmac-sha1-96, hmac-sha2-256-128, hmac-sha2-512-256.
        #[arg(long)]
        integrity: Option<String>,
        /// The key file (TOML: a table per key with encryption and integrity in hex).
        #[arg(long)]
        key_file: std::path::PathBuf,
        /// The key's name in it.
        #[arg(long)]
        key: String,
        /// Extended sequence numbers.
        #[arg(long)]
        esn: bool,
        /// Anti-replay window (inbound).
        #[arg(long)]
        replay_window: Option<u32>,
    },
    /// Remove an SA the API installed.
    Delete {
        /// out or in.
        #[arg(long)]
        direction: String,
        /// SPI (decimal or 0x hex).
        #[arg(long, value_parser = parse_spi)]
        spi: u32,
    },
}

fn parse_spi(s: &str) -> std::result::Result<u32, String> {
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|_| format!("{s:?} is not a 32-bit SPI (decimal or 0x hex)"))
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Validate FILE: every problem with its line:column and what is expected. Runs here
    /// (no daemon needed); with --api, the daemon checks it, and also shows the plan.
    Check {
        /// Config file (TOML).
        file: std::path::PathBuf,
    },
    /// Apply FILE as one transaction: all of it, or nothing. It becomes the running config,
    /// saved to the daemon's config file and recorded in the history.
    Apply {
        /// Config file (TOML).
        file: std::path::PathBuf,
        /// Why (kept in the history).
        #[arg(long)]
        comment: Option<String>,
    },
    /// Unified diff from the running config to FILE; without FILE, from the previous
    /// config to the running one.
    Diff {
        /// Candidate config file.
        file: Option<std::path::PathBuf>,
    },
    /// Re-apply the config N applies back (1 = the previous one), as a new transaction.
    Rollback {
        /// How many back.
        #[arg(default_value_t = 1)]
        n: usize,
    },
    /// The history of applied configs.
    History,
    /// Print the running config, or history entry ID.
    Show {
        /// History entry.
        id: Option<u64>,
    },
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the router: open the configured ports, mirror the kernel's state, forward.
    Run {
        /// Config file (TOML).
        #[arg(long, default_value = "/etc/ferrouter/ferrouter.toml")]
        config: std::path::PathBuf,
        /// Log format on stdout: text, or json (one object per line, for journald/log
        /// shippers). The level comes from RUST_LOG (default info), e.g.
        /// RUST_LOG=control=debug,info.
        #[arg(long, default_value = "text", value_parser = ["text", "json"])]
        log_format: String,
    },
    /// Ask a running router (over its control socket).
    Show {
        /// interfaces | routes | neighbors | counters | bgp | firewall | conntrack | nat |
        /// ipsec | ike | qos
        what: String,
        /// For routes: a prefix (exact) or an address (longest match), or `summary`; for
        /// conntrack: an address or prefix one end of the flows lies in; for nat:
        /// `sessions`; for ipsec: `sa` or `tunnels` (both show tunnels and SAs); for ike:
        /// `sa` (the default), `child-sa` or `summary` (the counts, without the list).
        arg: Option<String>,
        /// For `nat sessions`: an IPv4 address, prefix or range any address of the
        /// sessions (before or after translation) lies in; for `ike sa` and `ike
        /// child-sa`: a peer's name (its SAs only).
        filter: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// The declarative config: check a file, apply it as one transaction, diff, roll back,
    /// and the history of applied configs.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Packet trace: the next N matching packets' path through the graph nodes, with each
    /// node's decision (as VPP's trace).
    Trace {
        #[command(subcommand)]
        cmd: TraceCmd,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// IPsec: SAs through the API (`show ipsec` lists them with the config's); IKE peers
    /// brought up and down (`show ike sa`).
    Ipsec {
        #[command(subcommand)]
        cmd: IpsecCmd,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Connection tracking: remove flows (`show conntrack` lists them).
    Conntrack {
        #[command(subcommand)]
        cmd: ConntrackCmd,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Capture frames on a port into a pcap file (tshark/wireshark read it).
    Capture {
        /// Port (name or number).
        port: String,
        /// rx, tx or both.
        #[arg(long, default_value = "both", value_parser = ["rx", "tx", "both"])]
        direction: String,
        /// Frames to capture.
        #[arg(long, default_value_t = 100)]
        count: u32,
        /// Bytes kept of each frame (default: all).
        #[arg(long)]
        snaplen: Option<u16>,
        /// Stop after this many seconds even if fewer frames came.
        #[arg(long, default_value_t = 10.0)]
        timeout: f64,
        /// Output file.
        #[arg(short = 'w', long = "write")]
        file: std::path::PathBuf,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Moved to `ferrouter-lab demo`.
    #[command(hide = true, disable_help_flag = true)]
    Demo(Moved),
    /// Moved to `ferrouter-lab bench`.
    #[command(hide = true, disable_help_flag = true)]
    Bench(Moved),
    /// Moved to `ferrouter-lab tester`.
    #[command(hide = true, disable_help_flag = true)]
    Tester(Moved),
    /// Moved to `ferrouter-lab lab`.
    #[command(hide = true, disable_help_flag = true)]
    Lab(Moved),
    /// Moved to `ferrouter-lab mrt`.
    #[command(hide = true, disable_help_flag = true)]
    Mrt(Moved),
}

/// The arguments of a command that moved to `ferrouter-lab`, whatever they are.
#[derive(Args)]
struct Moved {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// The old spelling of a test-bench command: say where it went, and fail.
fn moved(cmd: &str, m: &Moved) -> Result<()> {
    let rest = if m.args.is_empty() {
        String::new()
    } else {
        format!(" {}", m.args.join(" "))
    };
    bail!(
        "`ferrouter {cmd}` has moved to the test bench binary: run `ferrouter-lab {cmd}{rest}` (the daemon no longer links the lab, benchmarks or traffic generator; scripts/install.sh --with-lab installs ferrouter-lab)"
    )
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Run { config, log_format } => {
            init_logs(&log_format);
            tracing::info!(version = VERSION, config = %config.display(), "starting");
            let r = control::daemon::run(&config, VERSION, |sock| {
                tracing::info!(
                    "ready; try: ferrouter show interfaces --socket {}",
                    sock.display()
                );
                if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
                    tracing::warn!("telling systemd we are ready: {e}");
                }
            });
            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
            r
        }
        Cmd::Config { cmd, api } => config_cmd(cmd, &api),
        Cmd::Trace { cmd, api } => trace_cmd(cmd, &api),
        Cmd::Conntrack {
            cmd:
                ConntrackCmd::Flush {
                    address,
                    protocol,
                    port,
                },
            api,
        } => {
            let r = control::api::conntrack_flush_with(
                &api.client()?,
                address.as_deref(),
                protocol.as_deref(),
                port,
            )?;
            println!("{} flow(s) removed", r.removed);
            Ok(())
        }
        Cmd::Ipsec {
            cmd: IpsecCmd::Initiate { peer },
            api,
        } => ike_cmd(&api.client()?, "initiate", &peer),
        Cmd::Ipsec {
            cmd: IpsecCmd::Terminate { peer },
            api,
        } => ike_cmd(&api.client()?, "terminate", &peer),
        Cmd::Ipsec {
            cmd: IpsecCmd::Sa { cmd },
            api,
        } => {
            let client = api.client()?;
            let r: control::model::IpsecSaChanged = match cmd {
                IpsecSaCmd::Add {
                    tunnel,
                    direction,
                    spi,
                    encryption,
                    integrity,
                    key_file,
                    key,
                    esn,
                    replay_window,
                } => {
                    let keys = ipsec::config::Keys::read(&key_file).map_err(anyhow::Error::msg)?;
                    let k = keys
                        .get(&key)
                        .with_context(|| format!("no key {key:?} in {}", key_file.display()))?;
                    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
                    let body = control::model::IpsecSaBody {
                        tunnel,
                        direction,
                        spi,
                        encryption,
                        integrity,
                        encryption_key: hex(&k.encryption),
                        integrity_key: hex(&k.integrity),
                        esn,
                        replay_window,
                    };
                    client.send_as("POST", "/v1/ipsec/sa", &body)?
                }
                IpsecSaCmd::Delete { direction, spi } => client.send_as(
                    "DELETE",
                    &format!("/v1/ipsec/sa/{direction}/{spi:#x}"),
                    &serde_json::Value::Null,
                )?,
            };
            println!("SA {} {:#x} {}", r.direction, r.spi, r.result);
            Ok(())
        }
        Cmd::Capture {
            port,
            direction,
            count,
            snaplen,
            timeout,
            file,
            api,
        } => {
            let mut client = api.client()?;
            client.timeout = Duration::from_secs_f64(timeout.clamp(0.0, 3600.0) + 15.0);
            let body = model::CaptureBody {
                port,
                direction: Some(direction),
                count: Some(count),
                snaplen,
                timeout_s: Some(timeout),
            };
            let r = client.call(
                "POST",
                "/v1/capture",
                Some(("application/json", serde_json::to_vec(&body)?)),
            )?;
            if r.status != 200 {
                bail!("{}", r.error_message());
            }
            std::fs::write(&file, &r.body)
                .with_context(|| format!("writing {}", file.display()))?;
            let frames = control::capture::count_frames(&r.body).map_err(anyhow::Error::msg)?;
            println!("{frames} frame(s) written to {}", file.display());
            Ok(())
        }
        Cmd::Show {
            what,
            arg,
            filter,
            api,
            json,
        } => show(
            &api.client()?,
            &what,
            arg.as_deref(),
            filter.as_deref(),
            json,
        ),
        Cmd::Demo(m) => moved("demo", &m),
        Cmd::Bench(m) => moved("bench", &m),
        Cmd::Tester(m) => moved("tester", &m),
        Cmd::Lab(m) => moved("lab", &m),
        Cmd::Mrt(m) => moved("mrt", &m),
    }
}

fn trace_cmd(cmd: TraceCmd, api: &ApiArgs) -> Result<()> {
    let client = api.client()?;
    match cmd {
        TraceCmd::Add { n, port, expr } => {
            let body = model::TraceBody {
                count: n,
                port,
                expr,
            };
            let _: model::TraceArmed = client.send_as("POST", "/v1/trace", &body)?;
            println!("tracing the next {n} matching packet(s); see `ferrouter trace show`");
        }
        TraceCmd::Show { json } => {
            let v: model::TraceShow = client.get_as("/v1/trace")?;
            if json {
                println!("{}", serde_json::to_string(&v.traces)?);
            } else {
                print!("{}", v.text);
                if v.lost > 0 {
                    println!("({} trace records lost: queue full)", v.lost);
                }
            }
        }
        TraceCmd::Clear => {
            let _: model::TraceCleared = client.call("DELETE", "/v1/trace", None)?.ok_as()?;
            println!("trace cleared");
        }
    }
    Ok(())
}

fn read_file(p: &std::path::Path) -> Result<String> {
    std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
}

fn print_applied(v: &model::Applied) {
    for step in &v.changed {
        println!("{step}");
    }
    match v.history_id {
        Some(id) => println!(
            "applied: {} change(s), {} already in place; history entry {id}",
            v.changed.len(),
            v.unchanged.len()
        ),
        None => println!("no changes: the running config is the same"),
    }
}

fn config_cmd(cmd: ConfigCmd, api: &ApiArgs) -> Result<()> {
    let client = api.client()?;
    match cmd {
        ConfigCmd::Check { file } => {
            let text = read_file(&file)?;
            if api.api.is_none() {
                // Locally: the same checks the daemon makes, in this network namespace.
                let cfg = control::config::Config::parse(&text, &file)
                    .map_err(|p| anyhow::anyhow!("{p}"))?;
                control::config::check_system(&cfg, &text, &file)
                    .map_err(|p| anyhow::anyhow!("{p}"))?;
                let warnings = cfg.warnings(&text);
                for w in &warnings {
                    println!(
                        "{}:{}:{}: warning: {}: {}",
                        file.display(),
                        w.line,
                        w.column,
                        w.path,
                        w.message
                    );
                }
                match warnings.len() {
                    0 => println!("{}: valid", file.display()),
                    n => println!("{}: valid, with {n} warning(s)", file.display()),
                }
                return Ok(());
            }
            let body = model::ConfigBody {
                text,
                file: Some(file.display().to_string()),
                comment: None,
            };
            let r = client.call(
                "POST",
                "/v1/config/check",
                Some(("application/json", serde_json::to_vec(&body)?)),
            )?;
            if r.status != 200 {
                bail!("{}", r.error_message());
            }
            let v: model::CheckResult = r.body_as()?;
            println!("{}: valid; applying it would:", file.display());
            if v.plan.is_empty() {
                println!("  change nothing");
            }
            for s in v.plan {
                println!("  {s}");
            }
            Ok(())
        }
        ConfigCmd::Apply { file, comment } => {
            let text = read_file(&file)?;
            let body = model::ConfigBody {
                text,
                file: Some(file.display().to_string()),
                comment,
            };
            let v: model::Applied = client.send_as("POST", "/v1/config/apply", &body)?;
            print_applied(&v);
            Ok(())
        }
        ConfigCmd::Diff { file } => {
            let text = file.as_deref().map(read_file).transpose()?;
            let v: model::ConfigDiff =
                client.send_as("POST", "/v1/config/diff", &model::DiffBody { text })?;
            print!("{}", v.diff);
            Ok(())
        }
        ConfigCmd::Rollback { n } => {
            let v: model::Applied = client.send_as(
                "POST",
                "/v1/config/rollback",
                &model::RollbackBody { steps: n },
            )?;
            print_applied(&v);
            Ok(())
        }
        ConfigCmd::History => {
            let v: Vec<model::HistoryEntry> = client.get_as("/v1/config/history")?;
            println!(
                "{:>6}  {:<20} {:>7}  comment",
                "id", "applied (UTC)", "bytes"
            );
            for e in v {
                println!(
                    "{:>6}  {:<20} {:>7}  {}",
                    e.id,
                    utc(e.time),
                    e.bytes,
                    e.comment.as_deref().unwrap_or("")
                );
            }
            Ok(())
        }
        ConfigCmd::Show { id } => {
            let text = match id {
                Some(id) => {
                    client
                        .get_as::<model::HistoryText>(&format!("/v1/config/history/{id}"))?
                        .text
                }
                None => client.get_as::<model::ConfigText>("/v1/config")?.text,
            };
            print!("{text}");
            Ok(())
        }
    }
}

/// RFC 3339 of a Unix time, UTC.
fn utc(t: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(t)).to_string()
}

/// Structured logs on stdout (journald keeps them under systemd), level from RUST_LOG.
fn init_logs(format: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let b = tracing_subscriber::fmt().with_env_filter(filter);
    if format == "json" {
        b.json().with_current_span(false).init();
    } else {
        b.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init();
    }
}

/// `ipsec initiate|terminate PEER`.
fn ike_cmd(client: &control::client::Client, verb: &str, peer: &str) -> Result<()> {
    let r: control::model::IkeChanged = client.send_as(
        "POST",
        &format!("/v1/ike/{verb}/{peer}"),
        &serde_json::Value::Null,
    )?;
    match r.result.as_str() {
        "terminated" => println!("peer {}: {} IKE SA(s) deleted", r.peer, r.sas),
        _ => println!("peer {}: {}", r.peer, r.result),
    }
    Ok(())
}

fn show(
    client: &control::client::Client,
    what: &str,
    arg: Option<&str>,
    filter: Option<&str>,
    json: bool,
) -> Result<()> {
    let v = match (what, arg, filter) {
        ("nat", Some("sessions"), Some(f)) => control::api::Shown::NatSessions(
            control::api::nat_sessions_with(client, Some(f), None)?,
        ),
        ("ike", _, Some(peer)) => control::api::ike_peer_with(client, arg, peer)?,
        (_, _, Some(f)) => {
            anyhow::bail!("unexpected {f:?}: only `show nat sessions` and `show ike sa|child-sa PEER` take a filter")
        }
        _ => control::api::request_with(client, what, arg)?,
    };
    if json {
        println!("{}", serde_json::to_string(&v)?);
        return Ok(());
    }
    print!("{}", control::render::render(&v));
    Ok(())
}
