//! Facts about this process read from `/proc/self` (Linux): resident memory,
//! CPU time, open descriptors and threads. Elsewhere [`read`] gives `None`.
//! No `unsafe`: the clock tick is the kernel's fixed user-visible `USER_HZ`.

use std::fs;

/// The unit of `utime` and `stime` in `/proc/<pid>/stat`. The kernel reports
/// them in `USER_HZ`, which is 100 on every architecture Linux exposes to
/// user space (it is an ABI constant, independent of the kernel's `HZ`).
const USER_HZ: f64 = 100.0;

/// One reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Process {
    /// Resident set size (`VmRSS`), bytes.
    pub resident_bytes: u64,
    /// User plus system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Entries of `/proc/self/fd`.
    pub open_fds: u64,
    /// Threads of the process.
    pub threads: u64,
}

/// Reads the current process's facts, or `None` where `/proc` is missing.
pub fn read() -> Option<Process> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    let open_fds = fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(Process {
        resident_bytes: status_kib(&status, "VmRSS:")? * 1024,
        cpu_seconds: cpu_seconds(&stat)?,
        open_fds,
        threads: status_kib(&status, "Threads:")?,
    })
}

/// The number after `key` in `/proc/<pid>/status` (kB for sizes).
fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// `utime + stime` from `/proc/<pid>/stat`, in seconds. The command name (field
/// 2) is in parentheses and may hold spaces, so fields are counted after the
/// last `)`: state is field 3, utime field 14, stime field 15.
fn cpu_seconds(stat: &str) -> Option<f64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_spaces_and_parens_in_the_name() {
        let stat = "4242 (ctx (a) b) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1 2 3";
        assert_eq!(cpu_seconds(stat), Some(3.0));
        assert_eq!(cpu_seconds("garbage"), None);
    }

    #[test]
    fn parses_status_fields() {
        let status = "Name:\tx\nVmRSS:\t   2048 kB\nThreads:\t7\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(2048));
        assert_eq!(status_kib(status, "Threads:"), Some(7));
        assert_eq!(status_kib(status, "VmSwap:"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process() {
        let p = read().expect("linux has /proc/self");
        assert!(p.resident_bytes > 1 << 20, "{p:?}");
        assert!(p.open_fds >= 3 && p.threads >= 1, "{p:?}");
        let burn: u64 = (0..20_000_000u64).fold(0, |a, x| a ^ x.wrapping_mul(31));
        let later = read().expect("linux has /proc/self");
        assert!(burn != 1 && later.cpu_seconds >= p.cpu_seconds);
    }
}
