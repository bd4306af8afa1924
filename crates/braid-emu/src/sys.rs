//! Thin, safe wrappers over the Linux calls the emulator needs: TUN
//! devices, network-namespace switching, eventfd, ppoll, pidfd, signals and
//! process identity. Every `unsafe` block of the crate lives here.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// `_IOW('T', 202, int)`: attach a file descriptor of /dev/net/tun to a
/// (new) interface (linux/if_tun.h).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The effective user id is 0.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Open `path` with `flags` (O_CLOEXEC added).
fn open(path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let fd = cvt(unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) })?;
    // SAFETY: open returned a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Create TUN interface `name` (IFF_TUN | IFF_NO_PI: raw IP packets, no
/// header) in the calling thread's network namespace and return its
/// non-blocking descriptor. The interface disappears when the descriptor
/// is closed, which is what makes a killed forwarder leave no interface.
pub fn open_tun(name: &str) -> io::Result<OwnedFd> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    let fd = open(Path::new("/dev/net/tun"), libc::O_RDWR | libc::O_NONBLOCK)?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads a `struct ifreq`, which `IfReq` lays out.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) })?;
    Ok(fd)
}

/// A handle on a network namespace (an open `/run/netns/NAME` or
/// `/proc/thread-self/ns/net`).
#[derive(Debug)]
pub struct NetNs(OwnedFd);

impl NetNs {
    /// The namespace the calling thread is in.
    pub fn current() -> io::Result<NetNs> {
        open(Path::new("/proc/thread-self/ns/net"), libc::O_RDONLY).map(NetNs)
    }

    /// The named namespace created by `ip netns add NAME`.
    pub fn named(name: &str) -> io::Result<NetNs> {
        open(&Path::new("/run/netns").join(name), libc::O_RDONLY).map(NetNs)
    }

    /// Move the calling thread (only it) into this namespace. Sockets and
    /// TUN devices it opens from now on live there, and stay there after
    /// the thread moves on.
    pub fn enter(&self) -> io::Result<()> {
        // SAFETY: setns on a namespace descriptor affects only this thread.
        cvt(unsafe { libc::setns(self.0.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
    }
}

/// An eventfd: a counter other threads bump to wake a poller.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A non-blocking eventfd.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: fresh descriptor we own.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Wake the poller.
    pub fn notify(&self) {
        let one = 1u64.to_ne_bytes();
        // A full counter (EAGAIN) already means "wake up": ignoring is right.
        let _ = write(self.0.as_raw_fd(), &one);
    }

    /// Reset the counter after a wake-up.
    pub fn drain(&self) {
        let mut buf = [0u8; 8];
        let _ = read(self.0.as_raw_fd(), &mut buf);
    }

    /// The descriptor, to poll.
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// `read(2)`: bytes read, or the error (EAGAIN when nothing is ready).
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the buffer is valid for `buf.len()` bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `write(2)`: bytes written, or the error.
pub fn write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: the buffer is valid for `buf.len()` bytes.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `ppoll(2)` with nanosecond timeout (`None` = wait forever). EINTR is
/// reported as zero ready descriptors.
pub fn ppoll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64 / 2) as libc::time_t,
        tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `fds` is a valid array of pollfd; `tsp` null or valid.
    let n = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(n as usize)
}

/// Ask the kernel to wake this thread at most `slack` after a timeout
/// (default 50 µs), which the emulator's delay precision depends on.
pub fn set_timer_slack(slack: Duration) {
    let ns = slack.as_nanos().max(1) as libc::c_ulong;
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long and affects only this thread.
    unsafe {
        libc::prctl(
            libc::PR_SET_TIMERSLACK,
            ns,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        );
    }
}

/// Raise the calling thread's scheduling priority to nice `nice` (needs
/// root; best effort): the forwarder's delay precision suffers first when
/// the machine is busy.
pub fn set_thread_nice(nice: i32) {
    // SAFETY: gettid has no preconditions; setpriority on our own thread id.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
    }
}

/// Run the calling thread under SCHED_FIFO at `priority` (needs root;
/// best effort, returns whether it took). A busy machine (compiles beside a
/// measurement) otherwise delays the forwarder's wake-ups by milliseconds,
/// which shows up as added delay and jitter. The kernel's RT throttling
/// (`sched_rt_runtime_us`, 95% by default) keeps the rest of the system
/// alive even if the forwarder misbehaved.
pub fn set_thread_realtime(priority: i32) -> bool {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: plain syscall on our own thread (0 = the caller) with a valid
    // parameter struct.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// A descriptor that becomes readable when process `pid` exits.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Send `signal` to `pid`; false if it does not exist.
pub fn kill(pid: u32, signal: libc::c_int) -> bool {
    // SAFETY: plain syscall.
    unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
}

/// This process's id.
pub fn getpid() -> u32 {
    std::process::id()
}

/// When process `pid` started, in clock ticks since boot (field 22 of
/// /proc/PID/stat); with the pid it identifies a process even after the
/// pid is reused. `None` if there is no such process.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether process `pid`, started at `start_time`, is still running (a
/// zombie counts as gone).
pub fn process_alive(pid: u32, start_time: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(close) = stat.rfind(')') else {
        return false;
    };
    let mut fields = stat[close + 1..].split_whitespace();
    let state = fields.next();
    let start = fields.nth(18).and_then(|s| s.parse::<u64>().ok());
    state != Some("Z") && start == Some(start_time)
}

/// Detach from the controlling terminal into a new session, so that a
/// daemon is not hit by the terminal's Ctrl-C meant for its parent.
pub fn setsid() {
    // SAFETY: plain syscall; failure (already a group leader) is harmless.
    unsafe {
        libc::setsid();
    }
}

/// Write end of the self-pipe the signal handler writes to (-1: none).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(signo: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = signo as u8;
        // SAFETY: write(2) is async-signal-safe; the buffer is one byte.
        unsafe {
            libc::write(fd, (&b as *const u8).cast(), 1);
        }
    }
}

/// Signals turned into readable bytes on a pipe (the self-pipe trick), so
/// a poll loop can react to them in any thread. Installed once per process;
/// later calls return a new reader of the same signals.
#[derive(Debug)]
pub struct SignalPipe(OwnedFd);

impl SignalPipe {
    /// Route `signals` (e.g. SIGINT, SIGTERM) to the returned pipe instead
    /// of their default action.
    pub fn install(signals: &[libc::c_int]) -> io::Result<SignalPipe> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for two descriptors.
        cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) })?;
        // SAFETY: pipe2 returned two fresh descriptors we own.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let old = SIGNAL_PIPE.swap(w.as_raw_fd(), Ordering::SeqCst);
        std::mem::forget(w); // lives as long as the process: the handler may write at any time
        if old >= 0 {
            // SAFETY: the previous write end was leaked by an earlier install.
            unsafe { libc::close(old) };
        }
        for &sig in signals {
            // SAFETY: a zeroed sigaction with a handler and empty mask is valid.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                cvt(libc::sigaction(sig, &sa, std::ptr::null_mut()))?;
            }
        }
        Ok(SignalPipe(r))
    }

    /// The descriptor, to poll.
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// The first signal received since the last call, if any.
    pub fn take(&self) -> Option<libc::c_int> {
        let mut buf = [0u8; 16];
        match read(self.0.as_raw_fd(), &mut buf) {
            Ok(n) if n > 0 => Some(libc::c_int::from(buf[0])),
            _ => None,
        }
    }
}

/// A pollfd for `fd` waiting for input.
pub fn pollin(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Point standard input at /dev/null and standard output and error at
/// `log` (appended; created if needed), so a daemon holds no pipe of the
/// process that started it.
pub fn redirect_stdio(log: &Path) -> io::Result<()> {
    let null = open(Path::new("/dev/null"), libc::O_RDWR)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    // SAFETY: dup2 onto the standard descriptors; both sources are open.
    unsafe {
        cvt(libc::dup2(null.as_raw_fd(), 0))?;
        cvt(libc::dup2(log.as_raw_fd(), 1))?;
        cvt(libc::dup2(log.as_raw_fd(), 2))?;
    }
    Ok(())
}
