//! One interface's flow maps at a poll: read (the flow cache flushed into them first), the
//! idle flows deleted, the fill and the flows the full maps pushed out measured and said
//! (metrics, one warning line a minute), and the live flows handed on to the pipeline.

use crate::config::Config;
use crate::detect::elephant::Transition;
use crate::export::metrics::Metrics;
use crate::kernel::loader::Attachment;
use crate::pipeline::flows::ElephantEvent;
use crate::sources::flow_pressure::{Fill, Read};
use agent_common::{FlowKey, FlowStats, MAP_LABEL_FLOWS};

/// One read of an interface's flow maps: the flows that are not idle, the flow maps' fill
/// (IPv4, IPv6, sent), and the read's idle cut-off (kernel ns: flows quiet since were deleted).
pub struct FlowsRead {
    pub live: Vec<(FlowKey, FlowStats)>,
    pub fill: Fill,
    pub idle_before_ns: u64,
}

/// Reads `p`'s flows at `now_ns` (monotonic), `created` the flows its hooks created so far:
/// the flows that are not idle, and the maps' fill. None when the maps could not be read.
pub fn read(
    p: &mut Attachment,
    m: &Metrics,
    config: &Config,
    now_ns: u64,
    created: Option<u64>,
) -> Option<FlowsRead> {
    let idle_before = p
        .flow_pressure
        .idle_cutoff(now_ns, config.flow_idle_timeout);
    let (flows, errors) = match p.read_flows() {
        Ok(r) => r,
        Err(e) => {
            log::warn!("read the flow maps on {}: {e:#}", p.iface);
            m.map_read_error(&p.iface, MAP_LABEL_FLOWS, 1);
            return None;
        }
    };
    if errors > 0 {
        m.map_read_error(&p.iface, MAP_LABEL_FLOWS, errors);
    }
    // The idle timeout: flows quiet that long leave the maps (so a full map seldom has to
    // push a flow out) and, not fed this poll, the flow table.
    let deleted = match p.expire_flows(&flows, idle_before) {
        Ok((deleted, failed)) => {
            m.flows_expired(&p.iface, deleted);
            if failed > 0 {
                m.map_update_error(&p.iface, MAP_LABEL_FLOWS, failed);
            }
            deleted
        }
        Err(e) => {
            log::warn!("delete idle flows on {}: {e:#}", p.iface);
            m.map_update_error(&p.iface, MAP_LABEL_FLOWS, 1);
            0
        }
    };
    let fill = p.flow_pressure.observe(Read {
        flows: &flows,
        idle_before_ns: idle_before,
        sizes: [
            u64::from(config.flow_maps.ipv4),
            u64::from(config.flow_maps.ipv6),
            u64::from(config.flow_maps.own()),
        ],
        created,
        deleted,
    });
    m.set_flow_maps(&p.iface, &fill);
    if let Some(line) = p
        .flow_pressure
        .warning(&p.iface, &fill, std::time::Instant::now())
    {
        log::warn!("{line}");
    }
    let live = flows
        .into_iter()
        .filter(|(_, s)| !crate::sources::maps::idle(s, idle_before))
        .collect();
    Some(FlowsRead {
        live,
        fill,
        idle_before_ns: idle_before,
    })
}

/// Elephants that started or ended at this poll: a line each, or one line per transition
/// where more than three did at once (a flood of flows makes one line, not one per flow).
pub fn log_elephants(ifaces: &[String], events: &[ElephantEvent]) {
    for (t, word) in [
        (Transition::Started, "started"),
        (Transition::Ended, "ended"),
    ] {
        let these: Vec<&ElephantEvent> = events.iter().filter(|e| e.transition == t).collect();
        let line = |ev: &ElephantEvent| {
            let iface = ifaces.get(ev.iface).map(String::as_str).unwrap_or("?");
            let (src, dst) = (
                agent_common::flow_key::addr(ev.key.ip_version, &ev.key.src),
                agent_common::flow_key::addr(ev.key.ip_version, &ev.key.dst),
            );
            let rate = if t == Transition::Started {
                format!(
                    " at {}",
                    crate::detect::findings::bits_per_second(ev.rate_bytes)
                )
            } else {
                String::new()
            };
            format!(
                "on {iface}: {src} -> {dst} sport {} qp 0x{:x}{rate}",
                ev.key.sport, ev.key.dest_qp
            )
        };
        match these.as_slice() {
            [] => {}
            few if few.len() <= 3 => {
                for ev in few {
                    log::info!("elephant {word} {}", line(ev));
                }
            }
            many => log::info!(
                "{} elephants {word}, the first {}",
                many.len(),
                line(many[0])
            ),
        }
    }
}
