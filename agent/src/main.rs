//! The `rocemon` binary: parses the flags and dispatches to the command (`rocemon::cmd`).

use clap::Parser;
use rocemon::cmd;
use rocemon::config::cli::{Cli, Command};
use rocemon::error::exit_status;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Run(_)) {
        rocemon::config::logging::init(
            rocemon::config::logging::LogFormat::Auto,
            log::LevelFilter::Info,
        );
    }
    let result = match cli.command {
        Command::Run(a) => cmd::start::run(a),
        Command::Analyze(a) => cmd::analyze::analyze(a),
        Command::Top(a) => cmd::top::run(a),
        Command::Rdma(a) => cmd::rdma::rdma(a),
        Command::Detach(a) => cmd::admin::detach(a),
        Command::CheckConfig(a) => cmd::admin::check_config(a),
        Command::Reload(a) => cmd::admin::reload(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rocemon: error: {e:#}");
            ExitCode::from(exit_status(&e) as u8)
        }
    }
}
