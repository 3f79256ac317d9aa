//! CoDel (RFC 8289), the active queue management of best-effort queues: when packets have
//! waited longer than `target` for at least `interval`, drop from the head, at intervals
//! shrinking with the square root of the drop count, until the sojourn time falls below
//! the target again.

use crate::queue::{Entry, Fifo};

/// CoDel's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodelParams {
    /// Acceptable standing queue delay (RFC 8289: 5 ms).
    pub target_ns: u64,
    /// The window over which the delay must stay above target before dropping (100 ms).
    pub interval_ns: u64,
    /// Below this many bytes queued nothing is dropped (one MTU).
    pub mtu_bytes: u64,
}

impl Default for CodelParams {
    fn default() -> Self {
        CodelParams {
            target_ns: 5_000_000,
            interval_ns: 100_000_000,
            mtu_bytes: 1_514,
        }
    }
}

/// One queue's CoDel state.
#[derive(Clone, Debug, Default)]
pub struct Codel {
    params: CodelParams,
    first_above_time: u64,
    drop_next: u64,
    count: u32,
    lastcount: u32,
    dropping: bool,
}

impl Codel {
    /// A CoDel with these parameters, not dropping.
    pub fn new(params: CodelParams) -> Codel {
        Codel {
            params,
            ..Codel::default()
        }
    }

    /// Whether it is in its dropping state.
    pub fn dropping(&self) -> bool {
        self.dropping
    }

    /// `t + interval / sqrt(count)`, in integers: `sqrt(count << 32)` is
    /// `sqrt(count) * 2^16`.
    fn control_law(&self, t: u64, count: u32) -> u64 {
        let root = (u64::from(count.max(1)) << 32).isqrt().max(1);
        let step = (u128::from(self.params.interval_ns) << 16) / u128::from(root);
        t.saturating_add(step as u64)
    }

    fn do_dequeue<T>(&mut self, now: u64, q: &mut Fifo<T>) -> (Option<Entry<T>>, bool) {
        let Some(e) = q.pop() else {
            self.first_above_time = 0;
            return (None, false);
        };
        let sojourn = now.saturating_sub(e.enq_ns);
        let mut ok_to_drop = false;
        if sojourn < self.params.target_ns || q.bytes() <= self.params.mtu_bytes {
            self.first_above_time = 0;
        } else if self.first_above_time == 0 {
            self.first_above_time = now.saturating_add(self.params.interval_ns);
        } else if now >= self.first_above_time {
            ok_to_drop = true;
        }
        (Some(e), ok_to_drop)
    }

    /// The next packet of `q` at `now`, handing those CoDel drops to `drop` (RFC 8289
    /// §5.5's `dequeue`). Runs at most once per queued packet.
    pub fn dequeue<T>(
        &mut self,
        now: u64,
        q: &mut Fifo<T>,
        drop: &mut impl FnMut(Entry<T>),
    ) -> Option<Entry<T>> {
        let (mut e, ok_to_drop) = self.do_dequeue(now, q);
        let Some(head) = e.take() else {
            self.dropping = false;
            return None;
        };
        let mut head = Some(head);
        if self.dropping {
            if !ok_to_drop {
                self.dropping = false;
            }
            while self.dropping && now >= self.drop_next {
                if let Some(h) = head.take() {
                    drop(h);
                }
                self.count = self.count.saturating_add(1);
                let (next, ok) = self.do_dequeue(now, q);
                head = next;
                if !ok || head.is_none() {
                    self.dropping = false;
                } else {
                    self.drop_next = self.control_law(self.drop_next, self.count);
                }
            }
        } else if ok_to_drop {
            if let Some(h) = head.take() {
                drop(h);
            }
            let (next, _) = self.do_dequeue(now, q);
            head = next;
            self.dropping = true;
            // If we were dropping not long ago, start from near the drop rate that
            // controlled the queue then (RFC 8289 §5.5).
            let delta = self.count.saturating_sub(self.lastcount);
            self.count =
                if delta > 1 && now.saturating_sub(self.drop_next) < 16 * self.params.interval_ns {
                    delta
                } else {
                    1
                };
            self.drop_next = self.control_law(now, self.count);
            self.lastcount = self.count;
        }
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_control_law_shrinks_with_the_square_root_of_the_count() {
        let c = Codel::new(CodelParams::default());
        assert_eq!(c.control_law(0, 1), 100 * MS);
        assert_eq!(c.control_law(0, 4), 50 * MS);
        assert_eq!(c.control_law(10, 100), 10 + 10 * MS);
    }

    /// A burst leaves a standing queue behind when the queue is then fed exactly as fast
    /// as it is drained (1 packet per ms): CoDel drops from it, ever faster, until the
    /// delay is below target; a queue without the burst never drops.
    #[test]
    fn a_standing_queue_is_drained_and_a_short_one_left_alone() {
        let run = |burst: u64| {
            let mut q = Fifo::new(10_000);
            let mut c = Codel::new(CodelParams::default());
            let mut dropped = 0;
            let mut late_at_end = 0;
            for k in 0..burst {
                let _ = q.push(Entry {
                    item: k,
                    len: 1_000,
                    enq_ns: 0,
                });
            }
            for t in 0..3_000u64 {
                let now = t * MS;
                let _ = q.push(Entry {
                    item: t,
                    len: 1_000,
                    enq_ns: now,
                });
                if let Some(e) = c.dequeue(now, &mut q, &mut |_| dropped += 1) {
                    if t > 2_500 {
                        late_at_end = late_at_end.max(now - e.enq_ns);
                    }
                }
            }
            (dropped, late_at_end)
        };
        // Without CoDel the 50 packets of the burst would delay every later one by 50 ms.
        let (dropped, late) = run(50);
        assert!((45..=50).contains(&dropped), "dropped {dropped}");
        assert!(late <= 5 * MS, "delay {late} ns");
        assert_eq!(run(0), (0, 0));
    }
}
