//! Following array tasks through Slurm without accounting storage:
//! `squeue` says which tasks are still queued or running, and
//! `scontrol show job` says how a task that left the queue ended (while the
//! controller still remembers it, `MinJobAge`, 300 s by default). `sacct`
//! is not used: a cluster without accounting storage (a single-node test
//! setup) has none.

use std::collections::HashMap;
use std::fmt;
use std::process::Command;

/// One array task: `JOBID_TASK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId {
    /// The array's job id (`%A`).
    pub job: u64,
    /// The task index (`%a`).
    pub task: u32,
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.job, self.task)
    }
}

impl std::str::FromStr for TaskId {
    type Err = String;
    fn from_str(s: &str) -> Result<TaskId, String> {
        let (job, task) = s.split_once('_').ok_or_else(|| format!("`{s}` is not an array task (JOBID_TASK)"))?;
        let job = job.parse().map_err(|_| format!("`{s}`: job id `{job}` is not a number"))?;
        let task = task.parse().map_err(|_| format!("`{s}`: task index `{task}` is not a number"))?;
        Ok(TaskId { job, task })
    }
}

/// A task in the queue, as `squeue` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// `PENDING`, `RUNNING`, `CONFIGURING`, `COMPLETING`, ...
    pub state: String,
    /// Why it waits (`None`, `Priority`, `Resources`, `JobArrayTaskLimit`, ...).
    pub reason: String,
}

/// The `squeue` format [`parse_squeue`] reads: id, state, reason.
pub const SQUEUE_FORMAT: &str = "%i|%T|%r";

/// Why asking Slurm failed.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The command could not be started.
    #[error("cannot run `{command}`: {source} (are the Slurm client commands installed and on PATH?)")]
    Spawn {
        /// The command.
        command: String,
        /// The error.
        source: std::io::Error,
    },
    /// The command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command.
        command: String,
        /// Its exit status.
        status: String,
        /// Its stderr.
        stderr: String,
    },
}

/// Run a Slurm client command and return its stdout.
pub(crate) fn slurm_command(program: &str, args: &[&str]) -> Result<String, QueueError> {
    let command = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| QueueError::Spawn { command: command.clone(), source })?;
    if !out.status.success() {
        return Err(QueueError::Failed {
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every array task of this user still in the queue (one `squeue` call).
pub fn squeue() -> Result<HashMap<TaskId, Queued>, QueueError> {
    slurm_command("squeue", &["--me", "--noheader", "--array", "--format", SQUEUE_FORMAT]).map(|out| parse_squeue(&out))
}

/// Parse `squeue --noheader --array --format '%i|%T|%r'`: one line per
/// task (`12_3|RUNNING|None`). Lines that are not array tasks (plain jobs)
/// are skipped; a pending range that `--array` did not expand
/// (`12_[4-9%2]`, `12_[1,3]`) stands for each task in it.
pub fn parse_squeue(text: &str) -> HashMap<TaskId, Queued> {
    let mut tasks = HashMap::new();
    for line in text.lines() {
        let mut fields = line.trim().splitn(3, '|');
        let (Some(id), Some(state)) = (fields.next(), fields.next()) else { continue };
        let queued = Queued { state: state.trim().to_string(), reason: fields.next().unwrap_or("").trim().to_string() };
        let Some((job, tasks_text)) = id.trim().split_once('_') else { continue };
        let Ok(job) = job.parse::<u64>() else { continue };
        for task in task_indices(tasks_text) {
            tasks.insert(TaskId { job, task }, queued.clone());
        }
    }
    tasks
}

/// `3` → [3]; `[4-9%2]` → 4..=9; `[1,3,5-6]` → 1, 3, 5, 6.
fn task_indices(text: &str) -> Vec<u32> {
    let inner = match text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        Some(inner) => inner,
        None => return text.parse().map(|t| vec![t]).unwrap_or_default(),
    };
    let inner = inner.split('%').next().unwrap_or("");
    let mut out = Vec::new();
    for part in inner.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<u32>().ok()),
        }
    }
    out
}

/// How a task that left the queue ended, from `scontrol show job`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// `COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`, `NODE_FAIL`,
    /// `OUT_OF_MEMORY`, `PREEMPTED`, ...
    pub state: String,
    /// Slurm's reason (`NonZeroExitCode`, `None`, ...).
    pub reason: String,
    /// `EXIT:SIGNAL`.
    pub exit_code: String,
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.state)?;
        if !self.reason.is_empty() && self.reason != "None" {
            write!(f, ", reason {}", self.reason)?;
        }
        write!(f, ", exit code {}", self.exit_code)
    }
}

/// What `scontrol show job` knows of a task: `None` when the controller has
/// forgotten it, or never split it off (an array task cancelled while
/// pending).
pub fn scontrol_show(task: TaskId) -> Result<Option<Ended>, QueueError> {
    let id = task.to_string();
    match slurm_command("scontrol", &["show", "job", "--oneliner", &id]) {
        Ok(out) => Ok(parse_scontrol(&out, task)),
        Err(QueueError::Failed { stderr, .. }) if stderr.contains("not found") || stderr.contains("Invalid job id") => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Parse `scontrol show job --oneliner` output (one line per job, `Key=Value`
/// separated by spaces) for `task`'s line.
pub fn parse_scontrol(text: &str, task: TaskId) -> Option<Ended> {
    for line in text.lines() {
        let fields: HashMap<&str, &str> = line.split_whitespace().filter_map(|kv| kv.split_once('=')).collect();
        let array_job = fields.get("ArrayJobId").and_then(|v| v.parse::<u64>().ok());
        let array_task = fields.get("ArrayTaskId").and_then(|v| v.parse::<u32>().ok());
        if array_job != Some(task.job) || array_task != Some(task.task) {
            continue;
        }
        return Some(Ended {
            state: fields.get("JobState").unwrap_or(&"UNKNOWN").to_string(),
            reason: fields.get("Reason").unwrap_or(&"").to_string(),
            exit_code: fields.get("ExitCode").unwrap_or(&"?").to_string(),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from Slurm 22.05 (Debian 12 slurm-wlm), one node, an array
    // of 6 with a throttle of 2 (`--array=0-5%2`).
    const SQUEUE_EXPANDED: &str = "2_2|PENDING|JobArrayTaskLimit\n2_3|PENDING|JobArrayTaskLimit\n\
2_4|PENDING|JobArrayTaskLimit\n2_5|PENDING|JobArrayTaskLimit\n2_0|RUNNING|None\n2_1|RUNNING|None\n";
    const SQUEUE_FOLDED: &str =
        "2_[2-5%2]|PENDING|JobArrayTaskLimit\n2_0|RUNNING|None\n2_1|RUNNING|None\n9|RUNNING|None\n";
    const SCONTROL_RUNNING: &str = "JobId=4 ArrayJobId=2 ArrayTaskId=1 ArrayTaskThrottle=2 JobName=braid-test UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901758 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:02 TimeLimit=00:02:00 TimeMin=N/A SubmitTime=2026-11-26T09:05:52 EligibleTime=2026-11-26T09:05:52 AccrueTime=2026-11-26T09:05:52 StartTime=2026-11-26T09:05:52 EndTime=2026-11-26T09:07:52 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-26T09:05:52 Scheduler=Main Partition=debug AllocNode:Sid=localhost:6466 ReqNodeList=(null) ExcNodeList=(null) NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/tmp/st StdErr=/tmp/st/log/o-2_1.out StdIn=/dev/null StdOut=/tmp/st/log/o-2_1.out Power= \n";
    const SCONTROL_CANCELLED: &str = "JobId=3 ArrayJobId=2 ArrayTaskId=0 ArrayTaskThrottle=2 JobName=braid-test UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901758 Nice=0 Account=(null) QOS=(null) JobState=CANCELLED Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:00:02 TimeLimit=00:02:00 TimeMin=N/A SubmitTime=2026-11-26T09:05:52 EligibleTime=2026-11-26T09:05:52 AccrueTime=2026-11-26T09:05:52 StartTime=2026-11-26T09:05:52 EndTime=2026-11-26T09:05:54 Deadline=N/A NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=1 WorkDir=/tmp/st StdErr=/tmp/st/log/o-2_0.out StdIn=/dev/null StdOut=/tmp/st/log/o-2_0.out Power= \n";
    const SCONTROL_FAILED: &str = "JobId=8 ArrayJobId=7 ArrayTaskId=0 JobName=wrap UserId=root(0) GroupId=root(0) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0 RunTime=00:00:00 TimeLimit=UNLIMITED\n";

    fn t(job: u64, task: u32) -> TaskId {
        TaskId { job, task }
    }

    #[test]
    fn squeue_lists_each_task() {
        let q = parse_squeue(SQUEUE_EXPANDED);
        assert_eq!(q.len(), 6);
        assert_eq!(q[&t(2, 0)], Queued { state: "RUNNING".into(), reason: "None".into() });
        assert_eq!(q[&t(2, 5)].reason, "JobArrayTaskLimit");
    }

    #[test]
    fn squeue_ranges_stand_for_their_tasks_and_plain_jobs_are_skipped() {
        let q = parse_squeue(SQUEUE_FOLDED);
        let mut ids: Vec<TaskId> = q.keys().copied().collect();
        ids.sort();
        assert_eq!(ids, (0..6).map(|i| t(2, i)).collect::<Vec<_>>());
        let q = parse_squeue("5_[1,3,7-8]|PENDING|Priority\ngarbage\n\n");
        let mut ids: Vec<u32> = q.keys().map(|t| t.task).collect();
        ids.sort();
        assert_eq!(ids, [1, 3, 7, 8]);
    }

    #[test]
    fn scontrol_says_how_a_task_ended() {
        let e = parse_scontrol(SCONTROL_CANCELLED, t(2, 0)).unwrap();
        assert_eq!(e, Ended { state: "CANCELLED".into(), reason: "None".into(), exit_code: "0:15".into() });
        assert_eq!(e.to_string(), "CANCELLED, exit code 0:15");
        let e = parse_scontrol(SCONTROL_FAILED, t(7, 0)).unwrap();
        assert_eq!(e.to_string(), "FAILED, reason NonZeroExitCode, exit code 3:0");
        assert_eq!(parse_scontrol(SCONTROL_RUNNING, t(2, 1)).unwrap().state, "RUNNING");
        // Another task's line is not this task's.
        assert_eq!(parse_scontrol(SCONTROL_RUNNING, t(2, 0)), None);
        assert_eq!(parse_scontrol("", t(2, 0)), None);
    }

    #[test]
    fn task_ids_read_and_print_alike() {
        assert_eq!("12_3".parse::<TaskId>(), Ok(t(12, 3)));
        assert_eq!(t(12, 3).to_string(), "12_3");
        assert!("12".parse::<TaskId>().is_err());
        assert!("x_1".parse::<TaskId>().unwrap_err().contains("job id"));
    }
}
