//! The exporter against collectors on loopback: templates first, sequence numbers, template
//! refresh, a collector that is gone and comes back (UDP and TCP), a bounded queue.
use super::message::tests::record;
use super::*;
use crate::config::ipfix::{DEFAULT_ENTERPRISE, DEFAULT_MAX_MESSAGE_BYTES};
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::time::Instant;

fn records(n: u32) -> Vec<FlowRecord> {
    (0..n).map(|i| record(i, false)).collect()
}

fn settings(dest: Destination, refresh: Duration, queue: usize) -> IpfixSettings {
    IpfixSettings {
        destinations: vec![dest],
        observation_domain: 9,
        enterprise: DEFAULT_ENTERPRISE,
        active_timeout: Duration::from_secs(60),
        template_refresh: refresh,
        max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        queue_records: queue,
    }
}

/// A message as a collector reads it: sequence number, whether it opens with templates, and
/// the data records it holds.
#[derive(Debug, PartialEq)]
struct Seen {
    seq: u32,
    templates: bool,
    records: usize,
}

fn seen(m: &[u8]) -> Seen {
    let u16_at = |at: usize| u16::from_be_bytes([m[at], m[at + 1]]);
    assert_eq!(u16_at(0), 10);
    assert_eq!(u16_at(2) as usize, m.len());
    let seq = u32::from_be_bytes([m[8], m[9], m[10], m[11]]);
    let mut at = message::HEADER_LEN;
    let (mut templates, mut records) = (false, 0);
    while at < m.len() {
        let (id, len) = (u16_at(at), u16_at(at + 2) as usize);
        if id == 2 {
            templates |= records == 0;
        } else {
            records += (len - 4) / elements::record_len(id == elements::TEMPLATE_IPV6);
        }
        at += len;
    }
    Seen {
        seq,
        templates,
        records,
    }
}

/// Waits until the thread has taken every queued record.
fn drained(x: &Exporter) {
    wait_for("the queue to drain", || x.queued() == 0);
}

fn udp_collector() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

fn recv(s: &UdpSocket) -> Seen {
    let mut buf = [0u8; 65_536];
    let n = s.recv(&mut buf).expect("a message within 20 s");
    seen(&buf[..n])
}

/// Waits (up to a minute) for `f` to hold.
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "waited for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn udp_templates_come_first_and_sequence_numbers_count_records() {
    let c = udp_collector();
    let x = Exporter::start(
        &settings(
            Destination::Udp(c.local_addr().unwrap()),
            Duration::from_secs(600),
            1000,
        ),
        vec![2],
    )
    .unwrap();
    let sink = x.sink();
    (sink.0)(records(20));
    (sink.0)(records(3));
    let mut got = Vec::new();
    while got.iter().map(|s: &Seen| s.records).sum::<usize>() < 23 {
        got.push(recv(&c));
    }
    assert!(got[0].templates, "{got:?}");
    assert!(got[1..].iter().all(|s| !s.templates), "{got:?}");
    let mut seq = 0;
    for s in &got {
        assert_eq!(s.seq, seq, "{got:?}");
        seq += s.records as u32;
    }
    assert!(
        got.len() >= 3,
        "20 records of 169 bytes take several messages"
    );
    // The exporter counts a message once its send returned, which may be after the
    // collector read it: the count catches up.
    wait_for("the 23 records to be counted as sent", || {
        x.collectors[0].1.sent.load(Relaxed) == 23
    });
    x.finish();
}

#[test]
fn udp_templates_are_refreshed_while_records_are_quiet() {
    let c = udp_collector();
    let x = Exporter::start(
        &settings(
            Destination::Udp(c.local_addr().unwrap()),
            Duration::from_millis(300),
            1000,
        ),
        vec![2],
    )
    .unwrap();
    (x.sink().0)(records(1));
    let first = recv(&c);
    assert!(first.templates && first.records == 1);
    // No more records: the thread's idle turn sends the templates again, sequence unchanged.
    let again = recv(&c);
    assert_eq!(
        again,
        Seen {
            seq: 1,
            templates: true,
            records: 0
        }
    );
    x.finish();
}

#[test]
fn a_udp_collector_that_comes_back_gets_the_templates_first() {
    // A port with nobody behind it: the kernel answers port unreachable, the next send fails.
    let gone = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = gone.local_addr().unwrap();
    drop(gone);
    let x = Exporter::start(
        &settings(Destination::Udp(addr), Duration::from_secs(600), 1000),
        vec![2],
    )
    .unwrap();
    let sink = x.sink();
    let counts = x.collectors[0].1.clone();
    // One batch at a time, each sent before the next: the last one sent is the one failed.
    wait_for("a failed send", || {
        (sink.0)(records(1));
        drained(&x);
        counts.send_failed.load(Relaxed) > 0
    });
    let c = UdpSocket::bind(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    (sink.0)(records(2));
    let back = recv(&c);
    assert!(back.templates, "{back:?}");
    assert_eq!(back.records, 2);
    x.finish();
}

/// Reads IPFIX messages from a TCP stream (framed by their length field).
fn tcp_messages(s: &mut std::net::TcpStream, want_records: usize) -> Vec<Seen> {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got: Vec<Seen> = Vec::new();
    while got.iter().map(|m| m.records).sum::<usize>() < want_records {
        let mut head = [0u8; 4];
        s.read_exact(&mut head).expect("a message header");
        let len = u16::from_be_bytes([head[2], head[3]]) as usize;
        let mut m = head.to_vec();
        m.resize(len, 0);
        s.read_exact(&mut m[4..]).expect("the message");
        got.push(seen(&m));
    }
    got
}

#[test]
fn tcp_is_a_session_per_connection_with_the_templates_first() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let x = Exporter::start(
        &settings(Destination::Tcp(addr), Duration::from_secs(600), 1000),
        vec![2],
    )
    .unwrap();
    let sink = x.sink();
    (sink.0)(records(12));
    let (mut s, _) = listener.accept().unwrap();
    let got = tcp_messages(&mut s, 12);
    assert!(got[0].templates);
    assert_eq!(got.iter().map(|m| m.records).sum::<usize>(), 12);
    // The collector goes away; records meanwhile are lost and counted.
    drop(s);
    drop(listener);
    let counts = x.collectors[0].1.clone();
    wait_for("the session to end", || {
        (sink.0)(records(1));
        drained(&x);
        counts.send_failed.load(Relaxed) + counts.collector_down.load(Relaxed) > 0
    });
    // It comes back on the same port: a new session, sequence from 0, templates first.
    let listener = TcpListener::bind(addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let mut s = None;
    wait_for("the reconnect", || {
        (sink.0)(records(1));
        match listener.accept() {
            Ok((c, _)) => {
                s = Some(c);
                true
            }
            Err(_) => {
                std::thread::sleep(Duration::from_millis(100));
                false
            }
        }
    });
    let mut s = s.unwrap();
    s.set_nonblocking(false).unwrap();
    let got = tcp_messages(&mut s, 1);
    assert!(got[0].templates, "{got:?}");
    assert_eq!(got[0].seq, 0);
    x.finish();
}

#[test]
fn a_full_queue_drops_and_counts_instead_of_waiting() {
    let c = udp_collector();
    let x = Exporter::start(
        &settings(
            Destination::Udp(c.local_addr().unwrap()),
            Duration::from_secs(600),
            10,
        ),
        vec![2],
    )
    .unwrap();
    // 11 records into a queue of 10: the 10 that fit go, the eleventh is dropped, counted.
    (x.sink().0)(records(11));
    assert_eq!(x.collectors[0].1.queue_full.load(Relaxed), 1);
    drained(&x);
    wait_for("the 10 records sent", || {
        x.collectors[0].1.sent.load(Relaxed) == 10
    });
    x.finish();
}

#[test]
fn a_file_holds_the_templates_then_every_record() {
    let dir = rocemon_testkit::TempDir::new("rocemon-ipfix-file").unwrap();
    let path = dir.path().join("out.ipfix");
    let x = Exporter::start(
        &settings(
            Destination::File(path.clone()),
            Duration::from_secs(600),
            1000,
        ),
        vec![0],
    )
    .unwrap();
    let sink = x.waiting_sink();
    (sink.0)(records(30));
    (sink.0)(records(5));
    x.finish();
    let bytes = std::fs::read(&path).unwrap();
    let mut at = 0;
    let mut got = Vec::new();
    while at < bytes.len() {
        let len = u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]) as usize;
        got.push(seen(&bytes[at..at + len]));
        at += len;
    }
    assert!(got[0].templates);
    assert_eq!(got.iter().map(|m| m.records).sum::<usize>(), 35);
    assert_eq!(got.iter().filter(|m| m.templates).count(), 1);
}
