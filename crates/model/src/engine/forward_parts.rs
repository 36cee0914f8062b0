//! What every pass encodes with (the config, weights, ops and state,
//! borrowed together): a file of its own, because each part of the model
//! math adds its methods to [`Forward`], and `forward.rs`, which runs those
//! parts, would otherwise be imported by all of them.

use super::state::{Ops, State};
use crate::config::Config;
use crate::weights::Weights;

/// The model's weights, ops and state, borrowed together for encoding.
pub(crate) struct Forward<'a> {
    pub config: &'a Config,
    pub weights: &'a Weights,
    pub ops: &'a Ops,
    pub state: &'a State,
}
