//! Reading a Prometheus text scrape in tests: sums over label filters, one series' value,
//! label values.

/// Sums the samples of metric `name` whose labels include every `(key, value)` of `filter`.
/// A metric with no sample at all in `text` is an error (panics): a renamed or vanished
/// metric must fail a test, not read as zero. See [`try_metric_sum`] for scrapes that may
/// come before the agent serves.
pub fn metric_sum(text: &str, name: &str, filter: &[(&str, &str)]) -> f64 {
    try_metric_sum(text, name, filter).unwrap_or_else(|| {
        panic!("no series of {name} in the scrape (renamed, or never exported?)")
    })
}

/// [`metric_sum`], or None when `text` holds no sample of `name` at all.
pub fn try_metric_sum(text: &str, name: &str, filter: &[(&str, &str)]) -> Option<f64> {
    let mut found = false;
    let mut sum = 0.0;
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = l.rsplit_once(' ') else {
            continue;
        };
        let (n, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if n != name {
            continue;
        }
        found = true;
        let ok = filter
            .iter()
            .all(|(k, v)| labels.split(',').any(|kv| kv == format!("{k}=\"{v}\"")));
        if ok {
            sum += value.parse::<f64>().unwrap_or(0.0);
        }
    }
    found.then_some(sum)
}

/// Label value of `key` for every sample of `name`.
pub fn metric_labels(text: &str, name: &str, key: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let v = series.split(',').find_map(|kv| {
                let kv = kv.trim_start_matches(&format!("{name}{{"));
                kv.strip_prefix(&format!("{key}=\""))
                    .map(|x| x.trim_end_matches('}').trim_end_matches('"').to_string())
            })?;
            Some((v, value.parse().ok()?))
        })
        .collect()
}

/// The value of the first sample of `name` whose labels include every `(key, value)` of
/// `filter`; None when there is none (a gauge that is absent on purpose).
pub fn metric_value(text: &str, name: &str, filter: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        let (n, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let ok = n == name
            && filter
                .iter()
                .all(|(k, v)| labels.split(',').any(|kv| kv == format!("{k}=\"{v}\"")));
        if ok {
            value.parse().ok()
        } else {
            None
        }
    })
}

/// `GET path` from `addr` in the calling thread's namespace (HTTP/1.0, one connection): the
/// body when the status is 200, else None (not serving yet, gone, or an error status).
pub fn http_get_ok(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    let (head, body) = r.split_once("\r\n\r\n")?;
    (head.split_whitespace().nth(1)? == "200").then(|| body.to_string())
}

/// `s` percent-encoded for a URL's query (a PromQL expression in `/api/v1/query?query=`).
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
