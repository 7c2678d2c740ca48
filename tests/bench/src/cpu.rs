//! CPU time of the local processes a size run measures (the ES emulator, scanstore,
//! PostgreSQL and the bench itself), sampled from `/proc` every 50 ms so that what a phase
//! cost the machine can be read afterwards for any wall-clock window: the ceiling's CPU
//! against publication's, on the same cores.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Who a process is, in the report's column order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Emulator = 0,
    Scanstore = 1,
    Postgres = 2,
    Bench = 3,
}

pub const ROLES: usize = 4;
pub const ROLE_NAMES: [&str; ROLES] = ["ES emulator", "scanstore", "PostgreSQL", "bench"];

/// Reading `/proc/<pid>/stat` of a many-threaded process is not free: every 10 ms the
/// sampler itself took 4 % of a core, every 50 ms under 1 %.
const PERIOD: Duration = Duration::from_millis(50);

/// CPU seconds per role over a window (`None`: no such process was watched, e.g. a remote
/// PostgreSQL or a real cluster).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub wall: f64,
    pub roles: [Option<f64>; ROLES],
    /// CPU seconds the whole machine spent busy (`/proc/stat`: every process, the kernel's
    /// own threads and interrupts), where `/proc/stat` can be read.
    pub machine: Option<f64>,
}

impl Usage {
    pub fn total(&self) -> f64 {
        self.roles.iter().flatten().sum()
    }

    /// The mean of several windows of the same work (the two ceiling runs).
    pub fn mean(all: &[Usage]) -> Usage {
        let n = all.len().max(1) as f64;
        let mut out = Usage::default();
        for u in all {
            out.wall += u.wall / n;
            if let Some(m) = u.machine {
                out.machine = Some(out.machine.unwrap_or(0.0) + m / n);
            }
            for (o, r) in out.roles.iter_mut().zip(u.roles) {
                if let Some(r) = r {
                    *o = Some(o.unwrap_or(0.0) + r / n);
                }
            }
        }
        out
    }
}

/// One sample: when, and each role's cumulative CPU ticks.
#[derive(Clone, Copy, Debug)]
struct Sample {
    at: f64,
    ticks: [u64; ROLES],
    /// The machine's busy ticks, all CPUs (`None`: `/proc/stat` unreadable).
    machine: Option<u64>,
}

#[derive(Default)]
struct State {
    /// Each process with whether it still runs: an exited one is not read again (its pid
    /// may come back as another process).
    watched: Vec<(Role, u32, bool)>,
    /// The last ticks read of every process ever watched: a process that exited keeps
    /// counting what it used, so a role's total never goes back.
    last: HashMap<u32, u64>,
    samples: Vec<Sample>,
}

impl State {
    fn sample(&mut self, at: f64) {
        let mut ticks = [0u64; ROLES];
        for (role, pid, alive) in &mut self.watched {
            if *alive {
                match process_ticks(*pid, *role != Role::Bench) {
                    Some(t) => {
                        let last = self.last.entry(*pid).or_insert(0);
                        *last = (*last).max(t);
                    }
                    None => *alive = false,
                }
            }
            ticks[*role as usize] += self.last.get(pid).copied().unwrap_or(0);
        }
        self.samples.push(Sample {
            at,
            ticks,
            machine: machine_ticks(),
        });
    }

    /// What `of` reads from each sample at `at`, interpolated between the samples around it.
    fn at(&self, at: f64, of: impl Fn(&Sample) -> f64) -> f64 {
        let i = self.samples.partition_point(|s| s.at < at);
        match (
            i.checked_sub(1).map(|j| &self.samples[j]),
            self.samples.get(i),
        ) {
            (Some(a), Some(b)) if b.at > a.at => {
                let f = (at - a.at) / (b.at - a.at);
                of(a) + f * (of(b) - of(a))
            }
            (_, Some(b)) => of(b),
            (Some(a), None) => of(a),
            (None, None) => 0.0,
        }
    }

    fn usage(&self, from: f64, to: f64, hz: f64) -> Usage {
        let mut u = Usage {
            wall: to - from,
            roles: [None; ROLES],
            machine: None,
        };
        let seconds =
            |of: &dyn Fn(&Sample) -> f64| ((self.at(to, of) - self.at(from, of)) / hz).max(0.0);
        for (r, slot) in u.roles.iter_mut().enumerate() {
            if self.watched.iter().any(|(role, _, _)| *role as usize == r) {
                *slot = Some(seconds(&|s| s.ticks[r] as f64));
            }
        }
        if self.samples.iter().all(|s| s.machine.is_some()) {
            u.machine = Some(seconds(&|s| s.machine.unwrap_or(0) as f64));
        }
        u
    }
}

/// The sampling thread and what it has seen; stops on drop.
pub struct Sampler {
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    hz: f64,
}

impl Sampler {
    /// Starts sampling, watching the bench itself.
    pub fn start() -> Sampler {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                s.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .sample(now());
                std::thread::sleep(PERIOD);
            }
        });
        let sampler = Sampler {
            state,
            stop,
            thread: Some(thread),
            hz,
        };
        sampler.watch(Role::Bench, std::process::id());
        sampler
    }

    pub fn watch(&self, role: Role, pid: u32) {
        let mut s = self.lock();
        if s.watched.iter().any(|(_, p, _)| *p == pid) {
            return;
        }
        s.watched.push((role, pid, true));
        // A first reading now: the process's CPU before it was watched is not a phase's.
        s.sample(now());
    }

    /// CPU per role between two instants (seconds since the Unix epoch).
    pub fn usage(&self, from: f64, to: f64) -> Usage {
        let mut s = self.lock();
        s.sample(now());
        s.usage(from, to, self.hz)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Seconds since the Unix epoch.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The PostgreSQL server process behind a connection, when it runs on this machine: the
/// parent of the connection's backend (whose children are all the backends).
pub fn postmaster(backend_pid: u32) -> Option<u32> {
    let backend = Stat::of(backend_pid)?;
    (backend.comm == "postgres" && Stat::of(backend.ppid)?.comm == "postgres")
        .then_some(backend.ppid)
}

/// What the sampler reads of `/proc/<pid>/stat`.
#[derive(Debug, PartialEq)]
struct Stat {
    comm: String,
    ppid: u32,
    /// utime + stime.
    own: u64,
    /// cutime + cstime: children this process has reaped.
    reaped: u64,
}

impl Stat {
    fn of(pid: u32) -> Option<Stat> {
        Stat::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    fn parse(text: &str) -> Option<Stat> {
        // comm may contain spaces and parentheses: it ends at the last ')'. After it:
        // state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
        let comm = text.get(text.find('(')? + 1..text.rfind(')')?)?;
        let f: Vec<&str> = text
            .get(text.rfind(')')? + 1..)?
            .split_whitespace()
            .collect();
        let n = |i: usize| f.get(i)?.parse::<u64>().ok();
        Some(Stat {
            comm: comm.to_string(),
            ppid: f.get(1)?.parse().ok()?,
            own: n(11)? + n(12)?,
            reaped: n(13)? + n(14)?,
        })
    }
}

/// Busy ticks of all CPUs from `/proc/stat`'s `cpu` line: user, nice, system, irq, softirq
/// and steal (idle and iowait are not busy).
fn machine_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    busy_ticks(stat.lines().next()?)
}

fn busy_ticks(line: &str) -> Option<u64> {
    let mut fields = line.split_whitespace();
    (fields.next()? == "cpu").then_some(())?;
    let v: Vec<u64> = fields.map_while(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal
    (v.len() >= 8).then(|| v[0] + v[1] + v[2] + v[5] + v[6] + v[7])
}

/// A process's CPU ticks. With `family`, those of its reaped children and of its live
/// direct children too (PostgreSQL's backends; the process a wrapper script started).
/// The bench counts only its own: the scanstore processes it reaps are counted as
/// scanstore already.
fn process_ticks(pid: u32, family: bool) -> Option<u64> {
    let mut total = 0;
    if family {
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        for child in children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
        {
            if let Some(c) = Stat::of(child) {
                total += c.own + c.reaped;
            }
        }
    }
    let stat = Stat::of(pid)?;
    Some(total + stat.own + if family { stat.reaped } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_busy_leaves_out_idle_and_iowait() {
        let line = "cpu  100 5 30 9000 40 2 3 1 0 0";
        assert_eq!(busy_ticks(line), Some(100 + 5 + 30 + 2 + 3 + 1));
        assert_eq!(busy_ticks("cpu0 1 2 3 4 5 6 7 8"), None);
        assert_eq!(busy_ticks("cpu 1 2 3"), None);
    }

    #[test]
    fn stat_line_with_a_strange_name() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 30 7 3 20 0 1 0 5 0 0";
        let stat = Stat::parse(line).unwrap();
        assert_eq!(
            stat,
            Stat {
                comm: "a (b) c".into(),
                ppid: 1,
                own: 280,
                reaped: 10
            }
        );
        assert_eq!(Stat::parse("4242 (x) S 1"), None, "truncated");
    }

    #[test]
    fn windows_interpolate_between_samples_and_exited_processes_keep_counting() {
        let mut s = State {
            watched: vec![(Role::Emulator, 1, false), (Role::Bench, 2, false)],
            ..State::default()
        };
        for (at, ticks, machine) in [
            (10.0, [100, 0, 0, 5], 1000),
            (11.0, [300, 0, 0, 5], 1250),
            (12.0, [300, 0, 0, 25], 1400),
        ] {
            s.samples.push(Sample {
                at,
                ticks,
                machine: Some(machine),
            });
        }
        let u = s.usage(10.5, 12.0, 100.0);
        assert_eq!(u.wall, 1.5);
        assert_eq!(
            u.roles[Role::Emulator as usize],
            Some(1.0),
            "200 − 200 halfway"
        );
        assert_eq!(u.roles[Role::Scanstore as usize], None, "not watched");
        assert_eq!(u.roles[Role::Bench as usize], Some(0.2));
        assert!((u.total() - 1.2).abs() < 1e-9);
        let machine = u.machine.unwrap();
        assert!(
            (machine - 2.75).abs() < 1e-9,
            "1125 → 1400 ticks: {machine}"
        );
        let m = Usage::mean(&[
            u,
            Usage {
                wall: 0.5,
                roles: [Some(3.0), None, None, Some(0.0)],
                machine: Some(1.25),
            },
        ]);
        assert_eq!(m.wall, 1.0);
        assert_eq!(m.roles[0], Some(2.0));
        assert_eq!(m.machine, Some(2.0));
    }

    #[test]
    fn sampler_sees_its_own_cpu() {
        let s = Sampler::start();
        let from = now();
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < Duration::from_millis(300) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let u = s.usage(from, now());
        let bench = u.roles[Role::Bench as usize].unwrap();
        // Ticks are 10 ms; a busy 300 ms shows as most of that (and never as nothing).
        assert!(bench > 0.1, "{u:?}");
        assert_eq!(u.roles[Role::Emulator as usize], None);
        // The machine's busy time and the process's are separate counts of 10 ms ticks,
        // each interpolated between samples: a tick either way is no disagreement.
        assert!(u.machine.unwrap() >= bench - 0.02, "{u:?}");
    }
}
