//! Where the ranks of a group of processes meet before NCCL connects them,
//! as torch's TCP store does: rank 0 listens at the launcher's
//! `MASTER_ADDR:MASTER_PORT`, every other rank connects and says who it is
//! and what it runs (a model's hash), and once all have arrived rank 0
//! checks they agree and sends each the bytes every rank needs (NCCL's
//! unique id). A rank that never arrives, a group size that differs or a
//! different model is an error on every rank that did arrive, naming the
//! rank at fault; nothing waits past the timeout. NCCL stays the engine of
//! every collective: this exchanges one message before them.
//!
//! On the wire, a rank's greeting is [`GREETING`], then its rank, the group
//! size and the length of its description (little-endian u32 each), then
//! the description; rank 0 answers a status byte (0: agreed, 1: refused),
//! a length and the shared bytes or the reason for refusing.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// What opens every greeting: a stray connection is not taken for a rank.
const GREETING: &[u8; 20] = b"kscope rendezvous 1\n";
/// The longest description or answer accepted (a hash or an id is short).
const LONGEST_MESSAGE: usize = 1 << 16;

/// One rank's part in a meeting of `world_size` ranks at `address`.
#[derive(Clone, Debug)]
pub struct Rendezvous {
    /// `host:port` of rank 0's listener (rank 0 listens on every IPv4
    /// interface at that port: an IPv6-only network is not served).
    pub address: String,
    /// This process's rank.
    pub rank: usize,
    /// How many ranks meet.
    pub world_size: usize,
    /// How long to wait for the others, in all.
    pub timeout: Duration,
}

impl Rendezvous {
    /// Meets the other ranks: every rank gives `description` (what it runs:
    /// all must be equal), rank 0 gives `shared` (the bytes every rank
    /// receives; the others give `None`). Returns the shared bytes.
    pub fn meet(&self, description: &str, shared: Option<&[u8]>) -> Result<Vec<u8>> {
        self.meet_connected(description, shared).map(|(shared, _)| shared)
    }

    /// [`meet`](Self::meet), keeping the meeting's connections open: rank 0
    /// gets one to every other rank (in rank order, rank 1 first), every
    /// other rank its one to rank 0. The collectives of CPU ranks in
    /// processes of their own run over them.
    pub(crate) fn meet_connected(
        &self,
        description: &str,
        shared: Option<&[u8]>,
    ) -> Result<(Vec<u8>, Vec<TcpStream>)> {
        if self.world_size == 0 || self.rank >= self.world_size {
            return Err(self.error(format!(
                "rank {} is not in a group of {}",
                self.rank, self.world_size
            )));
        }
        match (self.rank, shared) {
            (0, Some(shared)) => self
                .host(description, shared)
                .map(|peers| (shared.to_vec(), peers)),
            (0, None) => Err(self.error("rank 0 has nothing to share".into())),
            (_, None) => self.join(description),
            (_, Some(_)) => Err(self.error("only rank 0 shares bytes".into())),
        }
    }

    fn error(&self, problem: String) -> Error {
        Error::Rendezvous {
            address: self.address.clone(),
            rank: self.rank,
            world_size: self.world_size,
            problem,
        }
    }

    fn io_error<'a>(&'a self, doing: &'a str) -> impl Fn(std::io::Error) -> Error + 'a {
        move |error| self.error(format!("{doing}: {error}"))
    }

    /// Rank 0: waits for every other rank, checks them, answers them;
    /// returns the connections to ranks 1, 2, ...
    fn host(&self, description: &str, shared: &[u8]) -> Result<Vec<TcpStream>> {
        let port = self
            .address
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse::<u16>().ok())
            .ok_or_else(|| self.error("the address has no port".into()))?;
        let listener = TcpListener::bind(("0.0.0.0", port)).map_err(|error| {
            if error.kind() == ErrorKind::AddrInUse {
                self.error(format!(
                    "listening: port {port} is taken (another program, or a launcher's own store, listens there); set KSCOPE_RENDEZVOUS_PORT to a free port on every rank"
                ))
            } else {
                self.error(format!("listening: {error}"))
            }
        })?;
        listener
            .set_nonblocking(true)
            .map_err(self.io_error("listening"))?;
        let deadline = Instant::now() + self.timeout;
        let mut arrived: Vec<Option<(TcpStream, String)>> = (0..self.world_size).map(|_| None).collect();
        while arrived.iter().skip(1).any(Option::is_none) {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    stream
                        .set_nonblocking(false)
                        .map_err(self.io_error("accepting"))?;
                    stream
                        .set_read_timeout(Some(remaining(deadline)))
                        .map_err(self.io_error("accepting"))?;
                    let Some((rank, world_size, their)) = read_greeting(&mut stream) else {
                        continue; // not a rank: a port scan, a stray client
                    };
                    let problem = if world_size != self.world_size {
                        Some(format!(
                            "rank {rank} was started for a group of {world_size}, rank 0 for {}",
                            self.world_size
                        ))
                    } else if rank == 0 || rank >= self.world_size {
                        Some(format!("a process says it is rank {rank} of {world_size}"))
                    } else if arrived[rank].is_some() {
                        Some(format!("two processes say they are rank {rank}"))
                    } else {
                        None
                    };
                    if let Some(problem) = problem {
                        let _ = answer(&mut stream, 1, problem.as_bytes());
                        return Err(self.refuse_all(arrived, problem));
                    }
                    arrived[rank] = Some((stream, their));
                }
                Err(error) if error.kind() == ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        let missing: Vec<String> = (1..self.world_size)
                            .filter(|&rank| arrived[rank].is_none())
                            .map(|rank| rank.to_string())
                            .collect();
                        let problem = format!(
                            "rank{} {} never arrived within {:.0?}",
                            if missing.len() > 1 { "s" } else { "" },
                            missing.join(", "),
                            self.timeout
                        );
                        return Err(self.refuse_all(arrived, problem));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(error) => return Err(self.error(format!("accepting: {error}"))),
            }
        }
        if let Some((rank, their)) = arrived.iter().enumerate().find_map(|(rank, entry)| {
            entry
                .as_ref()
                .filter(|(_, their)| their != description)
                .map(|(_, their)| (rank, their.clone()))
        }) {
            let problem = format!("rank {rank} runs {their}, rank 0 runs {description}");
            return Err(self.refuse_all(arrived, problem));
        }
        for (stream, _) in arrived.iter_mut().flatten() {
            answer(stream, 0, shared).map_err(self.io_error("answering"))?;
        }
        Ok(arrived.into_iter().flatten().map(|(stream, _)| stream).collect())
    }

    /// Tells every rank that arrived why the meeting failed; the error.
    fn refuse_all(&self, arrived: Vec<Option<(TcpStream, String)>>, problem: String) -> Error {
        for (mut stream, _) in arrived.into_iter().flatten() {
            let _ = answer(&mut stream, 1, problem.as_bytes());
        }
        self.error(problem)
    }

    /// Any other rank: connects (rank 0 may not listen yet), greets, reads
    /// the answer; returns it and the connection.
    fn join(&self, description: &str) -> Result<(Vec<u8>, Vec<TcpStream>)> {
        let deadline = Instant::now() + self.timeout;
        let mut stream = loop {
            let addresses = self
                .address
                .to_socket_addrs()
                .map_err(self.io_error("resolving the address"))?;
            if let Some(stream) = addresses
                .into_iter()
                .find_map(|address| TcpStream::connect_timeout(&address, remaining(deadline)).ok())
            {
                break stream;
            }
            if Instant::now() >= deadline {
                return Err(self.error(format!("rank 0 did not listen within {:.0?}", self.timeout)));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut greeting = GREETING.to_vec();
        for number in [self.rank, self.world_size, description.len()] {
            greeting.extend_from_slice(&(number as u32).to_le_bytes());
        }
        greeting.extend_from_slice(description.as_bytes());
        stream
            .write_all(&greeting)
            .map_err(self.io_error("greeting rank 0"))?;
        stream
            .set_read_timeout(Some(remaining(deadline)))
            .map_err(self.io_error("waiting for rank 0"))?;
        let mut status = [0u8; 1];
        stream
            .read_exact(&mut status)
            .map_err(|_| self.error(format!("rank 0 did not answer within {:.0?}", self.timeout)))?;
        let body =
            read_sized(&mut stream).ok_or_else(|| self.error("rank 0's answer was cut short".into()))?;
        match status[0] {
            0 => Ok((body, vec![stream])),
            _ => Err(self.error(String::from_utf8_lossy(&body).into_owned())),
        }
    }
}

/// Time left until `deadline`, at least a millisecond (sockets take no zero).
fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// A greeting's rank, group size and description, or `None` where the
/// bytes are not one.
fn read_greeting(stream: &mut TcpStream) -> Option<(usize, usize, String)> {
    let mut opening = [0u8; GREETING.len()];
    stream.read_exact(&mut opening).ok()?;
    if &opening != GREETING {
        return None;
    }
    let mut numbers = [0u8; 8];
    stream.read_exact(&mut numbers).ok()?;
    let rank = u32::from_le_bytes(numbers[..4].try_into().ok()?) as usize;
    let world_size = u32::from_le_bytes(numbers[4..].try_into().ok()?) as usize;
    let description = String::from_utf8(read_sized(stream)?).ok()?;
    Some((rank, world_size, description))
}

/// A length-prefixed message, `None` where it is cut short or too long.
fn read_sized(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).ok()?;
    let length = u32::from_le_bytes(length) as usize;
    if length > LONGEST_MESSAGE {
        return None;
    }
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).ok()?;
    Some(body)
}

fn answer(stream: &mut TcpStream, status: u8, body: &[u8]) -> std::io::Result<()> {
    let mut message = vec![status];
    message.extend_from_slice(&(body.len() as u32).to_le_bytes());
    message.extend_from_slice(body);
    stream.write_all(&message)
}

#[cfg(test)]
mod tests;
