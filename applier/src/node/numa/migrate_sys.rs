//! The NUMA syscalls, `migrate_pages(2)` and `move_pages(2)`, behind a safe API. One of the
//! crate's two syscall modules allowed `unsafe` (the other is `collectors::perf_sys`): glibc
//! has no wrappers and neither nix nor rustix binds them (rustix lists both as not yet
//! implemented), so they are called through `libc::syscall` with buffers this module owns.
//! The two calls are the crate's only use of `libc` besides `perf_event_open`.

#![allow(unsafe_code)]

use std::ffi::{c_int, c_ulong, c_void};

use rustix::io::Errno;

use super::topology::IdSet;

/// `include/uapi/linux/mempolicy.h`: move pages used only by the process.
pub const MPOL_MF_MOVE: c_int = 1 << 1;
/// Also pages shared with other processes (needs CAP_SYS_NICE).
pub const MPOL_MF_MOVE_ALL: c_int = 1 << 2;

/// Largest node id a mask may carry (the kernel's MAX_NUMNODES is at most 1024).
pub const MAX_NODE: u32 = 1023;

/// An errno from one of the calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SysError(pub Errno);

impl SysError {
    /// The target process does not exist (it exited).
    pub fn is_gone(self) -> bool {
        self.0 == Errno::SRCH
    }
}

impl std::fmt::Display for SysError {
    /// `strerror` text without Rust's " (os error N)" suffix: `No such process`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let full = std::io::Error::from(self.0).to_string();
        let text = full
            .find(" (os error")
            .map_or(full.as_str(), |i| &full[..i]);
        f.write_str(text)
    }
}

impl std::error::Error for SysError {}

fn last_error() -> SysError {
    SysError(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO))
}

/// A node bitmask as the kernel reads it: an array of `unsigned long`.
fn node_mask(nodes: &IdSet, words: usize) -> Vec<c_ulong> {
    let bits = c_ulong::BITS as usize;
    let mut mask = vec![0 as c_ulong; words];
    for &n in nodes {
        let n = n as usize;
        mask[n / bits] |= 1 << (n % bits);
    }
    mask
}

/// Moves every page of `pid` that is on a node of `from` to the nodes of `to` (the kernel
/// keeps relative placement when both have several nodes). Returns the number of pages that
/// could not be moved. Holds the target's mmap lock for the whole move.
pub fn migrate_pages(pid: u32, from: &IdSet, to: &IdSet) -> Result<u64, SysError> {
    let highest = from.iter().chain(to).copied().max().unwrap_or(0);
    if highest > MAX_NODE || pid == 0 || pid > i32::MAX as u32 {
        return Err(SysError(Errno::INVAL));
    }
    let bits = c_ulong::BITS as usize;
    let words = highest as usize / bits + 1;
    let old = node_mask(from, words);
    let new = node_mask(to, words);
    // The kernel reads maxnode - 1 bits (mm/mempolicy.c get_nodes); as libnuma does, pass the
    // buffer's bit count plus one.
    let maxnode = (words * bits + 1) as c_ulong;
    // SAFETY: `old` and `new` are live Vecs of `words` unsigned longs, which is exactly what
    // the kernel reads for `maxnode` = words * BITS + 1; the call writes no user memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_migrate_pages,
            pid as libc::pid_t,
            maxnode,
            old.as_ptr(),
            new.as_ptr(),
        )
    };
    if rc < 0 {
        Err(last_error())
    } else {
        Ok(rc as u64)
    }
}

fn move_pages_raw(
    pid: u32,
    addrs: &[u64],
    nodes: Option<&[c_int]>,
    flags: c_int,
) -> Result<(u64, Vec<c_int>), SysError> {
    if pid == 0 || pid > i32::MAX as u32 {
        return Err(SysError(Errno::INVAL));
    }
    if let Some(n) = nodes
        && n.len() != addrs.len()
    {
        return Err(SysError(Errno::INVAL));
    }
    if addrs.is_empty() {
        return Ok((0, Vec::new()));
    }
    let pages: Vec<*mut c_void> = addrs.iter().map(|a| *a as usize as *mut c_void).collect();
    let mut status: Vec<c_int> = vec![0; addrs.len()];
    let nodes_ptr = nodes.map_or(std::ptr::null(), <[c_int]>::as_ptr);
    // SAFETY: `pages`, `nodes` (when given) and `status` each hold `addrs.len()` elements and
    // outlive the call; the kernel reads the first two and writes only `status`. The page
    // addresses are in the *target's* address space and are never dereferenced here.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            pid as libc::pid_t,
            pages.len() as c_ulong,
            pages.as_ptr(),
            nodes_ptr,
            status.as_mut_ptr(),
            flags,
        )
    };
    if rc < 0 {
        Err(last_error())
    } else {
        Ok((rc as u64, status))
    }
}

/// The node of each page of `pid` at `addrs` (a negative errno for a page that is not
/// present or cannot be queried, e.g. `-ENOENT`, `-EFAULT`).
pub fn query_pages(pid: u32, addrs: &[u64]) -> Result<Vec<i32>, SysError> {
    move_pages_raw(pid, addrs, None, 0).map(|(_, s)| s)
}

/// Moves each page at `addrs[i]` to `nodes[i]`. Returns the pages not moved (kernels >= 4.17
/// count them in the return value) and the per-page status (node or negative errno).
pub fn move_pages(
    pid: u32,
    addrs: &[u64],
    nodes: &[i32],
    flags: c_int,
) -> Result<(u64, Vec<i32>), SysError> {
    move_pages_raw(pid, addrs, Some(nodes), flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_error_texts() {
        let nodes: IdSet = [0, 3, 64, 65].into_iter().collect();
        let m = node_mask(&nodes, 2);
        if c_ulong::BITS == 64 {
            assert_eq!(m, vec![0b1001, 0b11]);
        }
        assert_eq!(SysError(Errno::SRCH).to_string(), "No such process");
        assert!(SysError(Errno::SRCH).is_gone());
        assert!(!SysError(Errno::PERM).is_gone());
        let too_high: IdSet = [MAX_NODE + 1].into_iter().collect();
        assert_eq!(
            migrate_pages(1, &too_high, &IdSet::new()),
            Err(SysError(Errno::INVAL))
        );
        assert_eq!(
            move_pages(1, &[0x1000], &[], MPOL_MF_MOVE),
            Err(SysError(Errno::INVAL))
        );
    }
}
