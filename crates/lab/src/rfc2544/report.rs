//! The results of an RFC 2544 run: the reports' table layout, JSON and an SVG chart.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
/// Latency at the measured throughput, microseconds (min, avg, max, p99).
pub use tester::rfc2544::LatencyUs as Latency;

/// One offered-load trial (frame loss test).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LoadRow {
    /// Offered load, percent of the configured line rate.
    pub load_pct: f64,
    /// Frames per second the tester was asked to offer, millions.
    pub offered_mpps: f64,
    /// Frames per second it managed to send, millions (below `offered_mpps` when the
    /// transport, not the DUT, is the limit).
    pub sent_mpps: f64,
    /// Frames per second received back through the DUT, millions.
    pub rx_mpps: f64,
    /// Received bit rate at L1 (frame + 20 bytes of preamble and gap), Gbit/s.
    pub rx_gbps_l1: f64,
    /// Frames lost, percent of frames sent.
    pub loss_pct: f64,
}

/// Where one core's time went during a run (from /proc/stat), percent.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CoreSplit {
    /// Core number.
    pub core: usize,
    /// What ran there: "tester" or "dut".
    pub role: String,
    /// Userspace (the tester, ferrouter's worker, testpmd).
    pub user: f64,
    /// Kernel, outside interrupts (system calls: AF_XDP/AF_PACKET kicks, veth transmit).
    pub system: f64,
    /// Softirq (NAPI: veth receive, XDP, the kernel's forwarding path).
    pub softirq: f64,
    /// Idle.
    pub idle: f64,
    /// Stolen by the hypervisor.
    pub steal: f64,
}

/// One DUT × transport × profile.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Run {
    /// `ferrouter`, `linux` or `testpmd`.
    pub dut: String,
    /// `veth` or `memif`.
    pub transport: String,
    /// Traffic profile (`ipv4-64`, `imix2`, ...).
    pub profile: String,
    /// Flows (distinct 5-tuples) per direction.
    pub flows: u32,
    /// Traffic pattern in the reports' notation (`1pp - uni`, `1pp - bi`).
    pub pattern: String,
    /// IPv4/IPv6 ratio, e.g. `100/0`.
    pub ratio: String,
    /// Frame size column: bytes for uniform profiles, the IMIX name otherwise.
    pub frame_size: String,
    /// Mean frame size, bytes (with FCS).
    pub avg_frame: f64,
    /// IPv4 routes in the DUT's table.
    pub routes4: usize,
    /// IPv6 routes in the DUT's table.
    pub routes6: usize,
    /// The line rate loads are relative to, Gbit/s.
    pub line_rate_gbps: f64,
    /// Loss the throughput search tolerated, percent (0 = RFC 2544 zero loss).
    pub loss_tolerance_pct: f64,
    /// Throughput: the highest rate with no more loss than tolerated (RFC 2544 binary
    /// search), Mpps.
    pub throughput_mpps: f64,
    /// The same at L1, Gbit/s.
    pub throughput_gbps_l1: f64,
    /// Throughput as a percent of the line rate.
    pub throughput_load_pct: f64,
    /// Frame loss percent at each offered load ("25", "50", "75", "100").
    pub loss_at_load: BTreeMap<String, f64>,
    /// The frame-loss trials in full.
    pub loads: Vec<LoadRow>,
    /// Latency at the throughput rate (absent when throughput is 0).
    pub latency_us: Option<Latency>,
    /// Trials run.
    pub trials: usize,
    /// Where the two cores' time went over the whole run of this profile.
    pub cpu: Vec<CoreSplit>,
    /// What limited or qualified the run.
    pub notes: Vec<String>,
}

/// The whole report.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Report {
    /// Every run, in execution order.
    pub runs: Vec<Run>,
}

fn dut_label(r: &Run) -> String {
    format!("{}/{}", r.dut, r.transport)
}

impl Report {
    /// The frame-loss table in the reports' layout, followed by throughput and latency.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<7} {:<10} {:<9} {:<8} {:>8} {:>9} {:>9} {:>9} {:>10}  DUT",
            "Flows",
            "Pattern",
            "IPv4/v6",
            "Frame",
            "Load %",
            "Sent Mpps",
            "Mpps",
            "Gbps(L1)",
            "Loss %",
        );
        for r in &self.runs {
            for l in &r.loads {
                let _ = writeln!(
                    s,
                    "{:<7} {:<10} {:<9} {:<8} {:>8.0} {:>9.3} {:>9.3} {:>9.3} {:>10.3}  {}",
                    r.flows,
                    r.pattern,
                    r.ratio,
                    r.frame_size,
                    l.load_pct,
                    l.sent_mpps,
                    l.rx_mpps,
                    l.rx_gbps_l1,
                    l.loss_pct,
                    dut_label(r)
                );
            }
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<18} {:<9} {:>7} {:>8} {:>11} {:>10} {:>9} {:>9} {:>9} {:>9}",
            "DUT",
            "Profile",
            "Flows",
            "Routes4",
            "Tput Mpps",
            "Gbps(L1)",
            "Lat min",
            "avg",
            "max",
            "p99 µs"
        );
        for r in &self.runs {
            let lat = r.latency_us.unwrap_or_default();
            let _ = writeln!(
                s,
                "{:<18} {:<9} {:>7} {:>8} {:>11.3} {:>10.3} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                dut_label(r),
                r.profile,
                r.flows,
                r.routes4,
                r.throughput_mpps,
                r.throughput_gbps_l1,
                lat.min,
                lat.avg,
                lat.max,
                lat.p99
            );
        }
        let ratios = self.ratios();
        if !ratios.is_empty() {
            let _ = writeln!(s);
            for (what, v) in ratios {
                let _ = writeln!(s, "{what}: {v:.2}x");
            }
        }
        if self.runs.iter().any(|r| !r.cpu.is_empty()) {
            let _ = writeln!(s);
            let _ = writeln!(
                s,
                "CPU time during each run (% of the core: user / system / softirq / idle / steal)"
            );
            for r in &self.runs {
                let cores: Vec<String> = r
                    .cpu
                    .iter()
                    .map(|c| {
                        format!(
                            "core {} ({}): {:.0}/{:.0}/{:.0}/{:.0}/{:.0}",
                            c.core, c.role, c.user, c.system, c.softirq, c.idle, c.steal
                        )
                    })
                    .collect();
                let _ = writeln!(
                    s,
                    "{:<18} {:<9} {}",
                    dut_label(r),
                    r.profile,
                    cores.join("   ")
                );
            }
        }
        for r in &self.runs {
            for n in &r.notes {
                let _ = writeln!(s, "note ({} {}): {n}", dut_label(r), r.profile);
            }
        }
        s
    }

    /// Throughput ratios the targets are stated in, for each profile measured with both
    /// DUTs: ferrouter/memif ÷ testpmd/memif and ferrouter/veth ÷ linux/veth.
    pub fn ratios(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        let find = |dut: &str, tr: &str, profile: &str| {
            self.runs
                .iter()
                .find(|r| r.dut == dut && r.transport == tr && r.profile == profile)
                .map(|r| r.throughput_mpps)
        };
        let mut profiles: Vec<&str> = self.runs.iter().map(|r| r.profile.as_str()).collect();
        profiles.dedup();
        for p in profiles {
            for (a, b, tr) in [
                ("ferrouter", "testpmd", "memif"),
                ("ferrouter", "linux", "veth"),
            ] {
                if let (Some(x), Some(y)) = (find(a, tr, p), find(b, tr, p)) {
                    if y > 0.0 {
                        out.push((format!("{p}: {a}/{tr} ÷ {b}/{tr} throughput"), x / y));
                    }
                }
            }
        }
        out
    }

    /// JSON: `{"runs":[...]}`.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// A grouped bar chart of throughput (Mpps) per profile and DUT, as SVG.
    pub fn chart(&self, path: &Path) -> Result<()> {
        use plotters::prelude::*;
        let mut profiles: Vec<String> = Vec::new();
        let mut duts: Vec<String> = Vec::new();
        for r in &self.runs {
            if !profiles.contains(&r.profile) {
                profiles.push(r.profile.clone());
            }
            if !duts.contains(&dut_label(r)) {
                duts.push(dut_label(r));
            }
        }
        let max = self
            .runs
            .iter()
            .map(|r| r.throughput_mpps)
            .fold(0.0f64, f64::max)
            .max(0.001);
        let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
        root.fill(&WHITE).context("drawing the chart")?;
        let n = profiles.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption("RFC 2544 throughput (zero loss), Mpps", ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n, 0.0..max * 1.2)
            .context("drawing the chart")?;
        let names = profiles.clone();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(profiles.len() * 2 + 1)
            .x_label_formatter(&move |x: &f64| {
                let i = x.floor() as usize;
                if (x - x.floor() - 0.5).abs() < 0.01 {
                    names.get(i).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("Mpps")
            .draw()
            .context("drawing the chart")?;
        let width = 0.8 / duts.len().max(1) as f64;
        for (j, d) in duts.iter().enumerate() {
            let color = Palette99::pick(j).mix(0.9);
            let bars: Vec<Rectangle<(f64, f64)>> = self
                .runs
                .iter()
                .filter(|r| &dut_label(r) == d)
                .filter_map(|r| {
                    let i = profiles.iter().position(|p| p == &r.profile)? as f64;
                    let x0 = i + 0.1 + j as f64 * width;
                    Some(Rectangle::new(
                        [(x0, 0.0), (x0 + width * 0.95, r.throughput_mpps)],
                        color.filled(),
                    ))
                })
                .collect();
            chart
                .draw_series(bars)
                .context("drawing the chart")?
                .label(d.clone())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .context("drawing the chart")?;
        root.present().context("writing the chart")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dut: &str, tr: &str, profile: &str, mpps: f64) -> Run {
        Run {
            dut: dut.into(),
            transport: tr.into(),
            profile: profile.into(),
            flows: 2,
            pattern: "1pp - uni".into(),
            ratio: "100/0".into(),
            frame_size: "64".into(),
            avg_frame: 64.0,
            routes4: 1000,
            routes6: 0,
            line_rate_gbps: 10.0,
            loss_tolerance_pct: 0.0,
            throughput_mpps: mpps,
            throughput_gbps_l1: mpps * 84.0 * 8.0 / 1000.0,
            throughput_load_pct: mpps / 14.88 * 100.0,
            loss_at_load: [("25".to_string(), 50.0)].into_iter().collect(),
            loads: vec![LoadRow {
                load_pct: 25.0,
                offered_mpps: 3.72,
                sent_mpps: 3.0,
                rx_mpps: 1.5,
                rx_gbps_l1: 1.0,
                loss_pct: 50.0,
            }],
            latency_us: Some(Latency {
                min: 1.0,
                avg: 2.0,
                max: 3.0,
                p99: 2.5,
            }),
            trials: 9,
            cpu: vec![CoreSplit {
                core: 0,
                role: "tester".into(),
                user: 50.0,
                ..Default::default()
            }],
            notes: vec![],
        }
    }

    #[test]
    fn table_json_ratios_and_chart() {
        let r = Report {
            runs: vec![
                run("ferrouter", "memif", "ipv4-64", 8.0),
                run("testpmd", "memif", "ipv4-64", 10.0),
                run("ferrouter", "veth", "ipv4-64", 0.3),
                run("linux", "veth", "ipv4-64", 0.1),
            ],
        };
        let t = r.table();
        assert!(
            t.contains("ferrouter/memif") && t.contains("linux/veth"),
            "{t}"
        );
        let ratios = r.ratios();
        assert_eq!(ratios.len(), 2);
        assert!((ratios[0].1 - 0.8).abs() < 1e-9);
        assert!((ratios[1].1 - 3.0).abs() < 1e-9);
        let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(v["runs"][0]["dut"], "ferrouter");
        assert_eq!(v["runs"][0]["loss_at_load"]["25"], 50.0);
        assert_eq!(v["runs"][1]["latency_us"]["p99"], 2.5);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.svg");
        r.chart(&p).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("ferrouter/memif") && svg.contains("ipv4-64")
        );
    }
}
