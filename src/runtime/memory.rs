//! Giving freed memory back to the system after the initial lists.
//!
//! Start-up lists every pod and node in pages of hundreds of objects; once parsed, those
//! buffers are free but glibc keeps their pages in its arenas, so a restarted operator would
//! stay tens of megabytes above one that grew with the cluster. `malloc_trim` returns every
//! free page; it runs once, when every cache has synced.

/// Returns the allocator's free pages to the system (glibc only; elsewhere a no-op).
pub fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}
