//! A histogram whose buckets are counted elsewhere: the kernel counts RDMA message sizes into
//! per-bucket counters (a `prometheus::Histogram` only takes observations one by one), and
//! this collector exposes their totals as a Prometheus histogram (cumulative `le` buckets,
//! `_sum`, `_count`).

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Bucket, Histogram, LabelPair, Metric, MetricFamily, MetricType};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One label set's totals: counts per bucket (not cumulative; the last is +Inf), and the sum.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub buckets: Vec<u64>,
    pub sum: f64,
}

#[derive(Clone)]
pub struct CountedHistogram {
    desc: Desc,
    /// Upper bounds of every bucket but the last (+Inf).
    bounds: Vec<f64>,
    labels: Vec<String>,
    series: Arc<Mutex<BTreeMap<Vec<String>, Totals>>>,
}

impl CountedHistogram {
    pub fn new(
        name: &str,
        help: &str,
        labels: &[&str],
        bounds: Vec<f64>,
    ) -> prometheus::Result<Self> {
        let labels: Vec<String> = labels.iter().map(|s| s.to_string()).collect();
        Ok(CountedHistogram {
            desc: Desc::new(name.into(), help.into(), labels.clone(), Default::default())?,
            bounds,
            labels,
            series: Default::default(),
        })
    }

    /// Adds counts to a label set's buckets (`counts[i]` into bucket `i`) and to its sum.
    pub fn add(&self, values: &[&str], counts: &[u64], sum: f64) {
        let Ok(mut s) = self.series.lock() else {
            return;
        };
        let t = s
            .entry(values.iter().map(|v| v.to_string()).collect())
            .or_insert_with(|| Totals {
                buckets: vec![0; self.bounds.len() + 1],
                sum: 0.0,
            });
        for (b, c) in t.buckets.iter_mut().zip(counts) {
            *b += c;
        }
        t.sum += sum;
    }

    /// A label set's totals (tests).
    pub fn totals(&self, values: &[&str]) -> Option<Totals> {
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        self.series.lock().ok()?.get(&key).cloned()
    }
}

impl Collector for CountedHistogram {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Ok(series) = self.series.lock() else {
            return Vec::new();
        };
        let mut mf = MetricFamily::default();
        mf.set_name(self.desc.fq_name.clone());
        mf.set_help(self.desc.help.clone());
        mf.set_field_type(MetricType::HISTOGRAM);
        for (values, t) in series.iter() {
            let mut h = Histogram::default();
            let mut cum = 0;
            let mut buckets = Vec::with_capacity(self.bounds.len());
            for (le, c) in self.bounds.iter().zip(&t.buckets) {
                cum += c;
                let mut b = Bucket::default();
                b.set_upper_bound(*le);
                b.set_cumulative_count(cum);
                buckets.push(b);
            }
            h.set_bucket(buckets);
            h.set_sample_count(t.buckets.iter().sum());
            h.set_sample_sum(t.sum);
            let mut m = Metric::default();
            m.set_label(
                self.labels
                    .iter()
                    .zip(values)
                    .map(|(n, v)| {
                        let mut l = LabelPair::default();
                        l.set_name(n.clone());
                        l.set_value(v.clone());
                        l
                    })
                    .collect(),
            );
            m.set_histogram(h);
            mf.mut_metric().push(m);
        }
        vec![mf]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_cumulative_buckets_sum_and_count() {
        let h = CountedHistogram::new("x_bytes", "X.", &["op"], vec![1024.0, 4096.0]).unwrap();
        h.add(&["send"], &[1, 2, 3], 10.0);
        h.add(&["send"], &[1, 0, 0], 5.0);
        let r = prometheus::Registry::new();
        r.register(Box::new(h.clone())).unwrap();
        let mut out = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &r.gather(), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        for line in [
            "x_bytes_bucket{op=\"send\",le=\"1024\"} 2",
            "x_bytes_bucket{op=\"send\",le=\"4096\"} 4",
            "x_bytes_bucket{op=\"send\",le=\"+Inf\"} 7",
            "x_bytes_sum{op=\"send\"} 15",
            "x_bytes_count{op=\"send\"} 7",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
