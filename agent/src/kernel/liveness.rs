//! Whether an attachment's programs still run on its device. Comparing interface indexes
//! cannot tell a device deleted and created again under the same index (inside one poll, or
//! while the agent was stopped) from the old one, and nothing else tells the agent: its
//! programs went with the old device while `rocemon_attached` stayed 1. So the agent finds
//! the BPF links of its programs on the device once attached, and at every poll asks the
//! kernel whether each still exists and still targets that device (a link whose device went
//! away reads interface index 0).

use std::collections::BTreeMap;

const BPF_LINK_GET_FD_BY_ID: libc::c_long = 30;
const BPF_LINK_GET_NEXT_ID: libc::c_long = 31;

/// A link's program and target device, from its descriptor's fdinfo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkTarget {
    pub prog_id: u32,
    /// 0 once the device is gone (XDP and TCX links); None for link types without a device.
    pub ifindex: Option<u32>,
}

/// The link `id`'s program and device; None when the link no longer exists.
pub fn link_target(id: u32) -> Option<LinkTarget> {
    // bpf_attr: link_id (u32), next_id (u32), open_flags (u32).
    let mut attr = [id, 0, 0, 0];
    // SAFETY: a zero-padded bpf_attr prefix for BPF_LINK_GET_FD_BY_ID, of the size given.
    let fd = unsafe { crate::bpf_sys::bpf(BPF_LINK_GET_FD_BY_ID, &mut attr) }.ok()? as i32;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap_or_default();
    // SAFETY: fd was returned to us by the kernel and is closed once.
    unsafe { libc::close(fd) };
    parse_fdinfo(&info)
}

/// The program id and device of a link's fdinfo text.
fn parse_fdinfo(info: &str) -> Option<LinkTarget> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u32>().ok())
    };
    Some(LinkTarget {
        prog_id: field("prog_id:")?,
        ifindex: field("ifindex:"),
    })
}

/// Every BPF link on the host, by id.
fn all_links() -> BTreeMap<u32, LinkTarget> {
    let mut out = BTreeMap::new();
    let mut start = 0u32;
    loop {
        // bpf_attr: start_id (u32), next_id (u32), open_flags (u32).
        let mut attr = [start, 0, 0, 0];
        // SAFETY: a zero-padded bpf_attr prefix for BPF_LINK_GET_NEXT_ID, of the size given.
        if unsafe { crate::bpf_sys::bpf(BPF_LINK_GET_NEXT_ID, &mut attr) }.is_err() {
            break;
        }
        let id = attr[1];
        if let Some(t) = link_target(id) {
            out.insert(id, t);
        }
        start = id;
    }
    out
}

/// The links that attach one of `prog_ids` to device `ifindex` (programs attached without a
/// link, through netlink on kernels before 5.9, have none: they go unchecked).
pub fn links_of(prog_ids: &[u32], ifindex: u32) -> Vec<u32> {
    all_links()
        .into_iter()
        .filter(|(_, t)| prog_ids.contains(&t.prog_id) && t.ifindex == Some(ifindex))
        .map(|(id, _)| id)
        .collect()
}

/// The first of `links` that no longer attaches its program to `ifindex` (gone, or its
/// device gone).
pub fn first_lost(links: &[u32], ifindex: u32) -> Option<u32> {
    links
        .iter()
        .copied()
        .find(|id| link_target(*id).is_none_or(|t| t.ifindex != Some(ifindex)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_xdp_link_fdinfo_gives_its_program_and_device() {
        let info = "pos:\t0\nflags:\t02000000\nmnt_id:\t15\nino:\t1057\nlink_type:\txdp\nlink_id:\t7\nprog_tag:\t0123456789abcdef\nprog_id:\t42\nifindex:\t3\n";
        assert_eq!(
            parse_fdinfo(info),
            Some(LinkTarget {
                prog_id: 42,
                ifindex: Some(3)
            })
        );
    }

    #[test]
    fn a_link_whose_device_went_away_reads_index_0() {
        let info = "link_type:\ttcx\nlink_id:\t9\nprog_id:\t43\nifindex:\t0\nattach_type:\t46\n";
        assert_eq!(parse_fdinfo(info).unwrap().ifindex, Some(0));
    }

    #[test]
    fn a_link_without_a_device_has_none() {
        let info = "link_type:\ttracing\nlink_id:\t2\nprog_id:\t5\n";
        assert_eq!(parse_fdinfo(info).unwrap().ifindex, None);
    }
}
