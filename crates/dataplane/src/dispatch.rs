//! Running a vector through the graph: the dispatch over the nodes, in rounds. The engine
//! (`crate::graph`) knows no node; the nodes know the engine; this module knows both.

use crate::buffer::{PacketMemory, Vector, VECTOR_SIZE};
use crate::counters::Reason;
use crate::feature::ArcId;
use crate::graph::{Graph, Node, Output, MAX_ROUNDS, ORDER};
use crate::ip4::{self, V4};
use crate::ip6::V6;
use crate::{ethernet, icmp, ip};

impl Graph {
    /// Push a vector of received frames through the graph. `now_ns` is a monotonic clock
    /// read once per vector (ICMP rate limiting).
    pub fn process<M: PacketMemory>(
        &mut self,
        v: &mut Vector,
        mem: &mut M,
        out: &mut Output,
        now_ns: u64,
    ) {
        // The one per-vector check of an idle tracer; the untraced instantiation has no
        // trace code at all.
        let traced = match self.tracer.as_deref_mut() {
            Some(t) => t.begin(),
            None => false,
        };
        if traced {
            self.select_traced(v, mem, now_ns);
            self.run::<true, M>(v, mem, out, now_ns);
            if let Some(t) = self.tracer.as_deref_mut() {
                t.finish();
            }
        } else {
            self.run::<false, M>(v, mem, out, now_ns);
        }
    }

    /// Flag the packets of `v` the tracer wants and start their records.
    #[cold]
    fn select_traced<M: PacketMemory>(&mut self, v: &mut Vector, mem: &M, now_ns: u64) {
        let Some(t) = self.tracer.as_deref_mut() else {
            return;
        };
        let n = v.len.min(VECTOR_SIZE);
        for p in &mut v.pkts[..n] {
            let frame = crate::buffer::pkt_bytes(mem, p);
            t.select(p, frame, now_ns);
        }
    }

    fn run<const T: bool, M: PacketMemory>(
        &mut self,
        v: &mut Vector,
        mem: &mut M,
        out: &mut Output,
        now_ns: u64,
    ) {
        let n = v.len.min(VECTOR_SIZE);
        self.icmp_limit.refill(now_ns);
        self.now_ns = now_ns;
        if self.feat_active {
            // A vector is one port's burst; the control thread's (packets held for their
            // next hop) may mix ports.
            self.vec_port = v.pkts[0].rx_port;
            self.vec_mixed = v.pkts[..n].iter().any(|p| p.rx_port != self.vec_port);
            self.local_lookup = false;
        }
        {
            let f = &mut self.frames;
            for (i, slot) in f.lists[Node::EthernetInput as usize][..n]
                .iter_mut()
                .enumerate()
            {
                *slot = i as u16;
            }
            f.lens[Node::EthernetInput as usize] = n;
        }
        let mut list = [0u16; VECTOR_SIZE];
        for _round in 0..MAX_ROUNDS {
            let mut any = false;
            for node in ORDER {
                let len = self.frames.lens[node as usize];
                if len == 0 {
                    continue;
                }
                any = true;
                list[..len].copy_from_slice(&self.frames.lists[node as usize][..len]);
                self.frames.lens[node as usize] = 0;
                let list = &list[..len];
                match node {
                    Node::EthernetInput => ethernet::input::<T, M>(self, v, mem, out, list),
                    Node::Ip4Lookup => ip::lookup::<T, V4, M>(self, v, mem, out, list),
                    Node::Ip6Lookup => ip::lookup::<T, V6, M>(self, v, mem, out, list),
                    // The rewrite nodes check for output features per packet only in the
                    // instantiation for vectors where some interface has them.
                    Node::Ip4Rewrite if self.arc_on(ArcId::Ip4Output) => {
                        ip::rewrite::<T, true, V4, M>(self, v, mem, out, list)
                    }
                    Node::Ip4Rewrite => ip::rewrite::<T, false, V4, M>(self, v, mem, out, list),
                    Node::Ip6Rewrite if self.arc_on(ArcId::Ip6Output) => {
                        ip::rewrite::<T, true, V6, M>(self, v, mem, out, list)
                    }
                    Node::Ip6Rewrite => ip::rewrite::<T, false, V6, M>(self, v, mem, out, list),
                    Node::Ip4Frag => ip4::fragment::<T, M>(self, v, mem, out, list),
                    Node::Icmp4Error => icmp::error::<T, V4, M>(self, v, mem, out, list),
                    Node::Icmp6Error => icmp::error::<T, V6, M>(self, v, mem, out, list),
                    Node::Ip4Output => self.output_arc::<T, M>(ArcId::Ip4Output, v, mem, out, list),
                    Node::Ip6Output => self.output_arc::<T, M>(ArcId::Ip6Output, v, mem, out, list),
                }
            }
            if !any {
                return;
            }
        }
        // Bounded rounds: anything still queued is a bug-shaped loop, dropped and counted.
        for node in ORDER {
            let len = std::mem::take(&mut self.frames.lens[node as usize]);
            for k in 0..len {
                let i = self.frames.lists[node as usize][k];
                let p = v.pkts[i as usize];
                self.drop_pkt::<T>(out, &p, Reason::GraphLoop);
            }
        }
    }
}
