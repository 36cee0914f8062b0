//! Driving the ranks of a split model: every rank's shard runs the same
//! calls on its own thread, rank 0 runs the caller's callbacks and sends
//! its per-token decision to the others, and a rank that fails aborts the
//! group first so no rank waits forever; an aborted group is rebuilt once
//! every rank has returned.
//!
//! A model whose ranks are processes (`Ranks::Process`, one per GPU or CPU
//! under torchrun, mpirun or srun) holds one shard: its process is its own
//! leader, and every rank decides alike because each reads the same
//! gathered logits and draws from the same seed.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, Sender, channel};

use kernelscope::Communicator;

use super::model::Model;
use super::shard::Shard;
use crate::error::{ModelError, Result};

impl Model {
    /// Runs `leader` on rank 0 (on this thread) and `follower(rank, shard)`
    /// on every other rank (a thread each), and returns rank 0's result. A
    /// rank that fails or panics aborts the group first, so the others'
    /// collectives fail instead of waiting; the error reported is the first
    /// rank's own failure, not the abandoned collectives it caused. Once
    /// every rank has returned, an aborted group is rebuilt (and the graphs
    /// that captured its collectives dropped), so one failed request does
    /// not break the model for the next. Values `leader` owns (the senders
    /// of its decisions) are dropped when it returns or unwinds, so a
    /// follower waiting for a decision is never left waiting.
    pub(super) fn on_every_rank<T: Send>(
        &mut self,
        leader: impl FnOnce(&mut Shard) -> Result<T>,
        follower: impl Fn(usize, &mut Shard) -> Result<T> + Sync,
    ) -> Result<T> {
        let (first, others) = self.shards.split_first_mut().expect("a model has a shard");
        if others.is_empty() {
            return leader(first);
        }
        let communicators = &self.communicators;
        let guarded = |rank: usize, run: &mut dyn FnMut() -> Result<T>| -> std::thread::Result<Result<T>> {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
            let failure = match &outcome {
                Ok(Err(error)) => Some(error.to_string()),
                Err(_) => Some("it panicked".to_string()),
                Ok(Ok(_)) => None,
            };
            if let Some(failure) = failure {
                communicators[rank].abort(&format!("rank {rank} failed: {failure}"));
            }
            outcome
        };
        let (leading, following) = std::thread::scope(|scope| {
            let handles: Vec<_> = others
                .iter_mut()
                .enumerate()
                .map(|(index, shard)| {
                    let (follower, guarded) = (&follower, &guarded);
                    scope.spawn(move || guarded(index + 1, &mut || follower(index + 1, shard)))
                })
                .collect();
            let mut leader = Some(leader);
            let leading = guarded(0, &mut || (leader.take().expect("run once"))(first));
            let following: Vec<_> = handles
                .into_iter()
                .map(|handle| handle.join().unwrap_or_else(Err))
                .collect();
            (leading, following)
        });
        self.recover_group();
        let mut outcomes = vec![leading];
        outcomes.extend(following);
        let mut results = Vec::with_capacity(outcomes.len());
        for outcome in outcomes {
            match outcome {
                Ok(result) => results.push(result),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        let abandoned = |error: &ModelError| {
            matches!(
                error,
                ModelError::Runtime(kernelscope::Error::CollectiveAborted { .. }) | ModelError::LeaderStopped
            )
        };
        if let Some(position) = results
            .iter()
            .position(|result| matches!(result, Err(error) if !abandoned(error)))
        {
            return Err(results.swap_remove(position).err().expect("an error"));
        }
        results.swap_remove(0)
    }

    /// Drops every shard's graphs, which captured the old communicators
    /// (NCCL finishes aborting those only once such graphs are gone), and
    /// rebuilds the group, if a rank aborted it. Called with every rank out
    /// of its collectives. If the group cannot be rebuilt it stays aborted,
    /// and every later call fails naming the first failure.
    pub(super) fn recover_group(&mut self) {
        let Some(communicator) = self.communicators.first() else {
            return;
        };
        if communicator.aborted().is_none() {
            return;
        }
        for shard in &mut self.shards {
            shard.forget_graphs();
        }
        let _ = communicator.rebuild();
    }

    /// An error when rank 0 must not trust what it just read back: the
    /// group was aborted (a peer failed), so a collective may have ended
    /// early with its buffer unreduced.
    pub(super) fn check_group(communicators: &[Communicator]) -> Result<()> {
        match communicators.first().and_then(Communicator::aborted) {
            Some(reason) => Err(ModelError::Runtime(kernelscope::Error::CollectiveAborted {
                rank: 0,
                reason,
            })),
            None => Ok(()),
        }
    }

    /// Runs `action` on every rank's shard, one after another (setters that
    /// issue no collectives).
    pub(super) fn on_each(&mut self, mut action: impl FnMut(&mut Shard) -> Result<()>) -> Result<()> {
        self.shards.iter_mut().try_for_each(&mut action)
    }

    /// Channels carrying rank 0's per-token decision (go on or stop) to the
    /// other ranks: the senders for rank 0, a receiver per other rank.
    pub(super) fn decision_channels(&self) -> (Vec<Sender<bool>>, Vec<DecisionReceiver>) {
        let mut senders = Vec::new();
        let mut receivers = vec![Mutex::new(None)];
        for _ in 1..self.shards.len() {
            let (sender, receiver) = channel();
            senders.push(sender);
            receivers.push(Mutex::new(Some(receiver)));
        }
        (senders, receivers)
    }
}

/// Where a rank other than 0 takes its receiver of rank 0's decisions from
/// (rank 0's slot stays empty).
pub(super) type DecisionReceiver = Mutex<Option<Receiver<bool>>>;

/// Rank `rank`'s receiver of rank 0's decisions.
pub(super) fn take_receiver(receivers: &[DecisionReceiver], rank: usize) -> Receiver<bool> {
    receivers[rank]
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
        .expect("each rank takes its receiver once per call")
}
