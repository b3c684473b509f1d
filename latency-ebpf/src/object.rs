//! What every BPF object of this crate needs besides its programs and maps, in one place: the
//! program (main.rs) and the bench's floors (bin/) include it.
#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any reachable call into this: nothing here can panic at run time.
    loop {}
}

/// Tracing programs must be GPL-compatible to attach to kernel BTF tracepoints.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
