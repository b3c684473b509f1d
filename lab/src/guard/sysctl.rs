//! A sysctl the lab changes for a while: in, its name and a value; out, a guard that puts the
//! old value back and checks it is there — when asked, and on drop, pass or fail.
use anyhow::{Context as _, bail};

/// A sysctl set for the guard's life; the old value comes back on drop, pass or fail.
#[derive(Debug)]
pub struct Sysctl {
    path: String,
    old: String,
    restored: bool,
}

impl Sysctl {
    /// `name` as sysctl(8) spells it: `kernel.task_delayacct`.
    pub fn set(name: &str, value: &str) -> anyhow::Result<Sysctl> {
        let path = format!("/proc/sys/{}", name.replace('.', "/"));
        let old = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?.trim().to_owned();
        std::fs::write(&path, value).with_context(|| format!("writing {value} to {path}"))?;
        Ok(Sysctl { path, old, restored: false })
    }

    /// Puts the old value back and checks that it is there.
    pub fn restore(&mut self) -> anyhow::Result<()> {
        if !self.restored {
            std::fs::write(&self.path, &self.old)
                .with_context(|| format!("restoring {} to {}", self.path, self.old))?;
            self.restored = true;
        }
        let now = std::fs::read_to_string(&self.path).with_context(|| format!("reading {}", self.path))?;
        if now.trim() != self.old {
            bail!("{} is {} after restoring it to {}", self.path, now.trim(), self.old);
        }
        Ok(())
    }

    pub fn old(&self) -> &str {
        &self.old
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        if let Err(err) = self.restore() {
            eprintln!("lab: {err:#}");
        }
    }
}
