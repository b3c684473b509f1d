//! The bench's floors sit on our three tracepoints and do one piece of work per event; this
//! defines their programs once, so the floors differ in that work alone.

/// `sched_wakeup`, `sched_wakeup_new` and `sched_switch`, each calling `$work()` and returning 0.
macro_rules! floor_programs {
    ($work:ident) => {
        #[aya_ebpf::macros::btf_tracepoint(function = "sched_wakeup")]
        pub fn sched_wakeup(_ctx: aya_ebpf::programs::BtfTracePointContext) -> i32 {
            $work();
            0
        }

        #[aya_ebpf::macros::btf_tracepoint(function = "sched_wakeup_new")]
        pub fn sched_wakeup_new(_ctx: aya_ebpf::programs::BtfTracePointContext) -> i32 {
            $work();
            0
        }

        #[aya_ebpf::macros::btf_tracepoint(function = "sched_switch")]
        pub fn sched_switch(_ctx: aya_ebpf::programs::BtfTracePointContext) -> i32 {
            $work();
            0
        }
    };
}
