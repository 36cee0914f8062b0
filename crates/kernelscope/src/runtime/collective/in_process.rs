//! Collectives between CPU devices of one process: each rank's kernel hands
//! its values to a shared exchange and waits until every rank has; the last
//! to arrive combines them (sums in rank order, so every rank gets the same
//! bits, or concatenates) and wakes the others, who copy the result out.
//! Ranks that ask for different collectives or sizes get an error, never a
//! mixed result; an aborted group wakes every waiting rank with an error.

use std::sync::{Arc, Condvar, Mutex};

use super::group::{Collective, GroupBackend, all_gather, all_reduce};
use crate::error::{Error, Result};
use crate::runtime::DType;
use crate::runtime::cpu::{CpuKernelFn, KernelArgs};
use crate::runtime::kernel::LoadedKernel;

/// One rank's part of a round.
pub(super) struct Contribution {
    pub(super) collective: Collective,
    pub(super) values: Vec<f32>,
}

/// The exchange's state, under its lock.
#[derive(Default)]
struct Round {
    /// Rounds completed so far; a waiting rank knows its round is done when
    /// this moves past the round it joined.
    completed: u64,
    contributions: Vec<Option<Contribution>>,
    arrived: usize,
    /// The last completed round's result (or why it failed): no rank can
    /// complete another round before every rank has read it, since each
    /// round needs every rank.
    result: Option<std::result::Result<Arc<Vec<f32>>, String>>,
    aborted: Option<String>,
}

/// The shared exchange of a group of CPU ranks.
pub(crate) struct InProcessGroup {
    ranks: usize,
    round: Mutex<Round>,
    changed: Condvar,
}

impl InProcessGroup {
    pub(crate) fn new(ranks: usize) -> InProcessGroup {
        InProcessGroup {
            ranks,
            round: Mutex::new(Round {
                contributions: (0..ranks).map(|_| None).collect(),
                ..Round::default()
            }),
            changed: Condvar::new(),
        }
    }

    /// Hands in `rank`'s values for `collective` and waits for the result.
    fn exchange(&self, rank: usize, collective: Collective, values: Vec<f32>) -> Result<Arc<Vec<f32>>> {
        let mut round = crate::sync::lock(&self.round);
        if let Some(reason) = &round.aborted {
            return Err(aborted(rank, reason));
        }
        let joined = round.completed;
        round.contributions[rank] = Some(Contribution { collective, values });
        round.arrived += 1;
        if round.arrived == self.ranks {
            let contributions: Vec<Contribution> = round
                .contributions
                .iter_mut()
                .map(|slot| slot.take().expect("every rank arrived"))
                .collect();
            round.result = Some(combine(&contributions));
            round.arrived = 0;
            round.completed += 1;
            self.changed.notify_all();
        } else {
            while round.completed == joined && round.aborted.is_none() {
                round = self
                    .changed
                    .wait(round)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if round.completed == joined {
                let reason = round.aborted.clone().unwrap_or_default();
                return Err(aborted(rank, &reason));
            }
        }
        match round.result.as_ref().expect("set when the round completed") {
            Ok(values) => Ok(values.clone()),
            Err(problem) => Err(Error::Collective {
                collective: collective.name().into(),
                rank,
                problem: problem.clone(),
            }),
        }
    }
}

fn aborted(rank: usize, reason: &str) -> Error {
    Error::CollectiveAborted {
        rank,
        reason: reason.to_string(),
    }
}

/// The round's result: the sum in rank order, or the concatenation; an
/// error when the ranks disagree on what they asked for.
pub(super) fn combine(contributions: &[Contribution]) -> std::result::Result<Arc<Vec<f32>>, String> {
    let first = &contributions[0];
    for (rank, other) in contributions.iter().enumerate().skip(1) {
        if other.collective != first.collective || other.values.len() != first.values.len() {
            return Err(format!(
                "ranks disagree: rank 0 asked for {} of {} values, rank {rank} for {} of {}",
                first.collective.name(),
                first.values.len(),
                other.collective.name(),
                other.values.len()
            ));
        }
    }
    Ok(Arc::new(match first.collective {
        Collective::AllReduceSum => {
            let mut sum = first.values.clone();
            for other in &contributions[1..] {
                sum.iter_mut()
                    .zip(&other.values)
                    .for_each(|(total, value)| *total += value);
            }
            sum
        }
        Collective::AllGather => contributions
            .iter()
            .flat_map(|contribution| contribution.values.iter().copied())
            .collect(),
    }))
}

impl GroupBackend for Arc<InProcessGroup> {
    fn library(&self) -> String {
        "in-process".to_string()
    }

    fn link(&self) -> String {
        "shared memory".to_string()
    }

    fn abort(&self, reason: &str) {
        let mut round = crate::sync::lock(&self.round);
        if round.aborted.is_none() {
            round.aborted = Some(reason.to_string());
        }
        self.changed.notify_all();
    }

    fn aborted(&self) -> Option<String> {
        crate::sync::lock(&self.round).aborted.clone()
    }

    fn rebuild(&self) -> Result<()> {
        let mut round = crate::sync::lock(&self.round);
        if round.aborted.is_some() {
            // Contributions of the round the abort interrupted are dropped:
            // the next round starts empty.
            round.contributions.iter_mut().for_each(|slot| *slot = None);
            round.arrived = 0;
            round.result = None;
            round.aborted = None;
        }
        Ok(())
    }

    fn kernel(&self, rank: usize, collective: Collective, dtype: DType) -> Result<LoadedKernel> {
        let group = self.clone();
        exchange_kernel(collective, dtype, self.ranks, move |collective, values| {
            group.exchange(rank, collective, values)
        })
    }
}

/// The CPU kernel of `collective` for a rank of `ranks` whose values go
/// through `exchange` (the in-process exchange, or the connections between
/// processes): all-reduce sums in place, all-gather fills an output of
/// `ranks` times its input.
pub(super) fn exchange_kernel(
    collective: Collective,
    dtype: DType,
    ranks: usize,
    exchange: impl Fn(Collective, Vec<f32>) -> Result<Arc<Vec<f32>>> + Send + Sync + 'static,
) -> Result<LoadedKernel> {
    if dtype != DType::F32 {
        return Err(Error::KernelMissing {
            name: collective.kernel_name(dtype),
            backend: "cpu",
            workaround: "CPU collectives exchange f32 values; reduce or gather f32 buffers".into(),
            remedies: &[],
        });
    }
    let function: CpuKernelFn = match collective {
        Collective::AllReduceSum => Arc::new(move |args: &KernelArgs<'_>| {
            let values = args.output::<f32>(all_reduce::BUFFER)?;
            let sum = exchange(collective, values.to_vec())?;
            values.copy_from_slice(&sum);
            Ok(())
        }),
        Collective::AllGather => Arc::new(move |args: &KernelArgs<'_>| {
            let input = args.input::<f32>(all_gather::INPUT)?.to_vec();
            let output = args.output::<f32>(all_gather::OUTPUT)?;
            if output.len() != input.len() * ranks {
                return Err(Error::KernelArgument {
                    kernel: collective.kernel_name(DType::F32),
                    index: all_gather::OUTPUT,
                    problem: format!(
                        "the output holds {} values, not {ranks} ranks x {}",
                        output.len(),
                        input.len()
                    ),
                });
            }
            let gathered = exchange(collective, input)?;
            output.copy_from_slice(&gathered);
            Ok(())
        }),
    };
    Ok(Arc::new(function))
}
