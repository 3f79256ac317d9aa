//! QoS as the API shows it (`GET /v1/qos`, typed in [`crate::model`], rendered by
//! [`crate::render`]).

use crate::features::Features;
use crate::model::{
    QosClassView, QosInputView, QosPipeView, QosPolicerView, QosPortView, QosRuleView,
    QosSubportView, QosView,
};

/// The policers and the scheduled ports' queues, now.
pub fn view(features: &Features) -> QosView {
    let v = features.qos.view();
    QosView {
        policers: v
            .policers
            .into_iter()
            .map(|p| {
                let [g, y, r] = p.colours;
                QosPolicerView {
                    name: p.name,
                    kind: p.kind.to_string(),
                    cir_bps: p.cir_bps,
                    pir_bps: p.pir_bps,
                    green_packets: g.0,
                    green_bytes: g.1,
                    yellow_packets: y.0,
                    yellow_bytes: y.1,
                    red_packets: r.0,
                    red_bytes: r.1,
                }
            })
            .collect(),
        ports: v
            .ports
            .into_iter()
            .map(|p| QosPortView {
                interface: p.interface,
                policy: p.policy,
                shaper_bps: p.shaper_bps,
                classes: p
                    .classes
                    .into_iter()
                    .map(|c| QosClassView {
                        name: c.name,
                        priority: c.priority,
                        weight: c.weight,
                        min_bps: c.min_bps,
                        max_bps: c.max_bps,
                        limit: c.limit as u64,
                        codel: c.codel,
                        wred: c.wred,
                        enqueued: c.enqueued,
                        enqueued_bytes: c.enqueued_bytes,
                        sent: c.sent,
                        sent_bytes: c.sent_bytes,
                        dropped_tail: c.dropped_tail,
                        dropped_codel: c.dropped_codel,
                        dropped_flush: c.dropped_flush,
                        dropped_wred: c.dropped_wred,
                        depth: c.depth,
                        depth_bytes: c.depth_bytes,
                        sojourn_max_ns: c.sojourn_max_ns,
                        sojourn_mean_ns: c.sojourn_mean_ns,
                    })
                    .collect(),
                pipes: p
                    .pipes
                    .into_iter()
                    .map(|q| QosPipeView {
                        name: q.name,
                        profile: q.profile,
                        subport: q.subport,
                        rate_bps: q.rate_bps,
                        limit: q.limit as u64,
                        max_rates_bps: q.max_bps.into_iter().collect(),
                        min_rates_bps: q.min_bps.into_iter().collect(),
                        dst: q.dst,
                        enqueued: q.enqueued,
                        enqueued_bytes: q.enqueued_bytes,
                        sent: q.sent,
                        sent_bytes: q.sent_bytes,
                        dropped_tail: q.dropped_tail,
                        dropped_codel: q.dropped_codel,
                        dropped_flush: q.dropped_flush,
                        dropped_wred: q.dropped_wred,
                        depth: q.depth,
                        depth_bytes: q.depth_bytes,
                        sojourn_max_ns: q.sojourn_max_ns,
                        sojourn_mean_ns: q.sojourn_mean_ns,
                    })
                    .collect(),
                subports: p
                    .subports
                    .into_iter()
                    .map(|u| QosSubportView {
                        name: u.name,
                        rate_bps: u.rate_bps,
                        burst_bytes: u.burst_bytes,
                        limit: u.limit.map(|l| l as u64),
                        pipes: u.pipes as u64,
                        enqueued: u.enqueued,
                        sent: u.sent,
                        sent_bytes: u.sent_bytes,
                        dropped: u.dropped,
                        depth: u.depth,
                    })
                    .collect(),
            })
            .collect(),
        inputs: v
            .inputs
            .into_iter()
            .map(|i| QosInputView {
                interface: i.interface,
                policy: i.policy,
                rules: i
                    .rules
                    .into_iter()
                    .enumerate()
                    .map(|(j, r)| QosRuleView {
                        index: j as u32 + 1,
                        class: r.class,
                        matches: r.matches,
                        packets: r.packets,
                        bytes: r.bytes,
                    })
                    .collect(),
            })
            .collect(),
    }
}
