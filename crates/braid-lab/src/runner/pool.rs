//! The runner's threads: a fixed pool of `jobs` threads that take
//! experiments from one queue, in the order they were submitted, and send
//! their outcomes back over a channel.
//!
//! A thread per experiment (two, with the one that watched its deadline)
//! cost more than a short in-process experiment itself; a pool costs a
//! queue push and a channel send, and a thread that finds the next
//! experiment waiting never sleeps. At most `jobs` experiments run at once
//! because there are `jobs` threads.
//!
//! A thread cannot be killed, so the pool cannot stop an in-process
//! template that ignores its deadline. Each thread publishes what it runs
//! and when the runner should give up on it ([`Job::give_up_at`]); the
//! scheduler calls [`Pool::give_up_overdue`], which marks such a thread
//! abandoned, reports the experiment as timed out and starts a new thread
//! in its place. The abandoned thread drops its result when the template
//! finally returns and ends (the decision is taken under its lock, so an
//! experiment is reported once: by the thread or as abandoned, never both).

use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::execute::{execute, panic_message, Job, Outcome};
use super::provenance::unix_now;
use crate::plan::PlannedExperiment;

/// An experiment for the pool: `index` identifies it to the scheduler.
pub(crate) struct Task {
    pub index: usize,
    pub job: Job,
}

/// An outcome on its way back to the scheduler, with the experiment (moved
/// back, not cloned).
pub(crate) struct Done {
    pub experiment: PlannedExperiment,
    pub outcome: Outcome,
}

/// The queue the threads take tasks from.
struct Queue {
    tasks: VecDeque<Task>,
    /// No more tasks: idle threads end.
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

/// What one thread does, as the scheduler sees it.
enum Activity {
    Idle,
    Running {
        index: usize,
        /// Unix seconds and the monotonic clock when it began.
        started: f64,
        began: Instant,
        give_up_at: Option<Instant>,
        timeout: Duration,
        work_dir: PathBuf,
    },
    /// The scheduler stopped waiting for it: its result is dropped and the
    /// thread ends.
    Abandoned,
}

struct Worker {
    activity: Arc<Mutex<Activity>>,
    handle: Option<JoinHandle<()>>,
}

/// The pool. Dropping it closes the queue and joins the threads that are
/// not abandoned (they are idle by then, or finishing their experiment).
pub(crate) struct Pool {
    shared: Arc<Shared>,
    workers: Vec<Worker>,
    done: Sender<Done>,
    /// Threads started so far (for their names).
    started: usize,
}

/// Lock, ignoring poisoning: nothing panics while holding these locks, and
/// the data stays consistent if something did.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Pool {
    /// A pool of up to `threads` threads sending outcomes to `done`. A
    /// thread that cannot be started is logged and left out: check
    /// [`size`](Self::size).
    pub fn new(threads: usize, done: Sender<Done>) -> Pool {
        let queue = Mutex::new(Queue { tasks: VecDeque::new(), closed: false });
        let shared = Arc::new(Shared { queue, ready: Condvar::new() });
        let mut pool = Pool { shared, workers: Vec::with_capacity(threads), done, started: 0 };
        for _ in 0..threads {
            if let Err(e) = pool.add_thread() {
                tracing::warn!(error = %e, "cannot start a runner thread");
            }
        }
        pool
    }

    /// Threads able to take tasks.
    pub fn size(&self) -> usize {
        self.workers.len()
    }

    fn add_thread(&mut self) -> std::io::Result<()> {
        let activity = Arc::new(Mutex::new(Activity::Idle));
        let (shared, mine, done) = (self.shared.clone(), activity.clone(), self.done.clone());
        let handle = std::thread::Builder::new()
            .name(format!("lab-runner-{}", self.started))
            .spawn(move || work(&shared, &mine, &done))?;
        self.started += 1;
        self.workers.push(Worker { activity, handle: Some(handle) });
        Ok(())
    }

    /// Queue a task; the first idle thread takes it.
    pub fn submit(&self, task: Task) {
        lock(&self.shared.queue).tasks.push_back(task);
        self.shared.ready.notify_one();
    }

    /// Take back the tasks no thread has started.
    pub fn cancel_queued(&self) -> Vec<Task> {
        lock(&self.shared.queue).tasks.drain(..).collect()
    }

    /// The earliest time the scheduler must look at the running
    /// experiments again to give up on one in time (`None`: no running
    /// experiment has such a time).
    pub fn next_give_up(&self) -> Option<Instant> {
        self.workers
            .iter()
            .filter_map(|w| match &*lock(&w.activity) {
                Activity::Running { give_up_at, .. } => *give_up_at,
                _ => None,
            })
            .min()
    }

    /// The work directories of the running experiments.
    pub fn running_work_dirs(&self) -> Vec<PathBuf> {
        self.workers
            .iter()
            .filter_map(|w| match &*lock(&w.activity) {
                Activity::Running { work_dir, .. } => Some(work_dir.clone()),
                _ => None,
            })
            .collect()
    }

    /// Stop waiting for every running experiment (an interrupted run that
    /// waited long enough): their results are dropped and their threads
    /// left to end by themselves, not joined when the pool is dropped.
    /// Returns how many there were.
    pub fn abandon_running(&mut self) -> usize {
        let before = self.workers.len();
        self.workers.retain(|w| {
            let mut activity = lock(&w.activity);
            let running = matches!(*activity, Activity::Running { .. });
            if running {
                *activity = Activity::Abandoned;
            }
            !running
        });
        before - self.workers.len()
    }

    /// Give up on every experiment past its [`Job::give_up_at`] at `now`:
    /// its outcome (timed out) for the scheduler, and a new thread in its
    /// thread's place.
    pub fn give_up_overdue(&mut self, now: Instant) -> Vec<(usize, Outcome)> {
        let mut given_up = Vec::new();
        let mut i = 0;
        while i < self.workers.len() {
            let overdue = {
                let mut activity = lock(&self.workers[i].activity);
                match &*activity {
                    Activity::Running { index, started, began, give_up_at: Some(at), timeout, work_dir }
                        if now >= *at =>
                    {
                        let outcome = Outcome::abandoned(*started, *began, *timeout, work_dir);
                        let index = *index;
                        *activity = Activity::Abandoned;
                        Some((index, outcome))
                    }
                    _ => None,
                }
            };
            match overdue {
                Some(done) => {
                    given_up.push(done);
                    // Its thread is left to end by itself (detached).
                    self.workers.swap_remove(i);
                    if let Err(e) = self.add_thread() {
                        tracing::warn!(error = %e, "cannot start a runner thread to replace a stuck one");
                    }
                }
                None => i += 1,
            }
        }
        given_up
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        {
            let mut queue = lock(&self.shared.queue);
            queue.closed = true;
            queue.tasks.clear();
        }
        self.shared.ready.notify_all();
        for w in &mut self.workers {
            if let Some(handle) = w.handle.take() {
                let _ = handle.join();
            }
        }
    }
}

/// One thread: take a task, run it, report it, until the queue closes (or
/// the scheduler abandons this thread).
fn work(shared: &Shared, activity: &Mutex<Activity>, done: &Sender<Done>) {
    loop {
        let task = {
            let mut queue = lock(&shared.queue);
            let task = loop {
                if let Some(task) = queue.tasks.pop_front() {
                    break task;
                }
                if queue.closed {
                    return;
                }
                queue = shared.ready.wait(queue).unwrap_or_else(|poisoned| poisoned.into_inner());
            };
            // Running before the queue is unlocked: a task is always
            // either queued or seen running (an interrupted run stops
            // what runs and takes back what is queued, and misses none).
            let began = Instant::now();
            *lock(activity) = Activity::Running {
                index: task.index,
                started: unix_now(),
                began,
                give_up_at: task.job.give_up_at(began),
                timeout: task.job.experiment.timeout,
                work_dir: task.job.work_dir.clone(),
            };
            task
        };
        // `execute` catches the template's panics; this catches the
        // runner's own, so the scheduler always hears back.
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| execute(&task.job))).unwrap_or_else(|payload| {
            Outcome::not_started(format!("the runner failed running it: {}", panic_message(&*payload)))
        });
        {
            let mut activity = lock(activity);
            if matches!(*activity, Activity::Abandoned) {
                return;
            }
            *activity = Activity::Idle;
        }
        if done.send(Done { experiment: task.job.experiment, outcome }).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param::{ParamDecl, Params};
    use crate::runner::Isolation;
    use crate::template::{Context, Template, TemplateError};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    /// Sleeps `ms` (ignoring its deadline), counting how many run at once.
    struct Sleepy {
        ms: u64,
        now: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    }

    impl Template for Sleepy {
        fn name(&self) -> &str {
            "sleepy"
        }
        fn description(&self) -> &str {
            "sleeps"
        }
        fn params(&self) -> Vec<ParamDecl> {
            vec![]
        }
        fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
            let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(n, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(self.ms));
            self.now.fetch_sub(1, Ordering::SeqCst);
            ctx.record("slept", self.ms as f64);
            Ok(())
        }
    }

    fn task(index: usize, template: &Arc<Sleepy>, timeout: Duration) -> Task {
        let experiment = PlannedExperiment {
            id: format!("e{index}"),
            template: "sleepy".into(),
            template_version: 1,
            params: Params::default(),
            repetition: 0,
            seed: index as u64,
            timeout,
            exclusive: false,
            expected: Duration::from_millis(1),
        };
        let work_dir = std::env::temp_dir().join(format!("braid-lab-pool-{}-{index}", std::process::id()));
        Task { index, job: Job { experiment, template: template.clone(), work_dir, isolation: Isolation::InProcess } }
    }

    fn sleepy(ms: u64) -> Arc<Sleepy> {
        Arc::new(Sleepy { ms, now: Arc::default(), most: Arc::default() })
    }

    #[test]
    fn tasks_run_on_at_most_size_threads_and_come_back_in_memory() {
        let t = sleepy(20);
        let (tx, rx) = mpsc::channel();
        let pool = Pool::new(3, tx);
        assert_eq!(pool.size(), 3);
        for i in 0..9 {
            pool.submit(task(i, &t, Duration::from_secs(10)));
        }
        let mut seen: Vec<String> = (0..9)
            .map(|_| rx.recv().unwrap())
            .map(|d| {
                assert_eq!(d.outcome.records.len(), 1);
                assert!(!d.outcome.work_dir_made, "nothing asked for a work directory");
                d.experiment.id
            })
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..9).map(|i| format!("e{i}")).collect::<Vec<_>>());
        assert_eq!(t.most.load(Ordering::SeqCst), 3);
        drop(pool);
    }

    #[test]
    fn queued_tasks_can_be_taken_back() {
        let t = sleepy(100);
        let (tx, rx) = mpsc::channel();
        let pool = Pool::new(1, tx);
        for i in 0..4 {
            pool.submit(task(i, &t, Duration::from_secs(10)));
        }
        std::thread::sleep(Duration::from_millis(30));
        let back: Vec<usize> = pool.cancel_queued().into_iter().map(|t| t.index).collect();
        assert_eq!(back, [1, 2, 3], "the running one stays, the rest come back in order");
        assert_eq!(rx.recv().unwrap().experiment.id, "e0");
        drop(pool);
        assert!(rx.try_recv().is_err(), "nothing else ran");
    }

    #[test]
    fn running_experiments_are_seen_and_can_be_abandoned() {
        let t = sleepy(300);
        let (tx, rx) = mpsc::channel();
        let mut pool = Pool::new(2, tx);
        for i in 0..3 {
            pool.submit(task(i, &t, Duration::from_secs(10)));
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut dirs = pool.running_work_dirs();
        dirs.sort();
        assert_eq!(dirs, [task(0, &t, Duration::ZERO).job.work_dir, task(1, &t, Duration::ZERO).job.work_dir]);
        assert_eq!(pool.cancel_queued().len(), 1);
        assert_eq!(pool.abandon_running(), 2);
        assert_eq!(pool.size(), 0);
        assert!(pool.running_work_dirs().is_empty());
        let dropped = Instant::now();
        drop(pool);
        assert!(dropped.elapsed() < Duration::from_millis(200), "dropping the pool waited for abandoned threads");
        std::thread::sleep(Duration::from_millis(400));
        assert!(rx.try_recv().is_err(), "abandoned results are dropped");
    }

    #[test]
    fn a_stuck_experiment_is_given_up_and_its_thread_replaced() {
        let stuck = sleepy(600);
        let quick = sleepy(1);
        let (tx, rx) = mpsc::channel();
        let mut pool = Pool::new(1, tx);
        // The grace is 3 s: a zero timeout still gives up only after it,
        // so look a little later than that.
        pool.submit(task(0, &stuck, Duration::ZERO));
        std::thread::sleep(Duration::from_millis(30));
        let at = pool.next_give_up().expect("a running in-process experiment has a give-up time");
        assert!(pool.give_up_overdue(at - Duration::from_millis(1)).is_empty(), "not before its time");
        let given_up = pool.give_up_overdue(at);
        assert_eq!(given_up.len(), 1);
        let (index, outcome) = &given_up[0];
        assert_eq!(*index, 0);
        assert_eq!(outcome.status, crate::store::ExperimentStatus::TimedOut);
        assert!(outcome.error.as_deref().unwrap().contains("ctx.deadline"));
        assert_eq!(pool.size(), 1, "a new thread took the stuck one's place");
        assert_eq!(pool.next_give_up(), None);
        // The new thread works; the stuck one's result never arrives.
        pool.submit(task(1, &quick, Duration::from_secs(10)));
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap().experiment.id, "e1");
        std::thread::sleep(Duration::from_millis(700));
        assert!(rx.try_recv().is_err(), "the abandoned result is dropped");
    }
}
