//! `rocemon analyze` on what real captures come as: files, directories, FIFOs, standard input,
//! gzip, zstd and xz streams, several files as one capture, corrupt blocks and streams, pipes
//! that close early: the same report as the plain file, or a clear error with the counts so far.

use rocemon_testkit::{fixtures, TempDir};
use serde_json::Value;
use std::process::Command;

/// `rocemon analyze --format json FILE`, which must succeed.
fn analyze_json(path: &std::path::Path) -> Value {
    rocemon_testkit::analyze_json(env!("CARGO_BIN_EXE_rocemon"), &[], &[path])
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn analyze_err(path: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .args(["analyze", "--format", "json"])
        .arg(path)
        .output()
        .expect("run rocemon");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A corrupt pcapng block is named in words, not printed as its bytes (the reader's error
/// carries the buffer: it was a 4.8 MB line).
#[test]
fn a_corrupt_pcapng_block_gives_a_short_message() {
    let dir = TempDir::new("rocemon-corrupt").unwrap();
    let good = fixtures::mixed_ipv6_vlan().write(dir.path()).unwrap();
    let mut bytes = std::fs::read(&good).unwrap();
    // A section header block, then an interface description block whose length fields say
    // 64 KiB of garbage follows: the block cannot parse.
    let shb_len = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    let at = shb_len;
    bytes[at + 4..at + 8].copy_from_slice(&3u32.to_le_bytes()); // length not a multiple of 4
    bytes.extend(std::iter::repeat_n(0xAB, 1 << 20));
    let bad = dir.path().join("corrupt.pcapng");
    std::fs::write(&bad, &bytes).unwrap();
    let (code, err) = analyze_err(&bad);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("corrupt capture"), "{err}");
    assert!(
        err.len() < 500,
        "a {}-byte message: {}",
        err.len(),
        &err[..200.min(err.len())]
    );
}

#[test]
fn a_directory_is_named_as_such() {
    let dir = TempDir::new("rocemon-dir").unwrap();
    let (code, err) = analyze_err(dir.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("it is a directory"), "{err}");
}

/// A FIFO with no writer: rocemon says what it waits for, and reads once a writer comes.
#[test]
fn a_fifo_says_it_waits_for_a_writer() {
    let dir = TempDir::new("rocemon-fifo").unwrap();
    let fifo = dir.path().join("capture.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut child = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .args(["analyze", "--format", "json"])
        .arg(&fifo)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its standard error, line by line, as it comes.
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    // The writer comes once rocemon said it waits for one: the rc_ipv4 fixture.
    let src = fixtures::rc_ipv4().write(dir.path()).unwrap();
    loop {
        let said = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("rocemon never said it waits for a writer");
        if said.contains("waiting for a writer") {
            break;
        }
    }
    std::fs::write(&fifo, std::fs::read(&src).unwrap()).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = reader.join().unwrap();
    assert!(out.status.success(), "{err}");
    let j = report(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(j, analyze_json(&src));
}

/// `rocemon analyze [args] INPUTS...` with `stdin` as its standard input: (exit code, stdout,
/// stderr).
fn analyze_io(args: &[&str], stdin: Option<Vec<u8>>) -> (Option<i32>, String, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .arg("analyze")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run rocemon");
    let mut pipe = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        if let Some(data) = stdin {
            let _ = pipe.write_all(&data);
        }
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The JSON report of an output, without the inputs' names (they differ between equal reads;
/// `the_json_names_its_schema_version_and_inputs` checks them).
fn report(out: &str) -> Value {
    let mut j: Value = serde_json::from_str(out).expect("JSON output");
    if let Some(o) = j.as_object_mut() {
        o.remove("inputs");
    }
    j
}

fn many_flows_file(dir: &std::path::Path) -> (std::path::PathBuf, Value) {
    let p = fixtures::many_flows().write(dir).unwrap();
    let j = analyze_json(&p);
    (p, j)
}

#[test]
fn standard_input_gives_the_same_report() {
    let dir = TempDir::new("rocemon-stdin").unwrap();
    let (p, want) = many_flows_file(dir.path());
    let (code, out, err) = analyze_io(&["--format", "json", "-"], Some(std::fs::read(&p).unwrap()));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(report(&out), want);
}

fn compressed_gives_the_same_report(ext: &str, compress: fn(&[u8]) -> Vec<u8>) {
    let dir = TempDir::new("rocemon-z").unwrap();
    let (p, want) = many_flows_file(dir.path());
    let z = dir.path().join(format!("capture.pcap.{ext}"));
    std::fs::write(&z, compress(&std::fs::read(&p).unwrap())).unwrap();
    assert_eq!(analyze_json(&z), want, "{ext} file");
    // Compressed through standard input too.
    let (code, out, err) = analyze_io(&["--format", "json", "-"], Some(std::fs::read(&z).unwrap()));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(report(&out), want, "{ext} on stdin");
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn gzip_gives_the_same_report() {
    compressed_gives_the_same_report("gz", gzip);
}

#[test]
fn zstd_gives_the_same_report() {
    compressed_gives_the_same_report("zst", |d| zstd::encode_all(d, 3).unwrap());
}

#[test]
fn xz_gives_the_same_report() {
    compressed_gives_the_same_report("xz", |d| {
        use std::io::Write;
        let mut e = liblzma::write::XzEncoder::new(Vec::new(), 6);
        e.write_all(d).unwrap();
        e.finish().unwrap()
    });
}

/// Several files are one capture in timestamp order: the fixture's records dealt alternately
/// into a pcap and a pcapng file give the report of the whole.
#[test]
fn several_files_are_one_capture_in_timestamp_order() {
    use rocemon_testkit::fixtures::{whole, Format};
    let dir = TempDir::new("rocemon-multi").unwrap();
    let fx = fixtures::many_flows();
    let want = analyze_json(&fx.write(dir.path()).unwrap());
    let (mut odd, mut even) = (Vec::new(), Vec::new());
    for (i, (t, _, data)) in fx.records().enumerate() {
        if i % 3 == 0 { &mut odd } else { &mut even }.push((t, data));
    }
    let a_dir = dir.path().join("a");
    let b_dir = dir.path().join("b");
    std::fs::create_dir_all(&a_dir).unwrap();
    std::fs::create_dir_all(&b_dir).unwrap();
    let a = whole("part_a", Format::PcapNanos, odd, true)
        .write(&a_dir)
        .unwrap();
    let b = whole("part_b", Format::PcapNg, even, true)
        .write(&b_dir)
        .unwrap();
    let (code, out, err) = analyze_io(
        &["--format", "json", b.to_str().unwrap(), a.to_str().unwrap()],
        None,
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(report(&out), want);
}

/// A corrupt compressed stream: exit 2, the compression and the decoder's words named, and
/// the report of every record before the damage.
#[test]
fn a_corrupt_compressed_stream_is_an_error_with_the_counts_so_far() {
    let dir = TempDir::new("rocemon-zbad").unwrap();
    let (p, want) = many_flows_file(dir.path());
    let z = gzip(&std::fs::read(&p).unwrap());
    let cut = dir.path().join("cut.pcap.gz");
    std::fs::write(&cut, &z[..z.len() / 2]).unwrap();
    let (code, out, err) = analyze_io(&["--format", "json", cut.to_str().unwrap()], None);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("corrupt gzip stream"), "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    let frames = u(&j["frames"]);
    assert!(frames > 0 && frames < u(&want["frames"]), "{frames}");
}

/// A pipe that closes inside a record (its writer died): exit 2 with the counts so far.
#[test]
fn a_pipe_that_closes_early_is_an_error_with_the_counts_so_far() {
    let dir = TempDir::new("rocemon-pipecut").unwrap();
    let (p, want) = many_flows_file(dir.path());
    let bytes = std::fs::read(&p).unwrap();
    let (code, out, err) = analyze_io(
        &["--format", "json", "-"],
        Some(bytes[..bytes.len() / 2 + 7].to_vec()),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("closed inside a record"), "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert!(u(&j["frames"]) > 0 && u(&j["frames"]) < u(&want["frames"]));
}

/// CRC-32 (IEEE), as xz's block headers carry it.
fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// `data` as an xz stream whose (only) block header asks for an LZMA2 dictionary of
/// `dict_code` (xz's one-byte encoding: 40 is 4 GiB - 1), its CRC made right again.
fn xz_with_dictionary(data: &[u8], dict_code: u8) -> Vec<u8> {
    use std::io::Write;
    let mut e = liblzma::write::XzEncoder::new(Vec::new(), 0);
    e.write_all(data).unwrap();
    let mut xz = e.finish().unwrap();
    // Stream header (12 bytes), then the block header: its size byte, its flags, the
    // optional compressed and uncompressed sizes (variable-length integers), then the filter
    // flags: LZMA2 (0x21), one byte of properties, the dictionary code.
    let start = 12;
    let header_len = (usize::from(xz[start]) + 1) * 4;
    let flags = xz[start + 1];
    let mut at = start + 2;
    let vli = |at: &mut usize, xz: &[u8]| {
        while xz[*at] & 0x80 != 0 {
            *at += 1;
        }
        *at += 1;
    };
    if flags & 0x40 != 0 {
        vli(&mut at, &xz);
    }
    if flags & 0x80 != 0 {
        vli(&mut at, &xz);
    }
    assert_eq!(&xz[at..at + 2], &[0x21, 0x01], "one LZMA2 filter");
    xz[at + 2] = dict_code;
    let crc_at = start + header_len - 4;
    let crc = crc32(&xz[start..crc_at]);
    xz[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    xz
}

/// An xz stream that asks for a 4 GiB dictionary is refused before it takes the memory
/// (liblzma's memlimit): exit 2, the bound named, and what to do if the file is genuine.
#[test]
fn an_xz_stream_that_asks_for_gigabytes_is_refused() {
    let dir = TempDir::new("rocemon-xzbomb").unwrap();
    let (p, _) = many_flows_file(dir.path());
    let bomb = dir.path().join("bomb.pcap.xz");
    std::fs::write(&bomb, xz_with_dictionary(&std::fs::read(&p).unwrap(), 40)).unwrap();
    let (code, err) = analyze_err(&bomb);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("xz stream refused"), "{err}");
    assert!(err.contains("256 MiB"), "{err}");
    assert!(!err.contains("corrupt"), "not corruption: {err}");
}

/// The same stream with a dictionary under the bound (64 MiB, as `xz -9`) is read as usual:
/// the limit refuses bombs, not files.
#[test]
fn an_xz_stream_with_a_large_but_real_dictionary_is_read() {
    let dir = TempDir::new("rocemon-xz64").unwrap();
    let (p, want) = many_flows_file(dir.path());
    let ok = dir.path().join("big-dict.pcap.xz");
    // Code 26: 2^13 * 2^(26/2) = 64 MiB.
    std::fs::write(&ok, xz_with_dictionary(&std::fs::read(&p).unwrap(), 26)).unwrap();
    assert_eq!(analyze_json(&ok), want);
}

/// `bytes` (a pcapng file as the fixture writer makes it: little-endian, a section header
/// block without options) with `len` bytes of `shb_userappl` options in its section header
/// (one option holds at most 65,535 bytes: more take several).
fn with_long_section_header(bytes: &[u8], len: usize) -> Vec<u8> {
    assert_eq!(&bytes[0..4], &[0x0a, 0x0d, 0x0d, 0x0a], "a pcapng file");
    let shb_len = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    assert_eq!(shb_len, 28, "the writer's section header has no options");
    let mut options = Vec::new();
    let mut left = len;
    while left > 0 {
        let n = left.min(65_532);
        options.extend_from_slice(&4u16.to_le_bytes()); // shb_userappl
        options.extend_from_slice(&(n as u16).to_le_bytes());
        options.extend(std::iter::repeat_n(b'a', n));
        options.extend(std::iter::repeat_n(0, n.div_ceil(4) * 4 - n));
        left -= n;
    }
    options.extend_from_slice(&[0, 0, 0, 0]); // opt_endofopt
    let new_len = shb_len + options.len();
    let mut out = Vec::with_capacity(bytes.len() + new_len);
    out.extend_from_slice(&bytes[0..4]);
    out.extend_from_slice(&(new_len as u32).to_le_bytes());
    out.extend_from_slice(&bytes[8..24]); // magic, version, section length
    out.extend_from_slice(&options);
    out.extend_from_slice(&(new_len as u32).to_le_bytes());
    out.extend_from_slice(&bytes[shb_len..]);
    out
}

/// A valid pcapng whose section header block is larger than the first read (a 4,100-byte
/// application name, as a long capture comment makes): tshark reads it, and so does rocemon,
/// with the same counts as tshark and the report of the file without the option.
#[test]
fn a_pcapng_with_a_long_section_header_is_read() {
    use rocemon_testkit::tshark;
    let dir = TempDir::new("rocemon-longshb").unwrap();
    let plain = fixtures::mixed_ipv6_vlan().write(dir.path()).unwrap();
    let want = analyze_json(&plain);
    for len in [4_100usize, 70_000, 1 << 20] {
        let p = dir.path().join(format!("long-shb-{len}.pcapng"));
        std::fs::write(
            &p,
            with_long_section_header(&std::fs::read(&plain).unwrap(), len),
        )
        .unwrap();
        let got = analyze_json(&p);
        assert_eq!(got, want, "an option of {len} bytes");
        if tshark::available() {
            let e = tshark::expected(&p).unwrap();
            assert_eq!(
                u(&got["frames"]),
                e.frames,
                "an option of {len} bytes: frames"
            );
            assert_eq!(
                u(&got["roce"]["packets"]),
                e.roce_packets,
                "an option of {len} bytes: RoCE packets"
            );
        }
    }
}

/// Garbage on standard input is refused as soon as its first four bytes arrive, while the
/// writer keeps the pipe open (it waited for 4 KiB or the end of input). The deadline only
/// bounds a failing run.
#[test]
fn garbage_on_an_open_pipe_is_refused_at_once() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .args(["analyze", "--format", "json", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run rocemon");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"this is no capture\n").unwrap();
    stdin.flush().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if std::time::Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    drop(stdin);
    let Some(status) = status else {
        let _ = child.kill();
        panic!("rocemon still waits for more input after 19 bytes of garbage");
    };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("not a pcap or pcapng file"), "{err}");
}

/// `-r FILE`, as tshark and tcpdump take a capture, reads it like a plain argument.
#[test]
fn dash_r_reads_a_capture_like_a_plain_argument() {
    let dir = TempDir::new("rocemon-dash-r").unwrap();
    let (p, want) = many_flows_file(dir.path());
    let got = rocemon_testkit::analyze_json(
        env!("CARGO_BIN_EXE_rocemon"),
        &["-r", p.to_str().unwrap()],
        &[],
    );
    assert_eq!(got, want);
}

/// One flow at 87.8 Mb/s (1,098-byte frames every 100 us, by the generator) for 1.5 s:
/// an elephant above a 50 Mb/s threshold, not above 100 Mb/s, written in bits or in bytes.
#[test]
fn the_elephant_threshold_takes_bits_per_second_with_suffixes() {
    use rocemon_testkit::findings_lab::{elephant, T0};
    use rocemon_testkit::fixtures::{whole, Format};
    let dir = TempDir::new("rocemon-rate-flag").unwrap();
    let frames = elephant("10.92.0.1", 0, T0, 1_500);
    let bits = frames[0].1.len() as f64 * 8.0 * 10_000.0;
    assert!((bits - 87.84e6).abs() < 1e3, "{bits}");
    let p = whole("one-flow", Format::PcapNanos, frames, false)
        .write(dir.path())
        .unwrap();
    let elephants = |rate: &str| {
        let j = rocemon_testkit::analyze_json(
            env!("CARGO_BIN_EXE_rocemon"),
            &["--elephant-bps", rate],
            &[&p],
        );
        j["elephants"].as_array().unwrap().len()
    };
    assert_eq!(elephants("50M"), 1, "50 Mb/s");
    assert_eq!(
        elephants("50000000"),
        1,
        "a plain number is bits per second"
    );
    assert_eq!(elephants("100Mbit"), 0, "100 Mb/s");
    assert_eq!(elephants("12.5MB"), 0, "12.5 MB/s is 100 Mb/s");
    assert_eq!(elephants("6.25MB/s"), 1, "6.25 MB/s is 50 Mb/s");
}

/// The JSON says its layout's version and the captures it read, as named.
#[test]
fn the_json_names_its_schema_version_and_inputs() {
    let dir = TempDir::new("rocemon-json-inputs").unwrap();
    let (p, _) = many_flows_file(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_rocemon"))
        .args(["analyze", "--format", "json", "--no-progress"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(out.status.success());
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["schema_version"], 1);
    assert_eq!(j["inputs"], serde_json::json!([p.display().to_string()]));
}
