//! A single-node Slurm cluster for the Slurm executor's test and bench:
//! munged, slurmctld and slurmd started as children with a `slurm.conf`
//! in a directory of their own (its own ports and munge socket), and
//! stopped by pid when the [`Cluster`] is dropped.
//!
//! The setup (peers.md, "Slurm, single node"): `SlurmUser=root`,
//! `proctrack/linuxproc`, `task/none`, `select/cons_tres`; no accounting
//! storage.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The daemons this test started; killed by pid on drop.
pub struct Cluster {
    dir: PathBuf,
    daemons: Vec<(&'static str, Child)>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // slurmd first (it runs the tasks), then the controller, then munge.
        for (name, child) in self.daemons.iter_mut().rev() {
            let pid = child.id() as libc::pid_t;
            // SAFETY: kill has no memory effects; the child is not reaped
            // yet, so the pid is still ours.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                    _ => {
                        eprintln!("{name} did not stop on SIGTERM: killing it");
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
        eprintln!("stopped the test cluster of {}", self.dir.display());
    }
}

fn which(program: &str) -> bool {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/bin", "/usr/local/sbin"]
        .iter()
        .any(|d| Path::new(d).join(program).exists())
}

/// Why this machine cannot run the test, if it cannot.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (slurmctld and slurmd run as root with SlurmUser=root)".into());
    }
    let missing: Vec<&str> = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo"]
        .into_iter()
        .filter(|p| !which(p))
        .collect();
    if !missing.is_empty() {
        return Some(format!("missing {} (apt-get install slurm-wlm munge)", missing.join(", ")));
    }
    None
}

fn short_hostname() -> String {
    let out = Command::new("hostname").arg("-s").output().expect("hostname -s");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn mem_available_mb() -> u64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kb = info
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(1 << 20);
    (kb / 1024 * 8 / 10).max(256)
}

fn spawn(name: &str, program: &str, args: &[&str], log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {name}: {e}"))
}

/// Write the configuration, start munged, slurmctld and slurmd, and wait
/// for the node to be idle.
pub fn start_cluster(dir: &Path) -> Cluster {
    let host = short_hostname();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    // Ports of its own, so a cluster already on this machine is no bother.
    let port = 20_000 + (std::process::id() % 20_000) as u16 * 2 % 20_000;
    let d = dir.display();
    for sub in ["state", "spool", "log"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let conf = format!(
        "ClusterName=braidtest\nSlurmctldHost={host}\nSlurmUser=root\nAuthType=auth/munge\nCredType=cred/munge\n\
         AuthInfo=socket={d}/munge.sock\nSlurmctldPort={port}\nSlurmdPort={}\nProctrackType=proctrack/linuxproc\n\
         TaskPlugin=task/none\nSchedulerType=sched/backfill\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
         StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\nSlurmctldPidFile={d}/slurmctld.pid\n\
         SlurmdPidFile={d}/slurmd.pid\nSlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.log\n\
         ReturnToService=2\nMinJobAge=600\nNodeName={host} CPUs={cpus} RealMemory={} State=UNKNOWN\n\
         PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
        port + 1,
        mem_available_mb()
    );
    let conf_path = dir.join("slurm.conf");
    std::fs::write(&conf_path, conf).unwrap();
    // The client commands the runner calls find the cluster through this.
    std::env::set_var("SLURM_CONF", &conf_path);
    let key = dir.join("munge.key");
    let mut random = vec![0u8; 1024];
    {
        use std::io::Read;
        std::fs::File::open("/dev/urandom").unwrap().read_exact(&mut random).unwrap();
    }
    std::fs::write(&key, &random).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();

    let mut cluster = Cluster { dir: dir.to_path_buf(), daemons: Vec::new() };
    let arg = |k: &str, v: &Path| format!("--{k}={}", v.display());
    let munge_args = [
        "--foreground".to_string(),
        "--force".to_string(),
        arg("socket", &dir.join("munge.sock")),
        arg("key-file", &key),
        arg("pid-file", &dir.join("munged.pid")),
        arg("log-file", &dir.join("log/munged.log")),
        arg("seed-file", &dir.join("munged.seed")),
    ];
    let munge_args: Vec<&str> = munge_args.iter().map(String::as_str).collect();
    cluster.daemons.push(("munged", spawn("munged", "munged", &munge_args, &dir.join("log/munged.out"))));
    wait_for("munged's socket", Duration::from_secs(10), || dir.join("munge.sock").exists());
    let conf_arg = conf_path.display().to_string();
    cluster
        .daemons
        .push(("slurmctld", spawn("slurmctld", "slurmctld", &["-D", "-f", &conf_arg], &dir.join("log/slurmctld.out"))));
    wait_for("slurmctld", Duration::from_secs(30), || {
        Command::new("scontrol").arg("ping").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("UP"))
    });
    cluster.daemons.push(("slurmd", spawn("slurmd", "slurmd", &["-D", "-f", &conf_arg], &dir.join("log/slurmd.out"))));
    wait_for("the node to be idle", Duration::from_secs(60), || {
        Command::new("sinfo")
            .args(["--noheader", "--format=%T"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
    });
    cluster
}

pub fn wait_for(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
