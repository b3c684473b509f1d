//! Rebuild the kernel object when the linker changes: it is not a cargo dependency, so cargo
//! would otherwise keep an object linked by an older bpf-linker.
use which::which;

fn main() {
    match which("bpf-linker") {
        Ok(linker) => println!("cargo:rerun-if-changed={}", linker.display()),
        Err(err) => println!("cargo:warning=bpf-linker not found ({err}); run `cargo xtask setup`"),
    }
}
