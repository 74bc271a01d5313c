#![no_std]
//! The kernel programs are the `agent` binary of this crate (src/main.rs); this empty library
//! only lets the userspace crate list it as a build-dependency so cargo rebuilds on changes.
