//! The kernel's ring buffer of removed cgroups in, batches of their ids out, on a thread of its
//! own that sleeps in poll(2) until the ring has records — so a removed cgroup's slot is freed
//! within milliseconds, whatever the drain interval (docs/design.md, "Per-cgroup slots").
use std::io;
use std::os::fd::{AsRawFd as _, RawFd};
use std::os::unix::net::UnixStream;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use aya::maps::{MapData, RingBuf};

/// After a wakeup, how long removals gather before the next batch is read: at 1,000 removals a
/// second, ~100 batches instead of 1,000 messages, and a slot waits at most this long more.
const GATHER: Duration = Duration::from_millis(10);

/// The reader thread; dropping it stops and joins the thread (the ring's descriptor closes).
#[derive(Debug)]
pub struct Removals {
    /// Our end of a socket pair: dropped, the thread's end reads end-of-file and it returns.
    stop: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
}

impl Removals {
    /// Reads `ring` until dropped or until `deliver` returns false (its receiver is gone).
    pub fn spawn(
        mut ring: RingBuf<MapData>,
        mut deliver: impl FnMut(Vec<u64>) -> bool + Send + 'static,
    ) -> io::Result<Removals> {
        let (stop, stopped) = UnixStream::pair()?;
        let thread = thread::Builder::new().name("cgroup-removals".into()).spawn(move || {
            let fds = [ring.as_raw_fd(), stopped.as_raw_fd()];
            loop {
                match wait_readable(fds) {
                    Ok(Ready::Ring) => {}
                    Ok(Ready::Stop) => return,
                    Err(e) => {
                        log::error!("reading removed cgroups stopped: poll: {e}");
                        return;
                    }
                }
                let mut ids = Vec::new();
                while let Some(record) = ring.next() {
                    if let Some(id) = record.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
                        ids.push(u64::from_ne_bytes(id));
                    }
                }
                if !ids.is_empty() && !deliver(ids) {
                    return;
                }
                thread::sleep(GATHER);
            }
        })?;
        Ok(Removals { stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for Removals {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

enum Ready {
    Ring,
    Stop,
}

/// Blocks until the ring has records or the stop socket is readable (closed).
fn wait_readable(fds: [RawFd; 2]) -> io::Result<Ready> {
    let mut polled = fds.map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
    loop {
        // SAFETY: two valid pollfd structs we own, for descriptors open for the whole call.
        let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, -1) };
        if n >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    if polled[1].revents != 0 {
        return Ok(Ready::Stop);
    }
    Ok(Ready::Ring)
}
