//! Running a vector through the graph: the dispatch over the nodes, in rounds. The engine
//! (`crate::graph`) knows no node; the nodes know the engine; this module knows both.

use crate::buffer::{PacketMemory, Vector, VECTOR_SIZE};
use crate::counters::Reason;
use crate::feature::ArcId;
use crate::graph::{Graph, Node, Output, MAX_ROUNDS, ORDER};
use crate::ip4::{self, V4};
use crate::ip6::V6;
use crate::{ethernet, icmp, ip};

/// Where a vector enters the graph.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seed {
    /// Received frames: ethernet-input.
    Received,
    /// The router's own packets: the lookup.
    Lookup,
    /// The router's own packets: the output arc of their `tx_port`.
    Output,
}

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
        self.process_from(v, mem, out, now_ns, Seed::Received);
    }

    /// Push a vector of the router's own packets through the graph from the lookup (an
    /// encapsulated packet held while its next hop resolved, say). Each packet's `l3` must
    /// point at its IPv4 or IPv6 header (anything else is dropped); it is routed by its
    /// destination as an ICMP error the router makes is (no unicast arc, no TTL change).
    pub fn process_local<M: PacketMemory>(
        &mut self,
        v: &mut Vector,
        mem: &mut M,
        out: &mut Output,
        now_ns: u64,
    ) {
        self.process_from(v, mem, out, now_ns, Seed::Lookup);
    }

    /// Send a vector of the router's own packets out of the interface in each one's
    /// `tx_port`, through that interface's output arc: what the kernel routed into a
    /// tunnel interface (a point-to-point link: whatever the destination, it leaves by the
    /// tunnel). `l3` as for [`Graph::process_local`].
    pub fn send_local<M: PacketMemory>(
        &mut self,
        v: &mut Vector,
        mem: &mut M,
        out: &mut Output,
        now_ns: u64,
    ) {
        self.process_from(v, mem, out, now_ns, Seed::Output);
    }

    fn process_from<M: PacketMemory>(
        &mut self,
        v: &mut Vector,
        mem: &mut M,
        out: &mut Output,
        now_ns: u64,
        seed: Seed,
    ) {
        // The one per-vector check of an idle tracer; the untraced instantiation has no
        // trace code at all.
        let traced = match self.tracer.as_deref_mut() {
            Some(t) => t.begin(),
            None => false,
        };
        if traced {
            self.select_traced(v, mem, now_ns);
            self.run::<true, M>(v, mem, out, now_ns, seed);
            if let Some(t) = self.tracer.as_deref_mut() {
                t.finish();
            }
        } else {
            self.run::<false, M>(v, mem, out, now_ns, seed);
        }
    }

    /// Hand the router's own packets `..n` of `v` to the lookup of their IP version, or
    /// (`output`) to its output arc on their `tx_port`.
    fn seed_local<const T: bool, M: PacketMemory>(
        &mut self,
        v: &mut Vector,
        mem: &M,
        out: &mut Output,
        n: usize,
        output: bool,
    ) {
        self.local_lookup = true;
        for i in 0..n {
            let p = &mut v.pkts[i];
            let at = p.off as usize + p.l3 as usize;
            let frame = mem.frame(p.buf);
            let node = match (frame.get(at).map(|b| b >> 4), frame.get(at + 16..at + 20)) {
                (Some(4), Some(_)) if output => {
                    // No next hop: the output arc keys the packet by its `tx_port`.
                    p.nh = fib::MISS;
                    Node::Ip4Output
                }
                (Some(6), _) if output => {
                    p.nh = fib::MISS;
                    Node::Ip6Output
                }
                (Some(4), Some(d)) => {
                    p.nh = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
                    Node::Ip4Lookup
                }
                (Some(6), _) => Node::Ip6Lookup,
                _ => {
                    let p = *p;
                    self.drop_pkt::<T>(out, &p, Reason::EthUnknownType);
                    continue;
                }
            };
            p.flags = (p.flags & crate::trace::F_TRACED) | crate::buffer::F_LOCAL_ORIGIN;
            self.enqueue(node, i as u16);
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
        seed: Seed,
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
        if seed != Seed::Received {
            self.seed_local::<T, M>(v, mem, out, n, seed == Seed::Output);
        } else {
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
                    Node::Ip6Frag => crate::ip6::fragment::<T, M>(self, v, mem, out, list),
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
