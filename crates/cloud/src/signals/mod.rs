//! The Signals domain: what an event is ([`event`]), how a request body becomes a batch of
//! events ([`batch`]), and how fast a signal key may send ([`ratelimit`]).

pub mod batch;
pub mod event;
pub mod links;
pub mod ratelimit;
pub mod raw;
pub mod validate;
