//! The QoS policy of `ferrouter-lab bench qos` (the lab's `qosbench`, which gives Linux the
//! same one in nftables and tc) and of `bench pipeline --qos` (from memory): one text, so
//! the two benches measure the same policy.

/// One of the bench's three classes.
#[derive(Clone, Copy, Debug)]
pub struct BenchClass {
    /// Its name (the policy's class, the report's).
    pub name: &'static str,
    /// DSCP the tester sends it with.
    pub sent_dscp: u8,
    /// DSCP it leaves the DUT with (after the input marking).
    pub marked_dscp: u8,
    /// Its share of the frames, percent.
    pub frames_pct: u32,
}

/// The classes, in the policy's order: EF, AF4 (sent as AF42, re-marked AF41), best
/// effort (sent as CS1, re-marked CS0).
pub const CLASSES: [BenchClass; 3] = [
    BenchClass {
        name: "ef",
        sent_dscp: 46,
        marked_dscp: 46,
        frames_pct: 10,
    },
    BenchClass {
        name: "af41",
        sent_dscp: 36,
        marked_dscp: 34,
        frames_pct: 45,
    },
    BenchClass {
        name: "be",
        sent_dscp: 8,
        marked_dscp: 0,
        frames_pct: 45,
    },
];

/// EF's maximum rate, percent of the shaper.
pub const EF_MAX_PCT: u64 = 30;
/// AF41's weight: its share, percent, of what EF leaves.
pub const AF41_WEIGHT: u32 = 40;
/// Best effort's weight: the rest.
pub const BE_WEIGHT: u32 = 60;
/// Queue limit of every class, packets (ferrouter's default; Linux's EF `pfifo`).
pub const LIMIT: usize = 256;

/// Ferrouter's `[qos]`: the policy on both ports, the shaper at `shaper_bps` with a burst
/// of `burst_bytes` (`None`: no `burst` written, ferrouter's default).
pub fn ferrouter_config(shaper_bps: u64, burst_bytes: Option<u64>, [a, b]: [&str; 2]) -> String {
    let burst = burst_bytes.map_or(String::new(), |b| format!("burst = {b}\n"));
    format!(
        r#"[[qos.policy]]
name = "bench"
default_class = "be"
shaper = {shaper_bps}
{burst}
[[qos.policy.class]]
name = "ef"
dscp = ["ef"]
priority = 0
max_rate = "{EF_MAX_PCT}%"
limit = {LIMIT}

[[qos.policy.class]]
name = "af41"
dscp = ["af41", "af42", "af43"]
mark = "af41"
weight = {AF41_WEIGHT}
codel = true
limit = {LIMIT}

[[qos.policy.class]]
name = "be"
mark = "cs0"
weight = {BE_WEIGHT}
codel = true
limit = {LIMIT}

[[qos.interface]]
name = "{a}"
trusted = true
input = "bench"
output = "bench"

[[qos.interface]]
name = "{b}"
trusted = true
input = "bench"
output = "bench"
"#
    )
}
