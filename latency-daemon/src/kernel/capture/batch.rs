//! A per-CPU array read whole with `BPF_MAP_LOOKUP_BATCH`: the map, its number of keys, the
//! possible CPUs and a bound on the bytes one call copies in; every key's value on every possible
//! CPU out, key by key (`values[key * cpus + cpu]`). A few calls for the whole map where a lookup
//! per key made one call per key.
use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _},
};

use aya::{Pod, maps::MapData};

/// bpf(2)'s `BPF_MAP_LOOKUP_BATCH` (`enum bpf_cmd`); array maps have it since Linux 5.6.
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
/// The kernel's own "not supported" (include/linux/errno.h, not in libc): a map type without a
/// batched lookup.
const ENOTSUPP: i32 = 524;

/// `union bpf_attr`'s `batch` member (include/uapi/linux/bpf.h). The kernel takes a shorter
/// `union bpf_attr` as zeros beyond it.
#[repr(C)]
struct BatchAttr {
    /// The last key of the previous call (0: from the first key).
    in_batch: u64,
    /// Where the kernel writes the last key it read.
    out_batch: u64,
    keys: u64,
    values: u64,
    /// Keys asked for; on return, keys read.
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// Before 5.6 the command is unknown (EINVAL); a map type without it answers ENOTSUPP.
    #[error("this kernel reads this map by key only: {0}")]
    Unsupported(io::Error),
    #[error("BPF_MAP_LOOKUP_BATCH after {read} of {entries} keys: {source}")]
    Lookup { read: u32, entries: u32, source: io::Error },
    /// An array gives its keys in order; anything else and the values would be misplaced.
    #[error("BPF_MAP_LOOKUP_BATCH gave key {got} where key {expected} was next")]
    OutOfOrder { expected: u32, got: u32 },
}

/// Keys per call so that one call copies at most `bytes` (at least one key).
pub fn keys_per_call(value: usize, cpus: usize, bytes: usize) -> u32 {
    u32::try_from(bytes / (value * cpus).max(1)).unwrap_or(u32::MAX).max(1)
}

/// Keys 0 to `entries` of the per-CPU array `map`, each with `cpus` values (the possible CPUs, as
/// the kernel lays them out), in calls of at most `bytes`.
pub fn lookup<V: Pod>(map: &MapData, entries: u32, cpus: usize, bytes: usize) -> Result<Vec<V>, BatchError> {
    // The kernel lays each CPU's value at a multiple of 8 bytes: a `V` whose size is one lies
    // exactly where `Vec<V>` puts it.
    const { assert!(size_of::<V>().is_multiple_of(8) && align_of::<V>() <= 8) };
    let per_call = keys_per_call(size_of::<V>(), cpus, bytes).min(entries.max(1));
    let mut values: Vec<V> = Vec::with_capacity(entries as usize * cpus);
    let mut keys = vec![0u32; per_call as usize];
    let fd = map.fd().as_fd().as_raw_fd() as u32;
    let (mut read, mut last) = (0u32, 0u32);
    while read < entries {
        let asked = per_call.min(entries - read);
        let mut next = 0u32;
        let mut attr = BatchAttr {
            in_batch: if read == 0 { 0 } else { &raw const last as u64 },
            out_batch: &raw mut next as u64,
            keys: keys.as_mut_ptr() as u64,
            // Room for `asked` keys' values: the capacity is `entries * cpus` and `read * cpus`
            // of it is used.
            values: values.spare_capacity_mut().as_mut_ptr() as u64,
            count: asked,
            map_fd: fd,
            elem_flags: 0,
            flags: 0,
        };
        // SAFETY: bpf(2) reads `attr` (its size given), writes `count` in it, at most `asked` keys
        // into `keys` (`per_call` ≥ `asked` long), their values into `values`' spare capacity
        // (room for `asked * cpus` values, see above) and one key into `next`; all live for the
        // call.
        let rc = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_LOOKUP_BATCH, &raw mut attr, size_of::<BatchAttr>()) };
        let got = attr.count.min(asked);
        if rc < 0 {
            let source = io::Error::last_os_error();
            match source.raw_os_error() {
                // The end of the map, after `got` keys: complete only if that was all we asked.
                Some(libc::ENOENT) if got == asked => {}
                Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP) if read == 0 => {
                    return Err(BatchError::Unsupported(source));
                }
                _ => return Err(BatchError::Lookup { read: read + got, entries, source }),
            }
        }
        if let Some((i, &key)) = keys[..got as usize].iter().enumerate().find(|&(i, &key)| key != read + i as u32) {
            return Err(BatchError::OutOfOrder { expected: read + i as u32, got: key });
        }
        // SAFETY: the kernel wrote `got` keys' values, `cpus` of `size_of::<V>()` bytes each
        // (asserted above to be the kernel's stride), right after the `read * cpus` already there;
        // `V` is `Pod`, so any bytes are a valid `V`.
        unsafe { values.set_len((read + got) as usize * cpus) };
        if got == 0 {
            return Err(BatchError::Lookup { read, entries, source: io::Error::from(io::ErrorKind::UnexpectedEof) });
        }
        read += got;
        last = next;
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attribute_is_the_kernels_batch_member() {
        // Four pointers, count and map_fd, elem_flags and flags (uapi/linux/bpf.h).
        assert_eq!(size_of::<BatchAttr>(), 56);
        assert_eq!(std::mem::offset_of!(BatchAttr, count), 32);
        assert_eq!(std::mem::offset_of!(BatchAttr, map_fd), 36);
        assert_eq!(std::mem::offset_of!(BatchAttr, flags), 48);
    }

    #[test]
    fn a_call_copies_at_most_the_bound_and_at_least_one_key() {
        // The capture record (96 bytes) at 1 MiB: 5,461 slots on 2 CPUs, 42 on 256.
        assert_eq!(keys_per_call(96, 2, 1 << 20), 5461);
        assert_eq!(keys_per_call(96, 256, 1 << 20), 42);
        assert_eq!(keys_per_call(96, 4096, 1 << 20), 2, "4,096 CPUs: 384 KiB a key");
        assert_eq!(keys_per_call(96, 2, 1), 1, "a bound below one key still reads one");
    }
}
