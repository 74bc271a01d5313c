//! The contract between the kernel object and the agent that loads it: the names of its maps
//! ([`maps`]) and programs ([`programs`]), and the load-time globals the loader sets before
//! the verifier runs ([`switches`]). Leaves: they import nothing of the crate, so every
//! module may name them without an arrow back up (the crate root re-exports them).

pub mod maps;
pub mod programs;
pub mod switches;
