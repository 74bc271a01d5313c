//! Where frames and counts come from: kernel maps (see [`crate::loader`]) and capture files.
pub mod capture;
