//! A softirq load: a process pinned to one CPU that sends UDP datagrams to itself over loopback
//! as fast as it can, so that CPU spends a good part of its time in the network's receive softirq
//! (run in the sender's own context when it re-enables bottom halves). A fork of the caller that
//! makes only raw system calls; killed and reaped on drop.
use anyhow::Context as _;

#[derive(Debug)]
pub struct UdpFlood {
    pid: libc::pid_t,
}

const DATAGRAM: usize = 1400;

impl UdpFlood {
    pub fn start(cpu: usize) -> anyhow::Result<UdpFlood> {
        // SAFETY: the child makes only raw system calls (affinity, sockets, sendto/recv, prctl)
        // on its own stack, so forking a multi-threaded test is fine; it never returns from here.
        match unsafe { libc::fork() } {
            -1 => Err(std::io::Error::last_os_error()).context("fork"),
            // SAFETY: see above.
            0 => unsafe { flood(cpu) },
            pid => Ok(UdpFlood { pid }),
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid as u32
    }
}

/// The child: never returns.
///
/// # Safety
/// Only in a freshly forked child.
unsafe fn flood(cpu: usize) -> ! {
    // SAFETY: raw system calls on values of this stack; see `UdpFlood::start`.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        let rx = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        let tx = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let mut got = len;
        if rx < 0
            || tx < 0
            || libc::bind(rx, (&raw const addr).cast(), len) != 0
            || libc::getsockname(rx, (&raw mut addr).cast(), &mut got) != 0
        {
            libc::_exit(1);
        }
        let buf = [0x5au8; DATAGRAM];
        let mut sink = [0u8; DATAGRAM];
        loop {
            for _ in 0..256 {
                libc::sendto(tx, buf.as_ptr().cast(), DATAGRAM, 0, (&raw const addr).cast(), len);
            }
            // Read what was queued, so the receive path delivers rather than drops.
            while libc::recv(rx, sink.as_mut_ptr().cast(), DATAGRAM, libc::MSG_DONTWAIT) > 0 {}
        }
    }
}

impl Drop for UdpFlood {
    fn drop(&mut self) {
        // SAFETY: our own child, killed and reaped once.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}
