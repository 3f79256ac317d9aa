//! Time sources for the generator: the real monotonic clock, and a virtual clock that
//! makes a whole trial deterministic (tests, simulations).

/// A nanosecond clock read by the trial loop: once per loop iteration for pacing and
/// transmit timestamps, and once per non-empty receive burst for latency.
pub trait Clock {
    /// Current time in nanoseconds. Must never go backwards.
    fn now_ns(&mut self) -> u64;
}

/// `CLOCK_MONOTONIC` (what frame timestamps carry the low 32 bits of).
#[derive(Clone, Copy, Debug, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    #[inline]
    fn now_ns(&mut self) -> u64 {
        monotonic_ns()
    }
}

/// Nanoseconds of `CLOCK_MONOTONIC` (the dataplane's clock).
pub use dataplane::worker::monotonic_ns;

/// A clock that advances by a fixed step at every read: a trial driven by it does the
/// same thing every run, whatever the machine's speed or load.
#[derive(Clone, Copy, Debug)]
pub struct VirtualClock {
    now: u64,
    step: u64,
}

impl VirtualClock {
    /// Starts at `start_ns` and advances `step_ns` (≥ 1) per read.
    pub fn new(start_ns: u64, step_ns: u64) -> VirtualClock {
        VirtualClock {
            now: start_ns,
            step: step_ns.max(1),
        }
    }
    /// The time the next read returns, without advancing.
    pub fn peek(&self) -> u64 {
        self.now
    }
    /// Jump forward by `ns`.
    pub fn advance(&mut self, ns: u64) {
        self.now += ns;
    }
}

impl Clock for VirtualClock {
    #[inline]
    fn now_ns(&mut self) -> u64 {
        let t = self.now;
        self.now += self.step;
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_move_forward() {
        let mut m = MonotonicClock;
        let a = m.now_ns();
        assert!(m.now_ns() >= a);
        let mut v = VirtualClock::new(10, 5);
        assert_eq!((v.now_ns(), v.now_ns(), v.peek()), (10, 15, 20));
        v.advance(100);
        assert_eq!(v.now_ns(), 120);
    }
}
