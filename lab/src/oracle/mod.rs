//! Independent views of what our program measures, each a tool of its own: the kernel's
//! `run_delay`, `perf sched`, libbpf-tools `runqlat`, the cgroup's own throttle counters, perf's trace of
//! the irq tracepoints, perf's trace of the scheduler events, Perfetto's classes; and bpftool for
//! what stays loaded.
pub mod bpftool;
pub mod irq_time;
pub mod otlp;
pub mod perf;
pub mod perfetto;
pub mod run_delay;
pub mod runqlat;
pub mod throttle;

/// Python for the oracles that read our protobuf with a project's own generated classes:
/// `unknown(message, path)` exits naming the first field the classes do not know (a wrong tag or
/// type, which a reader would skip), anywhere in the message.
const REFUSE_UNKNOWN: &str = r#"
import sys
from google.protobuf.unknown_fields import UnknownFieldSet
def unknown(m, path):
    if len(UnknownFieldSet(m)) > 0:
        sys.exit(f"unknown fields in {path}")
    for field, value in m.ListFields():
        if field.message_type is None:
            continue
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        items = value if repeated else [value]
        for i, item in enumerate(items):
            unknown(item, f"{path}.{field.name}[{i}]")
"#;
