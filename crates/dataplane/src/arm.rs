//! Requests from the control side to one worker (arm or disarm a trace or a capture), with
//! a flag the worker checks once per vector: when nothing is armed, a worker pays one
//! relaxed load and a branch, and never touches the queue.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Control side: sends requests and raises the worker's flag.
pub struct ArmSender<R> {
    flag: Arc<AtomicBool>,
    cmds: rtrb::Producer<R>,
}

/// Worker side: sees the flag, takes the requests, lowers the flag when idle again.
pub struct ArmReceiver<R> {
    flag: Arc<AtomicBool>,
    cmds: rtrb::Consumer<R>,
}

/// A request channel holding up to 4 requests the worker has not taken yet.
pub fn channel<R>() -> (ArmSender<R>, ArmReceiver<R>) {
    let flag = Arc::new(AtomicBool::new(false));
    let (p, c) = rtrb::RingBuffer::new(4);
    (
        ArmSender {
            flag: flag.clone(),
            cmds: p,
        },
        ArmReceiver { flag, cmds: c },
    )
}

impl<R> ArmSender<R> {
    /// Queue `req`; fails (with `stuck` as the message) only when requests pile up
    /// unread, i.e. the worker is stuck.
    pub fn send(&mut self, req: R, stuck: &'static str) -> Result<(), &'static str> {
        self.cmds.push(req).map_err(|_| stuck)?;
        // After the push: a worker that sees the flag finds the request.
        self.flag.store(true, Ordering::SeqCst);
        Ok(())
    }
}

impl<R> ArmReceiver<R> {
    /// Whether there may be anything to do (requests, or an armed state).
    #[inline]
    pub fn raised(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    /// The next pending request, oldest first.
    pub fn next(&mut self) -> Option<R> {
        self.cmds.pop().ok()
    }

    /// After taking the requests: keep the flag while `active`, else lower it (raised again
    /// if a request arrived meanwhile). Returns `active`.
    pub fn settle(&self, active: bool) -> bool {
        if !active {
            self.flag.store(false, Ordering::SeqCst);
            // A request queued between the last `next` and the store re-arms.
            if !self.cmds.is_empty() {
                self.flag.store(true, Ordering::SeqCst);
            }
        }
        active
    }
}
