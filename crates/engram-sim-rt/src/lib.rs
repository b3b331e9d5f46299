//! openraft's pluggable [`AsyncRuntime`] implemented on madsim, so that the production Raft
//! node (its state machine, log store and gRPC network) runs unchanged inside the
//! deterministic simulation in `sim-tests/`.
//!
//! What each part maps to, and why:
//! - tasks, sleeps and timeouts go to madsim's executor and virtual clock, so every wake-up
//!   is ordered by the simulation seed;
//! - `Instant` is `std::time::Instant`, which madsim intercepts inside a simulation;
//! - `thread_rng` is a fresh `SmallRng` seeded from madsim's global RNG, so openraft's
//!   randomised election timeouts replay exactly for a seed;
//! - `spawn_blocking` runs the closure on a madsim task: madsim refuses OS threads, which the
//!   trait's default would start;
//! - mpsc, oneshot and mutex are tokio's (they need no tokio runtime and wake in FIFO order);
//!   watch is openraft-rt-sim's `SimWatch`, because tokio's watch wakes receivers in an order
//!   that differs between runs.
//!
//! The crate is empty unless built with `--cfg madsim`.
//!
//! Must not depend on: any Engram crate (it sits below `engram-raft`), RocksDB, or tokio's
//! runtime.

#![cfg(madsim)]

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use openraft_rt::{AsyncRuntime, OptionalSend};
use openraft_rt_sim::SimWatch;
use openraft_rt_tokio::{TokioMpsc, TokioMutex, TokioOneshot};
use rand::SeedableRng;
use rand::rngs::SmallRng;

/// openraft's runtime inside a madsim simulation.
pub struct MadsimRuntime {
    rt: madsim::runtime::Runtime,
}

impl fmt::Debug for MadsimRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MadsimRuntime").finish()
    }
}

/// A deadline passed before the future completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

pin_project_lite::pin_project! {
    /// A future with a deadline on madsim's clock. madsim's own `timeout` returns an unnamed,
    /// non-`Send` future, which openraft's trait cannot hold.
    pub struct Timeout<F> {
        #[pin]
        future: F,
        sleep: Pin<Box<madsim::time::Sleep>>,
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // The future first: a result that is ready at the deadline still counts.
        if let Poll::Ready(v) = this.future.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match this.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRuntime for MadsimRuntime {
    type JoinError = madsim::task::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = madsim::task::JoinHandle<T>;
    type Sleep = madsim::time::Sleep;
    type Instant = std::time::Instant;
    type TimeoutError = Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = Timeout<T>;
    type ThreadLocalRng = SmallRng;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        madsim::task::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        madsim::time::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        madsim::time::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        Timeout {
            future,
            sleep: Box::pin(madsim::time::sleep(duration)),
        }
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        Timeout {
            future,
            sleep: Box::pin(madsim::time::sleep_until(deadline)),
        }
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        join_error.is_panic()
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        SmallRng::seed_from_u64(madsim::rand::random::<u64>())
    }

    type Mpsc = TokioMpsc;
    type Watch = SimWatch;
    type Oneshot = TokioOneshot;
    type Mutex<T: OptionalSend + 'static> = TokioMutex<T>;

    /// A fresh simulation with seed 0; `threads` is ignored (madsim runs on one thread).
    fn new(_threads: usize) -> Self {
        MadsimRuntime {
            rt: madsim::runtime::Runtime::new(),
        }
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.rt.block_on(future)
    }

    fn spawn_blocking<F, T>(f: F) -> impl Future<Output = Result<T, io::Error>> + Send
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let task = madsim::task::spawn(async move { f() });
        async move { task.await.map_err(io::Error::from) }
    }
}
