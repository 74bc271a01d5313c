//! Network namespaces and veth pairs for tests: unique names, cleanup on every exit path.

use anyhow::{bail, Context, Result};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

pub use crate::ecmp_lab::EcmpLab;
pub use crate::metrics::{metric_labels, metric_sum, metric_value, try_metric_sum};

/// Runs a command, failing with its stderr when it exits non-zero.
pub fn run(cmd: &str, args: &[&str]) -> Result<Output> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .with_context(|| format!("run {cmd}"))?;
    if !out.status.success() {
        // Tools in JSON mode (bpftool -j) print their error on stdout.
        bail!(
            "{cmd} {} failed: {} {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(out)
}

/// Whether a namespace end-to-end test can run here: root (else it says why and skips, or
/// fails under ROCEMON_REQUIRE_PRIVILEGED) and tcpreplay installed (else it fails, naming the
/// fix).
pub fn can_run_e2e() -> bool {
    if !crate::require_root("a namespace end-to-end test (ip netns, BPF)") {
        return false;
    }
    if run("tcpreplay", &["--version"]).is_err() {
        panic!("tcpreplay is not installed; run `cargo xtask setup`");
    }
    true
}

/// A unique short tag for this process and call (interface names are at most 15 bytes).
pub fn unique_tag() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{:x}{:x}", std::process::id() % 0xFFFF, n)
}

/// Two namespaces joined by a veth pair: `a` (where rocemon watches `a_if`) and `b`
/// (where traffic is sent from `b_if`). Deleted on drop.
pub struct VethPair {
    pub ns_a: String,
    pub ns_b: String,
    pub a_if: String,
    pub b_if: String,
    pub a_ip: String,
    pub b_ip: String,
}

impl VethPair {
    /// Creates the pair with single-queue veths (see [`VethPair::with_queues`]), addresses 10.77.0.1/24 and 10.77.0.2/24,
    /// fd77::1/64 and fd77::2/64.
    pub fn new(prefix: &str) -> Result<VethPair> {
        VethPair::with_queues(prefix, 1)
    }

    /// As [`VethPair::new`], with `queues` receive and transmit queues on each end.
    pub fn with_queues(prefix: &str, queues: u32) -> Result<VethPair> {
        let tag = unique_tag();
        let p = VethPair {
            ns_a: format!("{prefix}-a-{tag}"),
            ns_b: format!("{prefix}-b-{tag}"),
            a_if: format!("rva{tag}"),
            b_if: format!("rvb{tag}"),
            a_ip: "10.77.0.1".into(),
            b_ip: "10.77.0.2".into(),
        };
        // From here on, Drop removes whatever was created.
        run("ip", &["netns", "add", &p.ns_a])?;
        run("ip", &["netns", "add", &p.ns_b])?;
        p.create_link(queues)?;
        Ok(p)
    }

    /// Creates the veth pair between the two namespaces (again, after [`VethPair::delete_link`]:
    /// the same names, new interface indexes), with addresses and a jumbo MTU, up.
    pub fn create_link(&self, queues: u32) -> Result<()> {
        self.create_link_indexed(queues, None)
    }

    /// As [`VethPair::create_link`], with the A end given interface index `index` (a device
    /// re-created under its old index).
    pub fn create_link_indexed(&self, queues: u32, index: Option<u32>) -> Result<()> {
        let q = queues.to_string();
        let index = index.map(|i| i.to_string());
        let index_args: Vec<&str> = match &index {
            Some(i) => vec!["index", i.as_str()],
            None => vec![],
        };
        let mut args = vec!["link", "add", self.a_if.as_str()];
        args.extend(index_args);
        run(
            "ip",
            &[
                &args[..],
                &[
                    "netns",
                    &self.ns_a,
                    "numrxqueues",
                    &q,
                    "numtxqueues",
                    &q,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &self.b_if,
                    "netns",
                    &self.ns_b,
                    "numrxqueues",
                    &q,
                    "numtxqueues",
                    &q,
                ],
            ]
            .concat(),
        )?;
        for (ns, ifn, v4, v6) in [
            (&self.ns_a, &self.a_if, "10.77.0.1/24", "fd77::1/64"),
            (&self.ns_b, &self.b_if, "10.77.0.2/24", "fd77::2/64"),
        ] {
            run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
            run("ip", &["-n", ns, "addr", "add", v4, "dev", ifn])?;
            run("ip", &["-n", ns, "addr", "add", v6, "dev", ifn, "nodad"])?;
            // Jumbo MTU: RoCE runs with 2-4 KiB IB MTUs.
            run("ip", &["-n", ns, "link", "set", ifn, "mtu", "9000", "up"])?;
        }
        Ok(())
    }

    /// Deletes the veth pair (both ends), as a driver reset or hot-unplug would.
    pub fn delete_link(&self) -> Result<()> {
        run("ip", &["-n", &self.ns_a, "link", "del", &self.a_if])?;
        Ok(())
    }

    /// Switches IPv6 off in both namespaces: their own (MLD reports carry a hop-by-hop
    /// header, which the fast path hands to the slow program) would add frames to a test's
    /// counts that are not its own.
    pub fn without_ipv6(&self) -> Result<()> {
        for (n, i) in [(&self.ns_a, &self.a_if), (&self.ns_b, &self.b_if)] {
            for key in [
                "net.ipv6.conf.all.disable_ipv6=1".to_string(),
                format!("net.ipv6.conf.{i}.disable_ipv6=1"),
            ] {
                run("ip", &["netns", "exec", n, "sysctl", "-qw", &key])?;
            }
        }
        Ok(())
    }

    /// Runs a command inside namespace `ns`.
    pub fn exec(&self, ns: &str, cmd: &str, args: &[&str]) -> Result<Output> {
        let mut full = vec!["netns", "exec", ns, cmd];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Replays a capture out of `b_if` (towards `a_if`) at full speed with tcpreplay.
    pub fn replay_from_b(&self, pcap: &std::path::Path) -> Result<()> {
        self.tcpreplay(pcap, &["--topspeed"])
    }

    /// Replays a capture out of `b_if` at the pace of its timestamps (the live agent's
    /// clock then sees the capture's gaps: pause intervals, steps).
    pub fn replay_timed_from_b(&self, pcap: &std::path::Path) -> Result<()> {
        self.tcpreplay(pcap, &[])
    }

    /// Replays a capture out of `b_if` at `pps` packets per second (an AF_XDP ring of a few
    /// thousand frames on a loaded machine: a drop then means a fault, not a busy host).
    pub fn replay_at_from_b(&self, pcap: &std::path::Path, pps: u32) -> Result<()> {
        self.tcpreplay(pcap, &["--pps", &pps.to_string()])
    }

    /// tcpreplay of `pcap` out of `b_if` with the pace options `pace`.
    fn tcpreplay(&self, pcap: &std::path::Path, pace: &[&str]) -> Result<()> {
        let path = pcap.to_str().context("capture path is not UTF-8")?;
        let mut args = vec!["-q"];
        args.extend_from_slice(pace);
        args.extend_from_slice(&["-i", &self.b_if, path]);
        self.exec(&self.ns_b, "tcpreplay", &args)?;
        Ok(())
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end inside it, and so the pair.
        for ns in [&self.ns_a, &self.ns_b] {
            let _ = Command::new("ip").args(["netns", "delete", ns]).output();
        }
    }
}

/// `GET path` at `addr` from inside namespace `ns` (HTTP/1.0, one connection): (status, body).
pub fn http_get_in(ns: &str, addr: &str, path: &str) -> Result<(u16, String)> {
    http_request_in(ns, None, addr, path, &[])
}

/// [`http_get_in`] from source address `from` (any of 127.0.0.0/8 on loopback: another
/// client), with extra request headers.
pub fn http_request_in(
    ns: &str,
    from: Option<std::net::Ipv4Addr>,
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, String)> {
    let (ns, addr, path) = (ns.to_string(), addr.to_string(), path.to_string());
    let headers: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    std::thread::spawn(move || -> Result<(u16, String)> {
        use std::io::{Read, Write};
        enter_netns(&ns)?;
        let mut s = connect_from(from, &addr)?;
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
        // HTTP/1.0: the answer comes whole (no chunked encoding) and the server closes.
        write!(
            s,
            "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n{headers}\r\n"
        )?;
        let mut buf = String::new();
        s.read_to_string(&mut buf)?;
        let status = buf
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .context("no HTTP status")?;
        let body = buf
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("scrape thread panicked"))?
}

/// Moves the calling thread into namespace `ns`.
pub fn enter_netns(ns: &str) -> Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(format!("/var/run/netns/{ns}"))
        .with_context(|| format!("open netns {ns}"))?;
    // SAFETY: a valid namespace fd; setns changes only this thread's namespace.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!("setns {ns}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// A TCP connection to `addr` (IPv4), from source address `from` when given.
fn connect_from(from: Option<std::net::Ipv4Addr>, addr: &str) -> Result<std::net::TcpStream> {
    use std::os::fd::FromRawFd;
    let Some(src) = from else {
        return std::net::TcpStream::connect(addr).with_context(|| format!("connect {addr}"));
    };
    let dst: std::net::SocketAddrV4 = addr.parse().context("an IPv4 address:port")?;
    let sin = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor we own; the addresses live on the stack for
    // the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            bail!("socket: {}", std::io::Error::last_os_error());
        }
        let stream = std::net::TcpStream::from_raw_fd(fd);
        let local = sin(src, 0);
        if libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len) != 0 {
            bail!("bind {src}: {}", std::io::Error::last_os_error());
        }
        let remote = sin(*dst.ip(), dst.port());
        if libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len) != 0 {
            bail!(
                "connect {addr} from {src}: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(stream)
    }
}

/// `rocemon run` flags for one watched interface, unpinned, serving on `addr`, polling every
/// `poll_ms` (more flags are appended by the caller).
pub fn run_args<'a>(iface: &'a str, addr: &'a str, poll_ms: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "--no-pin",
        "--iface",
        iface,
        "--listen",
        addr,
        "--poll-interval-ms",
        poll_ms,
    ]
}

/// A child process (rocemon) inside a namespace, stopped with SIGTERM on drop.
pub struct Agent {
    child: Option<std::process::Child>,
    /// Its output, read as it comes (an agent that logs more than a pipe holds would block
    /// in its write, stop serving, and never exit).
    output: crate::child_output::ChildOutput,
}

impl Agent {
    pub fn start(ns: &str, bin: &str, args: &[&str]) -> Result<Agent> {
        let child = Command::new("ip")
            .args(["netns", "exec", ns, bin])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("start rocemon")?;
        let mut child = child;
        let output = crate::child_output::ChildOutput::read(&mut child);
        Ok(Agent {
            child: Some(child),
            output,
        })
    }

    /// Waits for the output readers (the process has exited) and returns its stderr.
    fn drained_log(&mut self) -> String {
        self.output.finish()
    }

    /// rocemon as an sFlow collector in namespace `ns` only (no interface): sFlow on
    /// 127.0.0.1:6343, serving on `addr`, polling every `poll_ms`, nothing pinned.
    pub fn sflow_collector(ns: &str, bin: &str, addr: &str, poll_ms: &str) -> Result<Agent> {
        Agent::sflow_collector_with(ns, bin, addr, poll_ms, &[])
    }

    /// [`Agent::sflow_collector`] with `extra` flags (a `--config`, say).
    pub fn sflow_collector_with(
        ns: &str,
        bin: &str,
        addr: &str,
        poll_ms: &str,
        extra: &[&str],
    ) -> Result<Agent> {
        let mut args = vec![
            "run",
            "--sflow-listen",
            "127.0.0.1",
            "--listen",
            addr,
            "--poll-interval-ms",
            poll_ms,
            "--no-pin",
        ];
        args.extend_from_slice(extra);
        Agent::start(ns, bin, &args)
    }

    /// rocemon on the loopback of namespace `ns` (tc ingress, 100 ms polls, listening on
    /// `addr`), with `extra` flags: a host of its own for the HTTP tests and benchmarks.
    pub fn on_loopback(ns: &str, bin: &str, addr: &str, extra: &[&str]) -> Result<Agent> {
        let mut args = vec![
            "run",
            "--iface",
            "lo",
            "--hooks",
            "tc-ingress",
            "--poll-interval-ms",
            "100",
            "--listen",
            addr,
        ];
        args.extend_from_slice(extra);
        Agent::start(ns, bin, &args)
    }

    /// rocemon on interface `iface` of namespace `ns` with `hooks` (100 ms polls, no pins,
    /// listening on `addr`) and `extra` flags, once it serves `/metrics`: the agent of a veth
    /// test.
    pub fn on_iface(
        ns: &str,
        bin: &str,
        (iface, hooks): (&str, &str),
        addr: &str,
        extra: &[&str],
    ) -> Result<Agent> {
        let mut args = vec![
            "run",
            "--iface",
            iface,
            "--hooks",
            hooks,
            "--no-pin",
            "--poll-interval-ms",
            "100",
            "--listen",
            addr,
        ];
        args.extend_from_slice(extra);
        let mut agent = Agent::start(ns, bin, &args)?;
        agent.wait_ready(ns, addr)?;
        Ok(agent)
    }

    /// Waits until the agent serves `/metrics` at `addr` inside `ns` (30 s at most).
    pub fn wait_ready(&mut self, ns: &str, addr: &str) -> Result<String> {
        self.wait_metrics(ns, addr, std::time::Duration::from_secs(30), |_| true)
    }

    /// Waits until `GET /metrics` answers 200 at `addr` inside `ns` with a body that `ready`
    /// accepts; fails when the agent exits first or `timeout` passes. Returns the body.
    pub fn wait_metrics(
        &mut self,
        ns: &str,
        addr: &str,
        timeout: std::time::Duration,
        ready: impl Fn(&str) -> bool,
    ) -> Result<String> {
        let t = std::time::Instant::now();
        loop {
            if let Ok((200, body)) = http_get_in(ns, addr, "/metrics") {
                if ready(&body) {
                    return Ok(body);
                }
            }
            if let Some(st) = self.try_wait() {
                bail!("rocemon exited early with {st}: {}", self.exited_log());
            }
            if t.elapsed() > timeout {
                bail!("rocemon did not serve the expected /metrics within {timeout:?}");
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// The agent's process id (`ip netns exec` execs the binary in place).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The ids of the BPF links this agent holds open (from its descriptors' fdinfo): its own
    /// attachments, whatever other tests attach meanwhile.
    pub fn link_ids(&self) -> Result<Vec<u64>> {
        let pid = self.pid().context("agent stopped")?;
        let mut ids = Vec::new();
        for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))?.flatten() {
            let info = std::fs::read_to_string(e.path()).unwrap_or_default();
            if let Some(id) = info
                .lines()
                .find_map(|l| l.strip_prefix("link_id:"))
                .and_then(|v| v.trim().parse().ok())
            {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// Sends a signal (SIGHUP: reload) to the agent.
    pub fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, sig) };
        }
    }

    /// Whether the process has exited (and its status).
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// What an exited agent wrote to stderr (its error names the cause).
    fn exited_log(&mut self) -> String {
        self.drained_log()
    }

    /// Sends SIGTERM and waits; returns the exit status and stderr.
    pub fn stop(mut self) -> Result<(std::process::ExitStatus, String)> {
        let mut child = self.child.take().context("agent already stopped")?;
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = child.wait()?;
        Ok((status, self.drained_log()))
    }

    /// Stops the agent ([`Agent::stop`]) and asserts that it exited cleanly (status 0, its
    /// log in the message); returns its log.
    #[track_caller]
    pub fn stop_ok(self) -> String {
        let (status, log) = self.stop().expect("stop the agent");
        assert!(status.success(), "agent exit {status}: {log}");
        log
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: signalling our own child; harmless if it already exited.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            // Its output is read as it comes, so the wait returns however much it logged.
            let _ = c.wait();
            self.drained_log();
        }
    }
}

/// A namespace with only loopback up (a test host of its own), deleted on drop.
pub struct LoopNs(pub String);

impl LoopNs {
    pub fn new(prefix: &str) -> Result<LoopNs> {
        let name = format!("{prefix}-{}", unique_tag());
        run("ip", &["netns", "add", &name])?;
        // From here on, Drop removes it.
        let ns = LoopNs(name);
        run("ip", &["-n", &ns.0, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Runs `bin args` inside the namespace and returns its output (whatever its status).
    pub fn output(&self, bin: &str, args: &[&str]) -> Result<Output> {
        Command::new("ip")
            .args(["netns", "exec", &self.0, bin])
            .args(args)
            .output()
            .context("ip netns exec")
    }
}

impl Drop for LoopNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.0])
            .output();
    }
}

pub use crate::bpffs::BpfFs;

/// A TCP connection to `addr` opened from inside namespace `ns` (a thread joins the namespace
/// to connect; the socket stays in it).
pub fn connect_in(ns: &str, addr: &str) -> Result<std::net::TcpStream> {
    connect_from_in(ns, None, addr)
}

/// [`connect_in`] from source address `from` (another client on loopback).
pub fn connect_from_in(
    ns: &str,
    from: Option<std::net::Ipv4Addr>,
    addr: &str,
) -> Result<std::net::TcpStream> {
    let (ns, addr) = (ns.to_string(), addr.to_string());
    std::thread::spawn(move || -> Result<std::net::TcpStream> {
        enter_netns(&ns)?;
        connect_from(from, &addr)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("connect thread panicked"))?
}

/// Sends `datagrams` over UDP to `addr` from inside namespace `ns` (a thread joins the
/// namespace; the socket lives there), one after another.
pub fn udp_send_in(ns: &str, addr: &str, datagrams: &[Vec<u8>]) -> Result<()> {
    let (ns, addr, datagrams) = (ns.to_string(), addr.to_string(), datagrams.to_vec());
    std::thread::spawn(move || -> Result<()> {
        enter_netns(&ns)?;
        let s = std::net::UdpSocket::bind("127.0.0.1:0")?;
        for d in &datagrams {
            s.send_to(d, &addr)?;
        }
        Ok(())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("send thread panicked"))?
}
