//! Collectives between CPU ranks that are processes of their own (started
//! by torchrun, mpirun or srun), over the connections their rendezvous left
//! open: every other rank sends rank 0 its values, rank 0 combines them
//! exactly as the in-process exchange does (sums in rank order, so the bits
//! equal those of the same ranks as threads) and sends each rank the
//! result. A rank whose process ends closes its connection, which fails the
//! others' collectives instead of leaving them waiting; an aborted group
//! shuts its connections for the same reason, and cannot be rebuilt (the
//! processes must start again).
//!
//! On the wire, a contribution is the collective's tag (0: all-reduce sum,
//! 1: all-gather), a count (little-endian u32) and that many f32 values; an
//! answer is a status byte (0: the result follows as a count and values, 1:
//! a length and the reason the round failed).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};

use super::group::{Collective, GroupBackend};
use super::in_process::{Contribution, combine, exchange_kernel};
use super::rendezvous::Rendezvous;
use crate::error::{Error, Result};
use crate::runtime::DType;
use crate::runtime::kernel::LoadedKernel;

/// The most values one contribution may carry (a message longer than this
/// is a broken peer, not a tensor: 4 GiB of f32).
const MOST_VALUES: usize = 1 << 30;
/// The longest reason for a failed round that rank 0 sends (longer ones are
/// cut) and the others read.
const LONGEST_REASON: usize = 1 << 12;

/// One process's end of a group of CPU ranks in processes.
pub(crate) struct ProcessGroup {
    rank: usize,
    ranks: usize,
    /// Rank 0: a connection to each other rank, rank 1 first. Any other
    /// rank: its connection to rank 0.
    peers: Mutex<Vec<TcpStream>>,
    /// Handles on the same connections, outside the lock a collective
    /// holds, so an abort can shut them while a rank waits on one.
    shutters: Vec<TcpStream>,
    aborted: Mutex<Option<String>>,
}

impl ProcessGroup {
    /// Meets the other ranks at `rendezvous` (every rank giving
    /// `description`, what it runs) and keeps the connections.
    pub(crate) fn connect(rendezvous: &Rendezvous, description: &str) -> Result<ProcessGroup> {
        let shared = (rendezvous.rank == 0).then_some(&b"cpu"[..]);
        let (_, peers) = rendezvous.meet_connected(description, shared)?;
        for peer in &peers {
            // Collectives are small and latency-bound: no Nagle delay.
            let _ = peer.set_nodelay(true);
            let _ = peer.set_read_timeout(None);
        }
        let shutters = peers
            .iter()
            .map(TcpStream::try_clone)
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|error| Error::Rendezvous {
                address: rendezvous.address.clone(),
                rank: rendezvous.rank,
                world_size: rendezvous.world_size,
                problem: format!("keeping the connections: {error}"),
            })?;
        Ok(ProcessGroup {
            rank: rendezvous.rank,
            ranks: rendezvous.world_size,
            peers: Mutex::new(peers),
            shutters,
            aborted: Mutex::new(None),
        })
    }

    fn failure(&self, collective: Collective, problem: String) -> Error {
        Error::Collective {
            collective: collective.name().into(),
            rank: self.rank,
            problem,
        }
    }

    /// Hands in this rank's values for `collective` and returns the result.
    fn exchange(&self, collective: Collective, values: Vec<f32>) -> Result<Vec<f32>> {
        if let Some(reason) = crate::sync::lock(&self.aborted).clone() {
            return Err(Error::CollectiveAborted {
                rank: self.rank,
                reason,
            });
        }
        let mut peers = crate::sync::lock(&self.peers);
        let outcome = if self.rank == 0 {
            self.combine_at_rank_0(&mut peers, collective, values)
        } else {
            let peer = peers
                .first_mut()
                .expect("a rank other than 0 holds its connection to rank 0");
            send_values(peer, tag(collective), &values)
                .map_err(|error| format!("sending to rank 0: {error}"))
                .and_then(|()| read_answer(peer))
        };
        drop(peers);
        outcome.map_err(|problem| {
            // A failed round leaves what other ranks sent unread and some
            // waiting for an answer: the group ends here, for every rank
            // (their reads end at the shut connections).
            self.shut(&problem);
            self.failure(collective, problem)
        })
    }

    /// Marks the group aborted (keeping the first reason) and shuts every
    /// connection, which ends a read blocked on one here and at the other
    /// end.
    fn shut(&self, reason: &str) {
        let mut aborted = crate::sync::lock(&self.aborted);
        if aborted.is_none() {
            *aborted = Some(reason.to_string());
        }
        drop(aborted);
        for peer in &self.shutters {
            let _ = peer.shutdown(Shutdown::Both);
        }
    }

    /// Rank 0's part of a round: every rank's values in rank order, the
    /// result (or why there is none) sent to each.
    fn combine_at_rank_0(
        &self,
        peers: &mut [TcpStream],
        collective: Collective,
        values: Vec<f32>,
    ) -> std::result::Result<Vec<f32>, String> {
        let mut contributions = vec![Contribution { collective, values }];
        for (index, peer) in peers.iter_mut().enumerate() {
            let rank = index + 1;
            let (their_tag, values) =
                read_values(peer).map_err(|error| format!("reading rank {rank}'s values: {error}"))?;
            let their =
                collective_of(their_tag).ok_or_else(|| format!("rank {rank} sent an unknown collective"))?;
            contributions.push(Contribution {
                collective: their,
                values,
            });
        }
        match combine(&contributions) {
            Ok(result) => {
                for (index, peer) in peers.iter_mut().enumerate() {
                    send_values(peer, 0, &result)
                        .map_err(|error| format!("sending rank {}'s result: {error}", index + 1))?;
                }
                Ok(Arc::unwrap_or_clone(result))
            }
            Err(problem) => {
                // The reason, cut to what a reader takes whole.
                let reason = &problem.as_bytes()[..problem.len().min(LONGEST_REASON)];
                for peer in peers.iter_mut() {
                    let mut message = vec![1u8];
                    message.extend_from_slice(&(reason.len() as u32).to_le_bytes());
                    message.extend_from_slice(reason);
                    let _ = peer.write_all(&message);
                }
                Err(problem)
            }
        }
    }
}

fn tag(collective: Collective) -> u8 {
    match collective {
        Collective::AllReduceSum => 0,
        Collective::AllGather => 1,
    }
}

fn collective_of(tag: u8) -> Option<Collective> {
    match tag {
        0 => Some(Collective::AllReduceSum),
        1 => Some(Collective::AllGather),
        _ => None,
    }
}

/// Writes a tag (or status) byte, a count and the values.
fn send_values(stream: &mut TcpStream, tag: u8, values: &[f32]) -> std::io::Result<()> {
    let mut message = Vec::with_capacity(5 + values.len() * 4);
    message.push(tag);
    message.extend_from_slice(&(values.len() as u32).to_le_bytes());
    for value in values {
        message.extend_from_slice(&value.to_le_bytes());
    }
    stream.write_all(&message)
}

/// Reads what [`send_values`] wrote. A closed connection reads as an error
/// naming it: the process at the other end ended.
fn read_values(stream: &mut TcpStream) -> std::io::Result<(u8, Vec<f32>)> {
    let mut head = [0u8; 5];
    stream.read_exact(&mut head).map_err(closed)?;
    let count = u32::from_le_bytes(head[1..].try_into().expect("four bytes")) as usize;
    if count > MOST_VALUES {
        return Err(std::io::Error::other(format!("a message of {count} values")));
    }
    let mut bytes = vec![0u8; count * 4];
    stream.read_exact(&mut bytes).map_err(closed)?;
    let values = bytes
        .chunks_exact(4)
        .map(|chunk| f32::from_le_bytes(chunk.try_into().expect("four bytes")))
        .collect();
    Ok((head[0], values))
}

/// A rank's reading of rank 0's answer: the result, or the reason the
/// round failed.
fn read_answer(stream: &mut TcpStream) -> std::result::Result<Vec<f32>, String> {
    let mut status = [0u8; 1];
    stream
        .peek(&mut status)
        .map_err(|error| format!("waiting for rank 0: {error}"))?;
    if status[0] == 0 {
        return read_values(stream)
            .map(|(_, values)| values)
            .map_err(|error| format!("reading rank 0's result: {error}"));
    }
    let mut head = [0u8; 5];
    stream
        .read_exact(&mut head)
        .map_err(|error| format!("reading rank 0's refusal: {error}"))?;
    let length = u32::from_le_bytes(head[1..].try_into().expect("four bytes")) as usize;
    if length > LONGEST_REASON {
        return Err(format!(
            "rank 0 refused the round with a reason of {length} bytes"
        ));
    }
    let mut reason = vec![0u8; length];
    stream
        .read_exact(&mut reason)
        .map_err(|error| format!("reading rank 0's refusal: {error}"))?;
    Err(String::from_utf8_lossy(&reason).into_owned())
}

fn closed(error: std::io::Error) -> std::io::Error {
    if error.kind() == std::io::ErrorKind::UnexpectedEof {
        std::io::Error::other("the connection closed (that rank's process ended or aborted)")
    } else {
        error
    }
}

impl GroupBackend for Arc<ProcessGroup> {
    fn library(&self) -> String {
        "TCP between processes".to_string()
    }

    fn link(&self) -> String {
        "TCP".to_string()
    }

    fn abort(&self, reason: &str) {
        self.shut(reason);
    }

    fn aborted(&self) -> Option<String> {
        crate::sync::lock(&self.aborted).clone()
    }

    fn rebuild(&self) -> Result<()> {
        match self.aborted() {
            None => Ok(()),
            Some(reason) => Err(Error::Collective {
                collective: "group".into(),
                rank: self.rank,
                problem: format!(
                    "a group of processes cannot be rebuilt once aborted ({reason}); start the ranks again"
                ),
            }),
        }
    }

    fn kernel(&self, _rank: usize, collective: Collective, dtype: DType) -> Result<LoadedKernel> {
        let group = self.clone();
        exchange_kernel(collective, dtype, self.ranks, move |collective, values| {
            group.exchange(collective, values).map(Arc::new)
        })
    }
}

#[cfg(test)]
mod tests {
    //! Ranks in threads standing in for processes: the group's sums and
    //! gathers are the in-process exchange's bits, disagreements fail every
    //! rank, and a rank that goes away fails the others instead of hanging.

    use std::sync::Arc;
    use std::time::Duration;

    use super::{Collective, Contribution, ProcessGroup, combine};
    use crate::runtime::collective::rendezvous::Rendezvous;

    /// A port of localhost free at the moment.
    fn free_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }

    /// `world_size` groups connected through one rendezvous, rank 0 first.
    fn connect(world_size: usize) -> Vec<ProcessGroup> {
        let port = free_port();
        let meet = move |rank: usize| {
            let rendezvous = Rendezvous {
                address: format!("127.0.0.1:{port}"),
                rank,
                world_size,
                timeout: Duration::from_secs(10),
            };
            ProcessGroup::connect(&rendezvous, "the same model").unwrap()
        };
        let others: Vec<_> = (1..world_size)
            .map(|rank| std::thread::spawn(move || meet(rank)))
            .collect();
        let mut groups = vec![meet(0)];
        groups.extend(others.into_iter().map(|handle| handle.join().unwrap()));
        groups
    }

    fn random(seed: u64, count: usize) -> Vec<f32> {
        let mut rng = crate::rng::SplitMix64::new(seed);
        (0..count).map(|_| rng.next_f32() * 2.0 - 1.0).collect()
    }

    /// Runs one collective on every rank (a thread each); every rank's result.
    fn exchange_all(
        groups: Vec<ProcessGroup>,
        inputs: &[(Collective, Vec<f32>)],
    ) -> Vec<crate::Result<Vec<f32>>> {
        let handles: Vec<_> = groups
            .into_iter()
            .zip(inputs.iter().cloned())
            .map(|(group, (collective, values))| {
                std::thread::spawn(move || group.exchange(collective, values))
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().unwrap()).collect()
    }

    #[test]
    fn sums_and_gathers_are_the_in_process_exchanges_bits() {
        for (collective, world_size, count) in [
            (Collective::AllReduceSum, 3, 1027),
            (Collective::AllGather, 2, 515),
            (Collective::AllReduceSum, 4, 1),
        ] {
            let inputs: Vec<_> = (0..world_size)
                .map(|rank| (collective, random(rank as u64 * 31 + count as u64, count)))
                .collect();
            let contributions: Vec<_> = inputs
                .iter()
                .map(|(collective, values)| Contribution {
                    collective: *collective,
                    values: values.clone(),
                })
                .collect();
            let expected = combine(&contributions).unwrap();
            for (rank, result) in exchange_all(connect(world_size), &inputs).into_iter().enumerate() {
                let got = result.unwrap();
                assert!(
                    got.len() == expected.len()
                        && got
                            .iter()
                            .zip(expected.iter())
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{collective:?} over {world_size}: rank {rank}"
                );
            }
        }
    }

    #[test]
    fn ranks_that_ask_for_different_sizes_all_fail() {
        let inputs = [
            (Collective::AllReduceSum, random(1, 8)),
            (Collective::AllReduceSum, random(2, 9)),
        ];
        for (rank, result) in exchange_all(connect(2), &inputs).into_iter().enumerate() {
            let error = result.unwrap_err().to_string();
            assert!(error.contains("ranks disagree"), "rank {rank}: {error}");
        }
    }

    #[test]
    fn a_rank_that_goes_away_fails_the_others_collective() {
        let mut groups = connect(3);
        // Rank 2's process ends: its connection closes.
        drop(groups.pop());
        let rank_1 = Arc::new(groups.pop().unwrap());
        let waiting = {
            let rank_1 = rank_1.clone();
            std::thread::spawn(move || rank_1.exchange(Collective::AllReduceSum, random(3, 4)))
        };
        let error = groups[0]
            .exchange(Collective::AllReduceSum, random(4, 4))
            .unwrap_err()
            .to_string();
        assert!(error.contains("rank 2") && error.contains("closed"), "{error}");
        // Rank 0 gave up on the round: rank 1 must not wait forever either.
        drop(groups);
        let error = waiting.join().unwrap().unwrap_err().to_string();
        assert!(error.contains("rank 0"), "{error}");
    }
}
