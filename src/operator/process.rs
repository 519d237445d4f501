//! The standard process metrics, under the names every Prometheus client library and
//! controller-runtime operator exports them (unprefixed): `process_resident_memory_bytes`,
//! `process_virtual_memory_bytes`, `process_cpu_seconds_total`, `process_open_fds`,
//! `process_max_fds` and `process_start_time_seconds`.
//!
//! They are read from `/proc/self` when Prometheus scrapes, by a `Collector`: nothing is
//! sampled in between, and a value is never older than the scrape. Each one is read on its own,
//! so a file that cannot be read drops only its metrics; on other systems than Linux there is no
//! `/proc` and nothing is exported.
//!
//! Hand-written rather than a dependency: the maintained collector for `prometheus-client`
//! (`kubert-prometheus-process`, 0.2.3) is built against `prometheus-client` 0.23, whose
//! `Collector` trait is not the one of the 0.24 registry used here, and would bring `procfs`
//! along for four small files whose format the kernel keeps stable.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Exports the process metrics of this process, read at scrape time.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// One reading of the process metrics; `None` for what could not be read.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Reading {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub start_time_seconds: Option<f64>,
}

/// What `/proc/self/stat` says, in the units of the metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Stat {
    /// User plus system CPU time.
    pub cpu_seconds: f64,
    pub virtual_bytes: u64,
    pub resident_bytes: u64,
    /// Seconds from boot to the start of the process.
    pub started_after_boot: f64,
}

/// Parses `/proc/<pid>/stat`, given the clock ticks per second and the page size. The command
/// name (field 2) is in parentheses and may hold spaces and parentheses itself, so the fields
/// are counted from the last `)`.
pub fn parse_stat(text: &str, ticks_per_second: f64, page_size: u64) -> Option<Stat> {
    let (_, after_name) = text.rsplit_once(')')?;
    // `fields[0]` is field 3 (state) of proc_pid_stat(5).
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    let utime = field(14)?;
    let stime = field(15)?;
    let starttime = field(22)?;
    let vsize = field(23)?;
    let rss = field(24)?;
    Some(Stat {
        cpu_seconds: (utime + stime) as f64 / ticks_per_second,
        virtual_bytes: vsize,
        resident_bytes: rss.saturating_mul(page_size),
        started_after_boot: starttime as f64 / ticks_per_second,
    })
}

/// The boot time (`btime`, seconds since the epoch) from `/proc/stat`.
pub fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

/// The soft limit of open files from `/proc/<pid>/limits`; `None` when unlimited or absent.
pub fn parse_max_open_files(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

impl Reading {
    /// Reads this process's metrics from `/proc/self`; empty on other systems than Linux.
    pub fn current() -> Self {
        #[cfg(target_os = "linux")]
        {
            linux::read()
        }
        #[cfg(not(target_os = "linux"))]
        {
            Self::default()
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::{Reading, parse_boot_time, parse_max_open_files, parse_stat};

    fn sysconf(name: libc::c_int) -> Option<u64> {
        // SAFETY: sysconf only reads a system constant; it takes no pointers.
        let value = unsafe { libc::sysconf(name) };
        u64::try_from(value).ok().filter(|v| *v > 0)
    }

    pub fn read() -> Reading {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let stat = match (sysconf(libc::_SC_CLK_TCK), sysconf(libc::_SC_PAGESIZE)) {
            (Some(ticks), Some(page)) => {
                read("/proc/self/stat").and_then(|s| parse_stat(&s, ticks as f64, page))
            }
            _ => None,
        };
        let boot = read("/proc/stat").and_then(|s| parse_boot_time(&s));
        Reading {
            cpu_seconds: stat.as_ref().map(|s| s.cpu_seconds),
            resident_bytes: stat.as_ref().map(|s| s.resident_bytes),
            virtual_bytes: stat.as_ref().map(|s| s.virtual_bytes),
            start_time_seconds: stat
                .as_ref()
                .zip(boot)
                .map(|(s, boot)| boot as f64 + s.started_after_boot),
            // Counts the descriptor of the listing itself, as the other client libraries do.
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|entries| entries.count() as u64),
            max_fds: read("/proc/self/limits").and_then(|s| parse_max_open_files(&s)),
        }
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: Option<u64>,
) -> Result<(), std::fmt::Error> {
    let Some(value) = value else { return Ok(()) };
    let metric = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Reading {
    /// Writes every value that was read, under the standard names.
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(seconds) = self.cpu_seconds {
            let metric = ConstCounter::new(seconds);
            metric.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                metric.metric_type(),
            )?)?;
        }
        gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            self.resident_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            self.virtual_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors",
            self.open_fds,
        )?;
        gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors",
            self.max_fds,
        )?;
        if let Some(seconds) = self.start_time_seconds {
            let metric = ConstGauge::new(seconds);
            metric.encode(encoder.encode_descriptor(
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                None,
                metric.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        Reading::current().encode(encoder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    /// A process whose name holds a space and a parenthesis, 250 + 50 ticks of CPU, started
    /// 1000 ticks after boot, 1 GiB of address space and 5000 resident pages.
    const STAT: &str = "4242 (disruption) guard) S 1 4242 4242 0 -1 4194560 9000 0 12 0 250 50 0 0 20 0 8 0 1000 1073741824 5000 18446744073709551615 1 1 0 0 0 0 0 4096 17662 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    const LIMITS: &str = "\
Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max file size             unlimited            unlimited            bytes
Max open files            1048576              1048576              files
Max locked memory         8388608              8388608              bytes
";

    const PROC_STAT: &str = "\
cpu  2255 34 2290 22625563 6290 127 456 0 0 0
intr 114930548 113199788 3 0 5 263 0 4 [...]
ctxt 1990473
btime 1800000000
processes 2915
";

    #[test]
    fn the_stat_line_gives_cpu_time_memory_and_the_start_after_boot() {
        let stat = parse_stat(STAT, 100.0, 4096).unwrap();
        assert_eq!(
            stat,
            Stat {
                cpu_seconds: 3.0,
                virtual_bytes: 1 << 30,
                resident_bytes: 5000 * 4096,
                started_after_boot: 10.0,
            }
        );
    }

    #[test]
    fn a_truncated_or_garbled_stat_line_gives_nothing() {
        assert_eq!(parse_stat("4242 (guard) S 1 4242", 100.0, 4096), None);
        assert_eq!(parse_stat("no parenthesis at all", 100.0, 4096), None);
        let garbled = STAT.replace(" 250 50 ", " x 50 ");
        assert_eq!(parse_stat(&garbled, 100.0, 4096), None);
    }

    #[test]
    fn the_limits_give_the_soft_limit_of_open_files() {
        assert_eq!(parse_max_open_files(LIMITS), Some(1048576));
        let soft_lower = LIMITS.replace(
            "1048576              1048576",
            "1024                 524288 ",
        );
        assert_eq!(parse_max_open_files(&soft_lower), Some(1024));
        assert_eq!(
            parse_max_open_files(
                &LIMITS.replace("1048576              1048576", "unlimited unlimited")
            ),
            None
        );
        assert_eq!(parse_max_open_files("Limit Soft Limit\n"), None);
    }

    #[test]
    fn the_boot_time_is_the_btime_line() {
        assert_eq!(parse_boot_time(PROC_STAT), Some(1_800_000_000));
        assert_eq!(parse_boot_time("cpu 1 2 3\n"), None);
    }

    fn encoded(reading: &Reading) -> String {
        #[derive(Debug)]
        struct Fixed(Reading);
        impl Collector for Fixed {
            fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
                self.0.encode(encoder)
            }
        }
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed(reading.clone())));
        crate::testing::encode(&registry)
    }

    #[test]
    fn a_reading_is_exported_under_the_standard_unprefixed_names() {
        let out = encoded(&Reading {
            cpu_seconds: Some(3.5),
            resident_bytes: Some(20_480_000),
            virtual_bytes: Some(1 << 30),
            open_fds: Some(17),
            max_fds: Some(1024),
            start_time_seconds: Some(1_800_000_010.5),
        });
        for line in [
            "# TYPE process_cpu_seconds counter",
            "process_cpu_seconds_total 3.5",
            "# TYPE process_resident_memory_bytes gauge",
            "process_resident_memory_bytes 20480000",
            "process_virtual_memory_bytes 1073741824",
            "process_open_fds 17",
            "process_max_fds 1024",
            "process_start_time_seconds 1800000010.5",
        ] {
            assert!(
                out.contains(&format!("{line}\n")),
                "missing {line} in\n{out}"
            );
        }
    }

    #[test]
    fn what_could_not_be_read_is_left_out() {
        let out = encoded(&Reading {
            open_fds: Some(3),
            ..Reading::default()
        });
        assert!(out.contains("process_open_fds 3\n"), "{out}");
        assert!(!out.contains("process_resident_memory_bytes"), "{out}");
        assert!(!out.contains("process_cpu_seconds"), "{out}");
        assert_eq!(encoded(&Reading::default()), "# EOF\n");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_its_own_values_from_proc() {
        let reading = Reading::current();
        assert!(
            reading.resident_bytes.is_some_and(|b| b > 1 << 20),
            "{reading:?}"
        );
        assert!(
            reading.virtual_bytes >= reading.resident_bytes,
            "{reading:?}"
        );
        assert!(reading.cpu_seconds.is_some_and(|s| s >= 0.0), "{reading:?}");
        assert!(reading.open_fds.is_some_and(|n| n >= 3), "{reading:?}");
        assert!(reading.max_fds >= reading.open_fds, "{reading:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = reading.start_time_seconds.unwrap();
        assert!(
            started <= now + 1.0 && started > now - 86_400.0,
            "{started} vs {now}"
        );
    }
}
