//! The simulator's own resource use, from `/proc` (Linux): CPU time, resident
//! memory and the load average, so a run can tell its own saturation from
//! the server's.

/// `/proc` reports CPU time in clock ticks of `USER_HZ`, which the kernel's
/// ABI fixes at 100 per second whatever `CONFIG_HZ` is.
const USER_HZ: f64 = 100.0;

/// User + system CPU seconds of this process (all threads), if readable.
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces; fields after its ')' are plain.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After ')': state is field 3, utime field 14, stime field 15.
    let utime: f64 = fields.nth(11)?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

/// Resident set size of this process in bytes, from `/proc/self/statm`.
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Peak resident set size (`VmHWM`) of process `pid` in bytes, while it runs.
pub fn peak_rss_bytes_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The 1-minute load average.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_usage() {
        let before = cpu_seconds().unwrap();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(cpu_seconds().unwrap() >= before);
        assert!(rss_bytes() > 0);
        let peak = peak_rss_bytes_of(std::process::id()).unwrap();
        assert!(peak >= rss_bytes() / 2, "VmHWM {peak} below the RSS");
        assert_eq!(peak_rss_bytes_of(u32::MAX), None);
        assert!(load_average().is_some());
    }
}
