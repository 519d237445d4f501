//! Giving freed memory back to the system after the initial lists.
//!
//! Start-up lists every pod and node in pages of hundreds of objects; once parsed, those
//! buffers are free but glibc keeps their pages in its arenas, so a restarted operator would
//! stay tens of megabytes above one that grew with the cluster. `malloc_trim` returns every
//! free page; it runs when every cache has synced, and after each (re-)list of a watch. Large
//! buffers are not kept at all ([`return_large_buffers_at_once`]).

/// Buffers at least this large are mapped on their own and unmapped when freed.
const MMAP_THRESHOLD: i32 = 128 * 1024;

/// Makes every allocation of [`MMAP_THRESHOLD`] or more a mapping of its own, returned to the
/// system the moment it is freed (glibc only; elsewhere a no-op). glibc's default raises that
/// threshold to the largest block freed so far (up to 32 MiB), after which a list's page of a
/// few MiB, or an object with 250 KB of annotations a tenant wrote, is carved from the heap and
/// its pages stay resident: measured with a thousand such PDBs, a re-list left the operator
/// 53–65 MiB above its baseline with the default, 10 MiB with a fixed threshold
/// (`tests/tenant_memory.rs`). Called once, as the operator starts.
pub fn return_large_buffers_at_once() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it takes no pointers.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

/// Returns the allocator's free pages to the system (glibc only; elsewhere a no-op).
pub fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}
