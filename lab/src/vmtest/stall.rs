//! The stall vmtest's guests run (`xtask vmtest --guest-stall ADDR`): in, the daemon's loopback
//! address and pid; out, on stdout, the stall as `watch` saw it, in JSON for `checks::stall`.
use std::time::Duration;

use crate::watch::{pin_away, watch};
use crate::workload::stall::Plan;

/// The stall the guests run: 3 s of spin (no fair server before 6.12: the victim waits it all),
/// the victim woken 200 ms in.
pub const GUEST_PLAN: Plan =
    Plan { cpu: 1, priority: 5, spin: Duration::from_secs(3), wake_after: Duration::from_millis(200), again: None };

/// The guest's side: pins the daemons `pids` away from the stalled CPU, watches `GUEST_PLAN`
/// beside them and prints the JSON on stdout.
pub fn guest(addr: &str, pids: &[u32]) -> anyhow::Result<()> {
    for pid in pids {
        pin_away(*pid)?;
    }
    let watched = watch(addr, GUEST_PLAN)?;
    println!("{}", serde_json::to_string(&watched)?);
    Ok(())
}
