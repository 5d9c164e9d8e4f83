//! How one `memory.reclaim` write is cut, for every feature that reclaims: the kernel reclaims
//! in the writer's context, so a reclaim is written in slices with a sleep between two, and a
//! CPU the container shares with the writer never waits out a whole reclaim (17 MiB held a
//! one-CPU guest's CPU for 2 ms; the container's reads' p99 paid for it).

use std::time::Duration;

/// The most one write asks for.
pub const WRITE_SLICE: u64 = 2 << 20;

/// The sleep between two slices: the writer leaves the run queue, so a task of the container
/// that woke meanwhile runs at once.
pub const SLICE_GAP: Duration = Duration::from_micros(100);
