//! What every BPF object of this crate needs besides its programs and maps, in one place: the
//! program (main.rs) and the bench's floors (bin/) include it.
#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any reachable call into this: nothing here can panic at run time.
    loop {}
}

/// The licence the kernel reads from the object: one of the strings its `license_is_gpl_compatible`
/// accepts (include/linux/license.h), and the one that keeps the object MIT as well. It must be
/// GPL-compatible because the program reads `struct task_struct` fields directly through its BTF
/// tracepoint arguments (task.rs), and since Linux 6.2 the verifier refuses that to other programs
/// ("Cannot access kernel 'struct task_struct' from non-GPL compatible program": so it refused
/// sched_switch on 6.18 with this string patched to "MIT/Apache-2", at the first read). None of the
/// helpers it calls is GPL-only (map lookup/update, `bpf_ktime_get_ns`, aya-log's ring buffer):
/// the struct reads decide. CONTRIBUTING.md "Licence" says what this means for the sources.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
