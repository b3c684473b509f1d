//! A softirq load: a process pinned to one CPU that sends UDP datagrams over loopback as fast as it
//! can, so that CPU spends a good part of its time in the network's receive softirq (run in the
//! sender's own context when it re-enables bottom halves); to itself, or to a `UdpSink`, a process
//! blocked in `recv` that the softirq wakes for each datagram, so it waits mostly for the rest of
//! that softirq. Forks of the caller that make only raw system calls; killed and reaped on drop.
use std::os::fd::AsRawFd as _;

use anyhow::Context as _;

use crate::guard::Forked;

const DATAGRAM: usize = 1400;

#[derive(Debug)]
pub struct UdpFlood(Forked);

impl UdpFlood {
    /// Floods loopback from CPU `cpu`: to `sink`'s port if given, else to a socket of its own.
    pub fn start(cpu: usize, sink: Option<&UdpSink>) -> anyhow::Result<UdpFlood> {
        let port = sink.map(|s| s.port);
        // SAFETY: `flood` makes only raw system calls on its own stack.
        Ok(UdpFlood(unsafe { Forked::spawn(move || flood(cpu, port)) }?))
    }

    pub fn pid(&self) -> u32 {
        self.0.pid()
    }
}

/// A process pinned to one CPU, blocked in `recv` on a loopback UDP socket: woken by the receive
/// softirq for each datagram. Killed and reaped on drop.
#[derive(Debug)]
pub struct UdpSink {
    child: Forked,
    port: u16,
}

impl UdpSink {
    pub fn start(cpu: usize) -> anyhow::Result<UdpSink> {
        // Bound here, so the port is known before the child runs; the child reads the same socket,
        // and our copy closes when `socket` drops.
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").context("binding the sink's socket")?;
        let port = socket.local_addr().context("the sink's port")?.port();
        let fd = socket.as_raw_fd();
        // SAFETY: `sink` makes only raw system calls on its own stack.
        let child = unsafe { Forked::spawn(move || sink(cpu, fd)) }?;
        Ok(UdpSink { child, port })
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }
}

/// Pins the calling process to `cpu`: a raw system call.
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t with one CPU set, for the calling process.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The sink's child.
fn sink(cpu: usize, fd: libc::c_int) -> ! {
    pin(cpu);
    let mut buf = [0u8; DATAGRAM];
    loop {
        // SAFETY: a buffer of this stack, of the length given.
        if unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), DATAGRAM, 0) } < 0 {
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(1) };
        }
    }
}

/// The flood's child.
fn flood(cpu: usize, port: Option<u16>) -> ! {
    pin(cpu);
    // SAFETY: raw system calls on values of this stack.
    unsafe {
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
        if let Some(port) = port {
            addr.sin_port = port.to_be();
        }
        let buf = [0x5au8; DATAGRAM];
        let mut drained = [0u8; DATAGRAM];
        loop {
            for _ in 0..256 {
                libc::sendto(tx, buf.as_ptr().cast(), DATAGRAM, 0, (&raw const addr).cast(), len);
            }
            // Read what was queued, so the receive path delivers rather than drops (nothing
            // arrives here when a sink takes the datagrams).
            while libc::recv(rx, drained.as_mut_ptr().cast(), DATAGRAM, libc::MSG_DONTWAIT) > 0 {}
        }
    }
}
