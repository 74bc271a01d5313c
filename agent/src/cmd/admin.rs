//! The small operations on an agent and its files: `rocemon detach` (remove the pins),
//! `rocemon reload` (SIGHUP, as the unit's ExecReload) and `rocemon check-config`.

use crate::config::cli::{CheckConfigArgs, DetachArgs, ReloadArgs, RunArgs};
use crate::config::Config;
use crate::error::UsageError;
use anyhow::Result;

pub fn detach(args: DetachArgs) -> Result<()> {
    let file_dir = match &args.config {
        Some(p) => crate::config::load_file(p)?.pin_dir,
        None => None,
    };
    let root = args
        .pin_dir
        .or(file_dir)
        .unwrap_or_else(|| crate::kernel::pins::DEFAULT_PIN_DIR.into());
    if let Some(pid) = crate::kernel::pins::PinLock::held(&root) {
        let who = pid.map(|p| format!(" (process {p})")).unwrap_or_default();
        if !args.force {
            return Err(UsageError::BadConfig(format!(
                "a running rocemon{who} holds the pins under {}; stop it first (`systemctl stop rocemon`), or add --force to remove the pins anyway (its programs detach when it exits)",
                root.display()
            ))
            .into());
        }
        log::warn!("--force: removing the pins of a running rocemon{who}");
    }
    let mut done = Vec::new();
    let mut left = Vec::new();
    let ifaces: Vec<Option<&str>> = if args.ifaces.is_empty() {
        vec![None]
    } else {
        args.ifaces.iter().map(|i| Some(i.as_str())).collect()
    };
    for i in ifaces {
        let (d, out) = crate::kernel::pins::detach(&root, i)?;
        done.extend(d);
        left.extend(out.left);
    }
    for p in &left {
        eprintln!(
            "rocemon: left {} in place: not a pin of rocemon's (by name or object type)",
            p.display()
        );
    }
    if done.is_empty() {
        println!("nothing of rocemon's pinned under {}", root.display());
    } else {
        println!(
            "detached and removed the pins of {} (under {})",
            done.join(", "),
            root.display()
        );
    }
    Ok(())
}

/// `rocemon reload --pid PID`: SIGHUP to a running agent, after checking that PID is one.
pub fn reload(args: ReloadArgs) -> Result<()> {
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", args.pid)).map_err(|e| {
        UsageError::BadConfig(format!(
            "no process {} ({e}); give the agent's pid (systemd: $MAINPID)",
            args.pid
        ))
    })?;
    if comm.trim() != "rocemon" {
        return Err(UsageError::BadConfig(format!(
            "process {} is {:?}, not rocemon; give the agent's pid",
            args.pid,
            comm.trim()
        ))
        .into());
    }
    // SAFETY: kill(2) with a checked pid and a valid signal.
    if unsafe { libc::kill(args.pid as i32, libc::SIGHUP) } != 0 {
        return Err(anyhow::anyhow!(
            "signal process {}: {}",
            args.pid,
            std::io::Error::last_os_error()
        ));
    }
    println!("asked rocemon (pid {}) to reload", args.pid);
    Ok(())
}

pub fn check_config(args: CheckConfigArgs) -> Result<()> {
    let c = Config::from_args(&RunArgs {
        config: Some(args.file.clone()),
        ..RunArgs::default()
    })?;
    let mut missing = Vec::new();
    for i in &c.ifaces {
        if crate::kernel::loader::ifindex(i).is_err() {
            missing.push(i.as_str());
        }
    }
    println!("{}: valid", args.file.display());
    println!("{}", c.summary());
    if !missing.is_empty() {
        println!(
            "note: not on this host (now): {}; `rocemon run` will refuse them until they exist",
            missing.join(", ")
        );
    }
    Ok(())
}
