//! `ferrouter-lab lab demo`: the README's first command. Three namespaces, ferrouter
//! forwarding between them, ping/ping6/TCP/UDP through it, its counters printed.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use control::render::{counters, interfaces};
use serde_json::Value;

fn need(tool: &str, package: &str) -> Result<()> {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        bail!("{tool} is not installed: apt-get install {package} (scripts/demo.sh installs it)");
    }
    Ok(())
}

fn ping(lab: &lab::Lab, ns: &str, v6: bool, dst: &str) -> Result<String> {
    let mut args = vec!["ping", "-c", "3", "-i", "0.2", "-W", "2"];
    if v6 {
        args.insert(1, "-6");
    }
    args.push(dst);
    let out = lab.exec_status(ns, &args)?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("ping {dst} from {ns} failed:\n{text}");
    }
    Ok(text.lines().last().unwrap_or("").to_string())
}

fn iperf(lab: &lab::Lab, udp: bool, seconds: u32) -> Result<Value> {
    let _server = lab
        .iperf3_server(lab::H2_V4)
        .context("starting iperf3 server")?;
    let t = seconds.to_string();
    let mut args = vec!["iperf3", "-c", lab::H2_V4, "-t", &t, "-J"];
    if udp {
        // Small datagrams at an unlimited rate: a packets-per-second test, not a bandwidth test.
        args.extend_from_slice(&["-u", "-b", "0", "-l", "64"]);
    }
    let out = lab.exec_status(&lab.h1(), &args)?;
    let v: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("iperf3 output: {}", String::from_utf8_lossy(&out.stderr)))?;
    if let Some(e) = v.get("error") {
        bail!("iperf3: {e}");
    }
    Ok(v)
}

/// `ferrouter-lab lab demo`; `ferrouter` is the daemon binary the lab runs.
pub fn lab_demo(lab: &lab::Lab, ferrouter: &Path, seconds: u32) -> Result<()> {
    need("iperf3", "iperf3")?;
    need("ping", "iputils-ping")?;
    lab.down();
    println!(
        "building lab {}: {} <-> {} (ferrouter) <-> {}",
        lab.prefix,
        lab.h1(),
        lab.rtr(),
        lab.h2()
    );
    lab.up(ferrouter)?;
    let _guard = lab::Guard(lab.clone());
    let client = control::client::Client::new(control::client::Endpoint::Unix(lab.socket()));
    print!(
        "{}",
        interfaces(&client.get_as::<Vec<control::model::Interface>>("/v1/interfaces")?)
    );
    println!();
    for (ns, v6, dst) in [
        (lab.h1(), false, lab::H2_V4),
        (lab.h1(), true, lab::H2_V6),
        (lab.h2(), false, lab::H1_V4),
        (lab.h2(), true, lab::H1_V6),
    ] {
        // On a cold lab the first packets wait for ARP/ND (the fast path punts them and asks
        // the kernel to resolve): retry a few rounds before calling it a failure.
        let mut result = ping(lab, &ns, v6, dst);
        for _ in 0..4 {
            if result.is_ok() {
                break;
            }
            result = ping(lab, &ns, v6, dst);
        }
        println!(
            "ping{} {ns} -> {dst}: {}",
            if v6 { "6" } else { "" },
            result?
        );
    }
    let tcp = iperf(lab, false, seconds)?;
    let bps = tcp["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    println!(
        "TCP h1 -> h2 ({seconds} s, iperf3): {:.1} Mbit/s",
        bps / 1e6
    );
    let udp = iperf(lab, true, seconds)?;
    let sum = &udp["end"]["sum"];
    let (pkts, lost) = (
        sum["packets"].as_f64().unwrap_or(0.0),
        sum["lost_packets"].as_f64().unwrap_or(0.0),
    );
    println!(
        "UDP 64-byte datagrams h1 -> h2 ({seconds} s, iperf3 -b 0): offered {:.0} pps, delivered {:.0} pps ({:.1}% lost)",
        pkts / seconds as f64,
        (pkts - lost) / seconds as f64,
        if pkts > 0.0 { 100.0 * lost / pkts } else { 0.0 }
    );
    println!();
    print!(
        "{}",
        interfaces(&client.get_as::<Vec<control::model::Interface>>("/v1/interfaces")?)
    );
    let c: control::model::Counters = client.get_as("/v1/counters")?;
    print!("{}", counters(&c));
    let kf = c.kernel_forwarded;
    if kf.ipv4 != Some(0) || kf.ipv6 != Some(0) {
        bail!(
            "the kernel forwarded packets in {} (or /proc/net/snmp could not be read): ipv4 {:?}, ipv6 {:?}",
            lab.rtr(),
            kf.ipv4,
            kf.ipv6
        );
    }
    println!("\nevery forwarded packet went through ferrouter's fast path (kernel forwarded 0); tearing down");
    Ok(())
}
