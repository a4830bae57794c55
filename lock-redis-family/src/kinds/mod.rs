//! The lock kinds on a Redis-family server: one Lua script per operation and
//! kind, run through [`scripted::ScriptedKinds`], which each backend
//! implements once over its own client (script cache, replica
//! acknowledgement).

pub mod election;
pub mod inspect;
pub mod multi;
pub mod rw;
pub mod scripted;
pub mod semaphore;
