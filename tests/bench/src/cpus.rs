//! The run's CPU split (`--emulator-cpus`): the ES emulator on the cores given, the bench,
//! scanstore and PostgreSQL on the others, as when Elasticsearch has machines of its own.

use std::sync::OnceLock;

use postgres::{Client, NoTls};

/// A set of CPU numbers, kept sorted.
#[derive(Clone, Debug, PartialEq)]
pub struct Cpus(Vec<usize>);

impl Cpus {
    /// Parses a list as `taskset -c` takes it: `0`, `0,2`, `0-1`.
    pub fn parse(list: &str) -> Result<Cpus, String> {
        let mut cpus = Vec::new();
        for part in list.split(',').map(str::trim) {
            let number = |s: &str| {
                s.trim()
                    .parse::<usize>()
                    .map_err(|_| format!("--emulator-cpus: {s:?} is not a CPU number"))
            };
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (number(a)?, number(b)?);
                    if a > b {
                        return Err(format!("--emulator-cpus: {part:?} is an empty range"));
                    }
                    cpus.extend(a..=b);
                }
                None => cpus.push(number(part)?),
            }
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(Cpus(cpus))
    }

    /// The CPUs this process may run on now.
    fn allowed() -> Result<Cpus, String> {
        // SAFETY: cpu_set_t is plain data; sched_getaffinity fills at most its size.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
            return Err(format!(
                "sched_getaffinity: {}",
                std::io::Error::last_os_error()
            ));
        }
        let max = 8 * size;
        // SAFETY: every index is below the set's capacity.
        Ok(Cpus(
            (0..max)
                .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
                .collect(),
        ))
    }

    fn without(&self, other: &Cpus) -> Cpus {
        Cpus(
            self.0
                .iter()
                .copied()
                .filter(|c| !other.0.contains(c))
                .collect(),
        )
    }

    fn set(&self) -> libc::cpu_set_t {
        // SAFETY: as in `allowed`; `apply` has checked that the numbers are allowed CPUs,
        // so each is below the set's capacity.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in &self.0 {
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        set
    }

    /// Restricts thread `tid` (0: the calling thread) to these CPUs.
    fn pin_thread(&self, tid: libc::pid_t) -> std::io::Result<()> {
        let set = self.set();
        // SAFETY: a syscall on a fully initialised set of the size given.
        let done =
            unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        if done == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Restricts every thread of process `pid` to these CPUs; threads and processes it
    /// starts later inherit the restriction.
    fn pin_process(&self, pid: u32) -> std::io::Result<()> {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))?;
        for task in tasks.flatten() {
            if let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) {
                // A thread that exited meanwhile has nothing left to pin.
                let _ = self.pin_thread(tid);
            }
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// As `taskset -c` prints it.
    pub fn list(&self) -> String {
        self.0
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Where the emulator and everything else run.
pub struct Split {
    pub emulator: Cpus,
    pub rest: Cpus,
    /// The CPUs this process (and, assumed, PostgreSQL) had before: the machine's, given
    /// back to PostgreSQL by [`undo`].
    pub allowed: Cpus,
    postmaster: u32,
}

static SPLIT: OnceLock<Split> = OnceLock::new();

/// The run's split, once [`apply`] has made it.
pub fn split() -> Option<&'static Split> {
    SPLIT.get()
}

/// Splits the CPUs this process may use: `emulator` for emulators started from now on,
/// the rest for this process (and so the scanstore processes it starts) and for the
/// PostgreSQL cluster at `database_url`, which must run on this machine: its postmaster
/// and every process it has started (the backends it forks later inherit the set).
pub fn apply(emulator: &Cpus, database_url: &str) -> Result<(), String> {
    let allowed = Cpus::allowed()?;
    if emulator.is_empty() || emulator.0.iter().any(|c| !allowed.0.contains(c)) {
        return Err(format!(
            "--emulator-cpus {}: not among the CPUs this process may use ({})",
            emulator.list(),
            allowed.list()
        ));
    }
    let rest = allowed.without(emulator);
    if rest.is_empty() {
        return Err(format!(
            "--emulator-cpus {}: leaves no CPU for scanstore and PostgreSQL",
            emulator.list()
        ));
    }
    let postmaster = postmaster_pid(database_url)?;
    rest.pin_process(postmaster)
        .map_err(|e| format!("/proc/{postmaster}: {e}"))?;
    for child in children_of(postmaster) {
        match rest.pin_process(child) {
            // A backend that exited since the listing has nothing left to pin.
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("/proc/{child}: {e}"));
            }
            _ => {}
        }
    }
    rest.pin_process(std::process::id())
        .map_err(|e| format!("/proc/self: {e}"))?;
    let _ = SPLIT.set(Split {
        emulator: emulator.clone(),
        rest,
        allowed,
        postmaster,
    });
    Ok(())
}

/// Gives the PostgreSQL cluster back the CPUs it had before [`apply`] (assumed to be those
/// this process had), so that the split ends with the run.
pub fn undo() {
    if let Some(split) = split() {
        let _ = split.allowed.pin_process(split.postmaster);
        for child in children_of(split.postmaster) {
            let _ = split.allowed.pin_process(child);
        }
    }
}

/// Restricts `cmd`'s process to the emulator's CPUs, before it starts any thread.
pub fn pin_emulator(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    if let Some(split) = split() {
        let emulator = split.emulator.clone();
        // SAFETY: the closure runs in the child between fork and exec, where only
        // async-signal-safe calls are allowed; `pin_thread` allocates nothing and makes
        // one syscall.
        unsafe {
            cmd.pre_exec(move || emulator.pin_thread(0));
        }
    }
}

/// The PostgreSQL postmaster's process id, from its data directory's `postmaster.pid`.
fn postmaster_pid(database_url: &str) -> Result<u32, String> {
    let mut db = Client::connect(database_url, NoTls).map_err(|e| format!("connect: {e}"))?;
    let dir: String = db
        .query_one("SELECT current_setting('data_directory')", &[])
        .map_err(|e| format!("data_directory: {e}"))?
        .get(0);
    let file = format!("{dir}/postmaster.pid");
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("{file}: {e} (--emulator-cpus needs PostgreSQL on this machine)"))?;
    text.lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| format!("{file}: no process id on its first line"))
}

/// The processes whose parent is `pid` (`/proc/*/stat`, fourth field).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                // The command name may hold spaces and parentheses; fields follow its last ')'.
                .and_then(|s| {
                    let rest = &s[s.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_as_taskset_takes_them() {
        assert_eq!(Cpus::parse("0").unwrap().0, vec![0]);
        assert_eq!(Cpus::parse("2,0-1,1").unwrap().0, vec![0, 1, 2]);
        assert!(Cpus::parse("1-0").is_err());
        assert!(Cpus::parse("a").is_err());
        assert!(Cpus::parse("").is_err());
    }

    #[test]
    fn a_process_gone_is_not_found() {
        // `apply` skips backends that exit between the listing and the pinning by this kind.
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let pid = gone.id();
        gone.wait().unwrap();
        let err = Cpus::allowed().unwrap().pin_process(pid).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn the_rest_is_what_the_emulator_does_not_get() {
        let all = Cpus(vec![0, 1, 2, 3]);
        assert_eq!(all.without(&Cpus(vec![0, 2])).0, vec![1, 3]);
    }
}
