//! A process's place in a group of ranks started by a launcher, read from
//! the variables the launchers set: torchrun (`RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`), Open MPI's mpirun
//! (`OMPI_COMM_WORLD_RANK`, `_SIZE`, `_LOCAL_RANK`) and SLURM's srun
//! (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`). mpirun and srun say
//! nothing of where the ranks meet, so there `MASTER_ADDR` and `MASTER_PORT`
//! are the user's to set (as torch's own launch under them asks). Under
//! torchrun, whose agent holds `MASTER_PORT` itself, the ranks meet at
//! `MASTER_PORT + 1`; `KSCOPE_RENDEZVOUS_PORT` names another port. The
//! environment is read once, by the caller; the parsing takes the variables
//! as a lookup so tests need no process of their own.

use crate::error::{Error, Result};

/// Which launcher started the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// torchrun (torch.distributed.run), or anything setting its variables.
    Torchrun,
    /// Open MPI's mpirun.
    OpenMpi,
    /// SLURM's srun.
    Slurm,
}

impl Launcher {
    /// The launcher's name, as users know it.
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Torchrun => "torchrun",
            Launcher::OpenMpi => "mpirun (Open MPI)",
            Launcher::Slurm => "srun (SLURM)",
        }
    }

    /// The variables holding the rank, the world size and the local rank.
    fn variables(self) -> [&'static str; 3] {
        match self {
            Launcher::Torchrun => ["RANK", "WORLD_SIZE", "LOCAL_RANK"],
            Launcher::OpenMpi => [
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK",
            ],
            Launcher::Slurm => ["SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"],
        }
    }
}

/// One rank of a group of processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchedRank {
    /// Who started the process.
    pub launcher: Launcher,
    /// This process's rank, 0 to `world_size - 1`.
    pub rank: usize,
    /// How many processes the group has.
    pub world_size: usize,
    /// The rank among the processes of this host: the GPU it drives.
    pub local_rank: usize,
    /// `host:port` where the ranks meet (rank 0 listens there).
    pub rendezvous: String,
}

impl LaunchedRank {
    /// The process's place in its group from the process environment, or
    /// `None` where no launcher started it.
    pub fn from_environment() -> Result<Option<LaunchedRank>> {
        Self::from_variables(|name| std::env::var(name).ok())
    }

    /// The launcher, rank and group size from `variable(name)` alone, where
    /// a launcher's rank and size variables are set and read as numbers;
    /// `None` otherwise. For a command that runs one process whatever
    /// started it, to refuse being one of several (the meeting's variables
    /// do not matter there, and a stray `RANK` is not a launch).
    pub fn group_of(variable: impl Fn(&str) -> Option<String>) -> Option<(Launcher, usize, usize)> {
        [Launcher::Torchrun, Launcher::OpenMpi, Launcher::Slurm]
            .into_iter()
            .find_map(|launcher| {
                let [rank, size, _] = launcher.variables();
                let number = |name: &str| variable(name)?.trim().parse::<usize>().ok();
                Some((launcher, number(rank)?, number(size)?))
            })
    }

    /// The place from `variable(name)`: the first launcher whose rank
    /// variable is set (torchrun, then Open MPI, then SLURM) decides; its
    /// other variables must then be set and agree, or the error names what
    /// is missing or wrong.
    pub fn from_variables(variable: impl Fn(&str) -> Option<String>) -> Result<Option<LaunchedRank>> {
        let Some(launcher) = [Launcher::Torchrun, Launcher::OpenMpi, Launcher::Slurm]
            .into_iter()
            .find(|launcher| variable(launcher.variables()[0]).is_some())
        else {
            return Ok(None);
        };
        let [rank_name, size_name, local_name] = launcher.variables();
        let number = |name: &str| -> Result<usize> {
            let text = variable(name).ok_or_else(|| Error::LaunchEnvironment {
                variable: name.to_string(),
                problem: format!("not set, though {rank_name} is ({} sets both)", launcher.name()),
            })?;
            text.trim().parse().map_err(|_| Error::LaunchEnvironment {
                variable: name.to_string(),
                problem: format!("`{text}` is not a whole number"),
            })
        };
        let (rank, world_size, local_rank) = (number(rank_name)?, number(size_name)?, number(local_name)?);
        if world_size == 0 || rank >= world_size {
            return Err(Error::LaunchEnvironment {
                variable: rank_name.to_string(),
                problem: format!("rank {rank} is not in a group of {world_size} ({size_name})"),
            });
        }
        if local_rank > rank {
            return Err(Error::LaunchEnvironment {
                variable: local_name.to_string(),
                problem: format!("local rank {local_rank} exceeds the rank {rank}"),
            });
        }
        let meeting = |name: &str| {
            variable(name).filter(|value| !value.trim().is_empty()).ok_or_else(|| Error::LaunchEnvironment {
                variable: name.to_string(),
                problem: format!(
                    "not set: the ranks meet at MASTER_ADDR:MASTER_PORT (rank 0's host and a free port){}",
                    if launcher == Launcher::Torchrun {
                        ""
                    } else {
                        "; under mpirun pass them with -x, under srun export them"
                    }
                ),
            })
        };
        let (host, port) = (meeting("MASTER_ADDR")?, meeting("MASTER_PORT")?);
        let port: u16 = port.trim().parse().map_err(|_| Error::LaunchEnvironment {
            variable: "MASTER_PORT".into(),
            problem: format!("`{port}` is not a port number"),
        })?;
        // torchrun's agent keeps its own store listening at MASTER_PORT for
        // the whole run (its workers see TORCHELASTIC_USE_AGENT_STORE), so
        // there the ranks meet one port above; KSCOPE_RENDEZVOUS_PORT
        // chooses another under any launcher.
        let port = match variable("KSCOPE_RENDEZVOUS_PORT") {
            Some(chosen) => chosen.trim().parse().map_err(|_| Error::LaunchEnvironment {
                variable: "KSCOPE_RENDEZVOUS_PORT".into(),
                problem: format!("`{chosen}` is not a port number"),
            })?,
            None if variable("TORCHELASTIC_USE_AGENT_STORE").is_some() => {
                port.checked_add(1).ok_or_else(|| Error::LaunchEnvironment {
                    variable: "MASTER_PORT".into(),
                    problem: "65535 leaves no port above it for the ranks to meet at beside torchrun's store; set KSCOPE_RENDEZVOUS_PORT".into(),
                })?
            }
            None => port,
        };
        Ok(Some(LaunchedRank {
            launcher,
            rank,
            world_size,
            local_rank,
            rendezvous: format!("{}:{port}", host.trim()),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> Result<Option<LaunchedRank>> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LaunchedRank::from_variables(|name| map.get(name).cloned())
    }

    fn problem(pairs: &[(&str, &str)]) -> String {
        parse(pairs).unwrap_err().to_string()
    }

    #[test]
    fn under_torchruns_agent_the_ranks_meet_one_port_above_its_store() {
        let torchrun = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "10.0.0.7"),
            ("MASTER_PORT", "29500"),
        ];
        let with = |extra: &[(&'static str, &'static str)]| {
            let all: Vec<(&str, &str)> = torchrun.iter().chain(extra).copied().collect();
            parse(&all).unwrap().unwrap().rendezvous
        };
        assert_eq!(with(&[]), "10.0.0.7:29500");
        assert_eq!(
            with(&[("TORCHELASTIC_USE_AGENT_STORE", "True")]),
            "10.0.0.7:29501"
        );
        assert_eq!(
            with(&[
                ("TORCHELASTIC_USE_AGENT_STORE", "True"),
                ("KSCOPE_RENDEZVOUS_PORT", "4000")
            ]),
            "10.0.0.7:4000"
        );
        let all: Vec<(&str, &str)> = torchrun
            .iter()
            .chain(&[("KSCOPE_RENDEZVOUS_PORT", "x")])
            .copied()
            .collect();
        assert!(
            parse(&all)
                .unwrap_err()
                .to_string()
                .contains("KSCOPE_RENDEZVOUS_PORT")
        );
    }

    #[test]
    fn each_launcher_is_read_from_its_own_variables() {
        let meet = [("MASTER_ADDR", "10.0.0.7"), ("MASTER_PORT", "29500")];
        let cases: [(Launcher, [(&str, &str); 3]); 3] = [
            (
                Launcher::Torchrun,
                [("RANK", "3"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "1")],
            ),
            (
                Launcher::OpenMpi,
                [
                    ("OMPI_COMM_WORLD_RANK", "3"),
                    ("OMPI_COMM_WORLD_SIZE", "8"),
                    ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
                ],
            ),
            (
                Launcher::Slurm,
                [
                    ("SLURM_PROCID", "3"),
                    ("SLURM_NTASKS", "8"),
                    ("SLURM_LOCALID", "1"),
                ],
            ),
        ];
        for (launcher, variables) in cases {
            let all: Vec<(&str, &str)> = variables.iter().chain(&meet).copied().collect();
            assert_eq!(
                parse(&all).unwrap(),
                Some(LaunchedRank {
                    launcher,
                    rank: 3,
                    world_size: 8,
                    local_rank: 1,
                    rendezvous: "10.0.0.7:29500".into(),
                }),
                "{}",
                launcher.name()
            );
        }
        assert_eq!(parse(&meet).unwrap(), None, "no launcher: one process");
        let group = |pairs: &[(&str, &str)]| {
            let map: HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            LaunchedRank::group_of(|name| map.get(name).cloned())
        };
        assert_eq!(
            group(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "4")]),
            Some((Launcher::Slurm, 1, 4)),
            "no meeting variables needed"
        );
        assert_eq!(group(&[("RANK", "1")]), None, "a stray RANK is no launch");
        assert_eq!(group(&[("RANK", "x"), ("WORLD_SIZE", "2")]), None);
    }

    #[test]
    fn a_wrong_or_missing_variable_is_named() {
        let meet = [("MASTER_ADDR", "h"), ("MASTER_PORT", "29500")];
        let with = |extra: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str)> {
            extra.iter().chain(&meet).copied().collect()
        };
        let message = problem(&with(&[("RANK", "0"), ("LOCAL_RANK", "0")]));
        assert!(message.contains("WORLD_SIZE: not set"), "{message}");
        let message = problem(&with(&[
            ("RANK", "two"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
        ]));
        assert!(message.contains("RANK: `two` is not a whole number"), "{message}");
        let message = problem(&with(&[("RANK", "2"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")]));
        assert!(message.contains("rank 2 is not in a group of 2"), "{message}");
        let message = problem(&with(&[("RANK", "1"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "3")]));
        assert!(message.contains("LOCAL_RANK: local rank 3 exceeds"), "{message}");
        let message = problem(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "0"),
        ]);
        assert!(
            message.contains("MASTER_ADDR: not set") && message.contains("srun"),
            "{message}"
        );
        let message = problem(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "70000"),
        ]);
        assert!(
            message.contains("MASTER_PORT: `70000` is not a port number"),
            "{message}"
        );
    }
}
