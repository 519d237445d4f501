//! The process's limit of open files. Every API connection is one file descriptor, and the
//! common default soft limit (1,024) is far below what the API is meant to hold; the hard limit
//! a container gets is usually high. So the API server raises the soft limit to the hard one
//! when it starts, as the Go runtime does for every Go program since 1.19, and the API caps its
//! connections below what is left ([`connections_within`]).

/// Descriptors kept for everything but API connections: the API server's connections and
/// watches, the admin and webhook ports, files.
pub const RESERVED: u64 = 256;

/// Raises the soft limit of open files to the hard limit; the soft limit now (`None` when it
/// cannot be read, or on other systems than Unix).
pub fn raise_soft_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit only read and write the struct passed by reference.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return None;
            }
            if limit.rlim_cur < limit.rlim_max {
                let raised = libc::rlimit {
                    rlim_cur: limit.rlim_max,
                    rlim_max: limit.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    limit = raised;
                }
            }
        }
        #[allow(clippy::useless_conversion)] // rlim_t is u64 on Linux, not on every Unix
        Some(u64::try_from(limit.rlim_cur).unwrap_or(u64::MAX))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The connections the API may hold: `wanted`, or fewer when the soft limit of open files
/// leaves less after [`RESERVED`]; at least 1.
pub fn connections_within(wanted: usize, soft_limit: Option<u64>) -> usize {
    match soft_limit {
        Some(limit) => {
            let room = usize::try_from(limit.saturating_sub(RESERVED)).unwrap_or(usize::MAX);
            wanted.min(room).max(1)
        }
        None => wanted.max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_cap_leaves_room_for_the_other_descriptors() {
        assert_eq!(connections_within(10_000, Some(1_048_576)), 10_000);
        assert_eq!(connections_within(10_000, Some(1_024)), 768);
        assert_eq!(connections_within(10_000, Some(100)), 1);
        assert_eq!(connections_within(10_000, None), 10_000);
    }

    #[test]
    fn raising_the_soft_limit_reaches_the_hard_limit() {
        assert!(raise_soft_limit().is_some());
        let text = std::fs::read_to_string("/proc/self/limits").unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap();
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[3], fields[4], "soft and hard: {line}");
    }
}
