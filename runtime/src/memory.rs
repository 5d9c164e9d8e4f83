//! The process's memory footprint: no transparent huge pages.
//!
//! A long-running server touches a few MiB spread over its allocator's arenas. With
//! transparent huge pages every touched 2 MiB region is backed by a whole huge page: mimalloc
//! asks for them on its arenas (`madvise(MADV_HUGEPAGE)`, honoured in the kernel's default
//! `madvise` mode) and a kernel in `always` mode hands them out anyway. Measured on the
//! webhook's re-resolver (`webhook/tests/reresolve_memory.rs`, docs/benchmarks.md): the same few
//! MiB of live heap cost about twice the RSS with huge pages as without.

/// Turns transparent huge pages off for this process (`prctl(PR_SET_THP_DISABLE)`, inherited by
/// children); memory already backed by huge pages keeps them, so call it first in `main`.
pub fn disable_transparent_huge_pages() -> std::io::Result<()> {
    rustix::thread::disable_transparent_huge_pages(true).map_err(std::io::Error::from)
}
