//! Analyze phase: `rocemon analyze` over one million frames against `cat` and tshark: mixed
//! frame sizes (with tshark), small frames and large frames (the two ratios to `cat` the
//! targets name); and long steady captures (one flow, 5 to 30 minutes), whose time must grow
//! with their frames only.

use super::*;

/// One million frames of mixed opcodes over 10,000 flows, each frame's payload one of
/// `payloads` (bytes after the BTH and its extension headers).
pub(crate) fn big_capture(dir: &Path, name: &'static str, payloads: &[usize]) -> Result<PathBuf> {
    let mut rng = Rng(0xB16_CA97);
    let ops: [u8; 8] = [0x06, 0x07, 0x08, 0x0A, 0x04, 0x11, 0x0C, 0x10];
    let flows: Vec<Roce> = (0..10_000u32)
        .map(|i| {
            let a = ip(&format!(
                "10.{}.{}.{}",
                10 + i / 65536,
                (i / 256) % 256,
                i % 256
            ));
            Roce::new(
                a,
                ip("10.250.0.1"),
                0xC000 | (rng.below(0x4000) as u16),
                0x100 + i,
                0x07,
            )
        })
        .collect();
    let mut frames = Vec::with_capacity(1_000_000);
    for k in 0..1_000_000u64 {
        let mut r = flows[rng.below(flows.len() as u64) as usize].clone();
        r.opcode = ops[rng.below(ops.len() as u64) as usize];
        r.psn = k as u32 & 0xFF_FFFF;
        r.payload = payloads[rng.below(payloads.len() as u64) as usize];
        r.dma_len = r.payload as u32;
        r.ecn = rng.below(4) as u8;
        frames.push((1_700_000_000_000_000_000 + k * 1000, r.frame()));
    }
    settled(whole(name, Format::PcapNanos, frames, false).write(dir)?)
}

/// A capture just written, once its pages are on disk: a gigabyte still dirty is written
/// back by the kernel's flusher while it is timed, on one of this machine's two CPUs.
pub(crate) fn settled(path: PathBuf) -> Result<PathBuf> {
    std::fs::File::open(&path)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("sync {}", path.display()))?;
    Ok(path)
}

pub(crate) fn time_cmd(cmd: &mut Command) -> Result<f64> {
    let t = Instant::now();
    let out = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()?;
    if !out.status.success() {
        bail!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(t.elapsed().as_secs_f64())
}

/// `rocemon analyze` and `cat` on one capture: medians of five runs, interleaved (page cache
/// warm).
fn against_cat(file: &Path) -> Result<(f64, f64)> {
    let cat = || {
        time_cmd(
            Command::new("sh")
                .arg("-c")
                .arg(format!("cat {} > /dev/null", file.display())),
        )
    };
    let ours = || {
        time_cmd(
            Command::new(BIN)
                .args(["analyze", "--format", "json", "--no-progress"])
                .arg(file),
        )
    };
    cat()?; // warm the page cache
    let (mut c, mut o) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        c.push(cat()?);
        o.push(ours()?);
    }
    Ok((median(o), median(c)))
}

/// One flow at one packet per millisecond for `minutes` (a long steady capture: the training
/// rhythm's per-millisecond series is its whole length).
fn steady_capture(dir: &Path, minutes: u64) -> Result<PathBuf> {
    let name: &'static str = match minutes {
        5 => "bench_steady_5min",
        15 => "bench_steady_15min",
        _ => "bench_steady_30min",
    };
    let mut r = Roce::new(ip("10.9.0.1"), ip("10.9.0.2"), 0xC123, 0x200, 0x0A);
    r.payload = 64;
    r.dma_len = 64;
    let frames = (0..minutes * 60_000)
        .map(|k| {
            r.psn = k as u32 & 0xFF_FFFF;
            (1_700_000_000_000_000_000 + k * 1_000_000, r.frame())
        })
        .collect();
    whole(name, Format::PcapNanos, frames, false).write(dir)
}

/// `analyze` of steady captures of 5, 15 and 30 minutes: time in proportion to the frames
/// (the target: the 30-minute capture's time per frame within 1.5x the 5-minute one's).
fn steady_bench(dir: &Path) -> Result<Value> {
    let mut rows = Vec::new();
    for minutes in [5u64, 15, 30] {
        let file = steady_capture(dir, minutes)?;
        let (ours_s, _) = against_cat(&file)?;
        let _ = std::fs::remove_file(&file);
        let frames = minutes * 60_000;
        eprintln!("analyze: steady {minutes} min ({frames} frames): {ours_s:.2} s");
        rows.push(
            json!({ "minutes": minutes, "frames": frames, "rocemon_seconds": ours_s,
                          "ns_per_frame": ours_s * 1e9 / frames as f64 }),
        );
    }
    let per = |i: usize| rows[i]["ns_per_frame"].as_f64().unwrap_or(0.0);
    let growth = per(2) / per(0).max(1e-9);
    Ok(json!({ "captures": rows, "ns_per_frame_30_over_5": growth }))
}

/// The by-size captures: small frames (payloads of 0 or 64 bytes) and large (1024).
pub(crate) const SIZES: [(&str, &[usize]); 2] =
    [("bench_1m_small", &[0, 64]), ("bench_1m_large", &[1024])];

/// The mixed capture that tshark reads too: payloads of 0, 64, 256 and 1024 bytes.
pub(crate) const MIXED: (&str, &[usize]) = ("bench_1m", &[0, 64, 256, 1024]);

pub(crate) fn analyze_bench(dir: &Path) -> Result<Value> {
    let frames = 1_000_000f64;
    let mut sizes = serde_json::Map::new();
    for (file_name, payloads) in SIZES {
        let name = file_name.trim_start_matches("bench_1m_");
        let file = big_capture(dir, file_name, payloads)?;
        let size = std::fs::metadata(&file)?.len();
        let (ours_s, cat_s) = against_cat(&file)?;
        let _ = std::fs::remove_file(&file);
        eprintln!(
            "analyze: {name} frames ({:.0} MB): rocemon {ours_s:.2} s, cat {cat_s:.3} s (x{:.1})",
            size as f64 / 1e6,
            ours_s / cat_s
        );
        sizes.insert(
            name.into(),
            json!({ "file_bytes": size, "rocemon_seconds": ours_s, "cat_seconds": cat_s,
                    "rocemon_frames_per_second": frames / ours_s, "ratio_vs_cat": ours_s / cat_s }),
        );
    }
    let file = big_capture(dir, MIXED.0, MIXED.1)?;
    let size = std::fs::metadata(&file)?.len();
    let (ours_s, cat_s) = against_cat(&file)?;
    let tshark_s = time_cmd(Command::new("tshark").arg("-n").arg("-r").arg(&file).args([
        "-T",
        "fields",
        "-e",
        "infiniband.bth.opcode",
    ]))?;
    eprintln!(
        "analyze: rocemon {ours_s:.2} s ({:.0} frames/s), tshark {tshark_s:.2} s, cat {cat_s:.3} s",
        frames / ours_s
    );
    let _ = std::fs::remove_file(&file);
    let steady = steady_bench(dir)?;
    Ok(json!({
        "steady": steady,
        "frames": 1_000_000, "file_bytes": size,
        "rocemon_seconds": ours_s, "rocemon_frames_per_second": frames / ours_s,
        "tshark_seconds": tshark_s, "tshark_frames_per_second": frames / tshark_s,
        "cat_seconds": cat_s,
        "speedup_vs_tshark": tshark_s / ours_s, "ratio_vs_cat": ours_s / cat_s,
        "by_frame_size": sizes,
    }))
}
