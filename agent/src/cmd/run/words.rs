//! What the live agent says in words: the one-line summary (the demo prints it every few
//! seconds) and what stopping leaves behind.

use crate::config::Config;
use crate::export::report::human_bytes;
use crate::kernel::loader::Attachment;
use crate::pipeline::flows::FlowTable;
use agent_common::HookCounters;

/// A one-line live summary (the demo prints it every few seconds).
pub fn summary_line(probes: &[Option<Attachment>], table: &FlowTable) -> String {
    let mut total = HookCounters::ZERO;
    for p in probes.iter().flatten() {
        if let Ok(blocks) = p.read_counters() {
            for h in &p.hooks {
                total.add(&blocks[*h as usize]);
            }
        }
    }
    let top = table.top_k(1);
    let top = top
        .first()
        .map(|e| {
            format!(
                "top flow {} -> {} qp 0x{:x} at {}",
                e.src(),
                e.dst(),
                e.key.dest_qp,
                crate::detect::findings::bits_per_second(e.rate_bytes)
            )
        })
        .unwrap_or_else(|| "no flows yet".into());
    format!(
        "rocemon: {} RoCE packets ({}), CE {}, CNP {}, {} flows; {}",
        total.roce_packets(),
        human_bytes(total.roce_bytes() as f64),
        total.ecn_packets[3],
        total.cnp_packets,
        table.len(),
        top
    )
}

/// What stopping leaves behind, in words: nothing (sFlow only, or unpinned programs that
/// detach now), or programs that stay pinned and counting, with the command that removes
/// them as this agent was run (its `--pin-dir` when not the default).
pub fn shutdown_message(
    probes: &[Option<crate::kernel::loader::Attachment>],
    config: &Config,
) -> (log::Level, String) {
    let pin_dir = config.pin_dir.display();
    if probes.iter().flatten().any(|p| p.pins_removed()) {
        return (log::Level::Warn, format!(
            "shutting down; the pins under {pin_dir} were removed while this agent ran (`rocemon detach --force`): the programs detach now"
        ));
    }
    if probes.iter().flatten().next().is_none() {
        return (
            log::Level::Info,
            "shutting down (no programs were attached)".into(),
        );
    }
    if !(config.pin && config.afxdp.is_none()) {
        return (log::Level::Info, "shutting down: detaching programs".into());
    }
    let flag = if config.pin_dir == std::path::Path::new(crate::config::DEFAULT_PIN_DIR) {
        String::new()
    } else {
        format!(" --pin-dir {}", shell_word(&pin_dir.to_string()))
    };
    (log::Level::Info, format!(
        "shutting down; the programs stay attached and counting (pinned under {pin_dir}); `rocemon detach{flag}` removes them"
    ))
}

/// `s` as one shell word: as it is when it needs no quoting, else in single quotes.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::shell_word;

    #[test]
    fn a_plain_path_is_one_word_as_it_is() {
        assert_eq!(shell_word("/sys/fs/bpf/rocemon-2"), "/sys/fs/bpf/rocemon-2");
    }

    #[test]
    fn a_path_with_spaces_or_quotes_is_single_quoted() {
        assert_eq!(shell_word("/tmp/my pins"), "'/tmp/my pins'");
        assert_eq!(shell_word("/tmp/it's"), "'/tmp/it'\\''s'");
    }
}
